#include "synth/weight_init.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace mt {
namespace {

constexpr int32_t kUnusedTokenType = 5;  // TokenType::kUnused in tokenizer/vocab_spec.h

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// An approximately standard normal value from one 64-bit hash: the Irwin-Hall sum of four
// 16-bit uniforms, centred and scaled to unit variance. Cheap enough for 30 B weights.
float NormalFromHash(uint64_t h) {
  constexpr float kInv = 1.0f / 65536.0f;
  float s = static_cast<float>(h & 0xFFFF) + static_cast<float>((h >> 16) & 0xFFFF) +
            static_cast<float>((h >> 32) & 0xFFFF) + static_cast<float>(h >> 48);
  return (s * kInv + 2.0f * kInv - 2.0f) * 1.7320508f;  // (sum - 2) * sqrt(12 / 4)
}

// Standard normal quantiles of n evenly spaced probabilities, shuffled per (seed, layer)
// so that each layer has different hot experts.
std::vector<float> ShuffledNormalQuantiles(uint32_t n, uint64_t seed) {
  std::vector<float> q(n);
  for (uint32_t i = 0; i < n; ++i) {
    double p = (i + 0.5) / n;
    // Inverse normal CDF by Newton's method on erfc; n is at most a few hundred.
    double x = 0;
    for (int it = 0; it < 50; ++it) {
      double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
      double pdf = std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
      x -= (cdf - p) / std::max(pdf, 1e-12);
    }
    q[i] = static_cast<float>(x);
  }
  for (uint32_t i = n; i > 1; --i) {  // Fisher-Yates with a hash stream
    uint64_t j = SplitMix64(seed + i) % i;
    std::swap(q[i - 1], q[j]);
  }
  return q;
}

// A seeded unit vector of length n (shared by embeddings and routers).
std::vector<float> SkewDirection(uint32_t n, uint64_t seed) {
  std::vector<float> u(n);
  double norm = 0;
  for (uint32_t i = 0; i < n; ++i) {
    u[i] = NormalFromHash(SplitMix64(SplitMix64(seed ^ 0x5EED) + i));
    norm += double(u[i]) * u[i];
  }
  for (float& x : u) x = static_cast<float>(x / std::sqrt(norm));
  return u;
}

}  // namespace

uint64_t TensorSeed(uint64_t seed, const std::string& tensor_name) {
  uint64_t h = SplitMix64(seed);
  for (unsigned char c : tensor_name) h = SplitMix64(h ^ c);
  return h;
}

WeightInit InitFor(const TensorDesc& desc, const InitContext& ctx) {
  using R = TensorRole;
  const HParams& hp = ctx.hp;
  const float residual = 1.0f / std::sqrt(2.0f * static_cast<float>(hp.n_layer));
  auto inv_sqrt = [](uint64_t n) { return 1.0f / std::sqrt(static_cast<float>(n)); };
  const uint64_t fan_in = desc.shape[0];  // a projection's input width: its row length
  WeightInit w;
  if (desc.role == R::kSsmDt || desc.role == R::kSsmA) {
    // The DeltaNet decay g = softplus(a + ssm_dt) * ssm_a with a ~ N(0, 1): exp(g) around
    // 0.8, so the state remembers a few tokens back (the checkpoints' A_log and dt_bias spread
    // wider).
    w.mean = desc.role == R::kSsmDt ? -2.0f : -1.0f;
    w.stddev = desc.role == R::kSsmDt ? 0.5f : 0.2f;
    return w;
  }
  if (desc.suffix == TensorSuffix::kBias) {
    // gpt-oss's expert gate/up biases wide enough that its SwiGLU's clamps at 7 bite (for a
    // few in a thousand activations), so tests see them.
    const bool clamped = desc.role == R::kFfnGateExps || desc.role == R::kFfnUpExps;
    w.stddev = clamped ? 2.0f : 0.02f;
    return w;
  }
  switch (desc.role) {
    case R::kTokenEmbd:
      w.stddev = 1.0f;
      if (ctx.router_offset_scale > 0) {
        // |component along u| = share * |random part| = share * sqrt(n_embd).
        w.direction = SkewDirection(hp.n_embd, ctx.seed);
        w.direction_coef.assign(hp.n_vocab, kSkewEmbeddingShare * std::sqrt(float(hp.n_embd)));
      }
      break;
    case R::kOutputNorm:
    case R::kAttnNorm:
    case R::kFfnNorm:
    case R::kAttnPostNorm:
    case R::kNextnEnorm:
    case R::kNextnHnorm:
    case R::kNextnSharedHeadNorm:
    case R::kAttnQNorm:
    case R::kAttnKNorm:
    case R::kAttnQANorm:
    case R::kAttnKvANorm:
    case R::kSsmNorm:
      w.mean = 1.0f;
      w.stddev = 0.02f;
      break;
    case R::kOutput:
      w.stddev = 3.0f * inv_sqrt(hp.n_embd);  // logits with std ~3: peaked, not degenerate
      if (!ctx.token_types.empty()) {
        w.row_scale.assign(ctx.token_types.size(), 1.0f);
        for (size_t i = 0; i < ctx.token_types.size(); ++i) {
          if (ctx.token_types[i] == kUnusedTokenType) w.row_scale[i] = 0.01f;
        }
      }
      break;
    case R::kAttnQ:
    case R::kAttnK:
    case R::kAttnV:
    case R::kAttnQA:
    case R::kAttnQB:
    case R::kAttnKvAMqa:
    case R::kAttnVB:
    case R::kFfnGate:
    case R::kFfnUp:
    case R::kFfnGateExps:
    case R::kFfnUpExps:
    case R::kFfnGateShexp:
    case R::kFfnUpShexp:
    case R::kFfnGateInpShexp:
    case R::kNextnEhProj:
    case R::kAttnQkv:
    case R::kAttnGate:
    case R::kSsmConv1d:
    case R::kSsmBetaAlpha:
    case R::kSsmBeta:
    case R::kSsmAlpha:
      w.stddev = inv_sqrt(fan_in);
      break;
    case R::kAttnKB:
      // (N, L, n_head): stored transposed, its input is the latent of shape[1] values.
      w.stddev = inv_sqrt(desc.shape[1]);
      break;
    case R::kAttnKvB: {
      // (L, n_head*(N+V)): the k_b and v_b of the current layout, rearranged.
      const MlaParts& mla = ctx.parts->layers[desc.layer].attention.mla;
      WeightInit::SplitKvB split;
      split.rank = mla.kv_lora_rank;
      split.nope = mla.head_dim_nope;
      split.v = mla.head_dim_v;
      split.k_b_stddev = split.v_b_stddev = inv_sqrt(mla.kv_lora_rank);
      split.k_b_seed = TensorSeed(ctx.seed, TensorName(R::kAttnKB, desc.layer));
      split.v_b_seed = TensorSeed(ctx.seed, TensorName(R::kAttnVB, desc.layer));
      w.kv_b_from_split = split;
      break;
    }
    case R::kAttnOutput:
    case R::kSsmOut:
    case R::kFfnDown:
    case R::kFfnDownExps:
    case R::kFfnDownShexp:
      w.stddev = inv_sqrt(fan_in) * residual;
      break;
    case R::kFfnExpProbsB:  // a bias (handled above)
    case R::kSsmDt:
    case R::kSsmA:
      break;
    case R::kAttnSinks:
      w.stddev = 1.0f;  // logits comparable to the scores: the sink takes a share, not all
      break;
    case R::kFfnGateInp: {
      // Router logits with std ~1.5 per expert over normalised hidden states.
      w.stddev = 1.5f * inv_sqrt(hp.n_embd);
      if (ctx.router_offset_scale > 0) {
        // A normalised hidden state h = (g + a u) / rms, |g| ~ sqrt(n), a = share sqrt(n):
        // h . u ~ share sqrt(n) / sqrt(1 + share^2), and the random part of the logit has
        // std 1.5 / sqrt(1 + share^2).
        const float share2 = kSkewEmbeddingShare * kSkewEmbeddingShare;
        const float proj =
            kSkewEmbeddingShare * std::sqrt(float(hp.n_embd)) / std::sqrt(1 + share2);
        const float sigma = 1.5f / std::sqrt(1 + share2);
        std::vector<float> q =
            ShuffledNormalQuantiles(hp.n_expert, SplitMix64(ctx.seed ^ (desc.layer + 1)));
        w.direction = SkewDirection(hp.n_embd, ctx.seed);
        w.direction_coef.resize(hp.n_expert);
        for (uint32_t e = 0; e < hp.n_expert; ++e) {
          w.direction_coef[e] = ctx.router_offset_scale * sigma * q[e] / proj;
        }
      }
      break;
    }
  }
  return w;
}

namespace {

// Element (row, col) of a tensor whose rows are row_len long: a pure function of its place.
float Element(float mean, float stddev, uint64_t tensor_seed, uint64_t row, uint64_t row_len,
              uint64_t col) {
  const uint64_t base = tensor_seed + row * row_len * 0x9E3779B97F4A7C15ull;
  return mean + stddev * NormalFromHash(SplitMix64(base + col));
}

}  // namespace

void GenerateRows(const WeightInit& init, uint64_t tensor_seed, uint64_t first_row, uint64_t n_rows,
                  uint64_t row_len, float* out) {
  for (uint64_t r = 0; r < n_rows; ++r) {
    const uint64_t row = first_row + r;
    float* dst = out + r * row_len;
    if (init.kv_b_from_split) {
      const WeightInit::SplitKvB& s = *init.kv_b_from_split;
      const uint64_t h = row / (s.nope + s.v), i = row % (s.nope + s.v);
      for (uint64_t c = 0; c < row_len; ++c) {
        dst[c] = i < s.nope
                     ? Element(0, s.k_b_stddev, s.k_b_seed, h * s.rank + c, s.nope, i)
                     : Element(0, s.v_b_stddev, s.v_b_seed, h * s.v + (i - s.nope), s.rank, c);
      }
      continue;
    }
    const float sd = init.stddev * (init.row_scale.empty() ? 1.0f : init.row_scale[row]);
    for (uint64_t c = 0; c < row_len; ++c)
      dst[c] = Element(init.mean, sd, tensor_seed, row, row_len, c);
    if (!init.direction_coef.empty()) {
      const float a = init.direction_coef[row];
      for (uint64_t c = 0; c < row_len; ++c) dst[c] += a * init.direction[c];
    }
  }
}

double SimulatedTopShare(float offset_scale, uint32_t n_expert, uint32_t n_expert_used,
                         double top_fraction) {
  constexpr int kSamples = 4000;
  std::vector<float> offset = ShuffledNormalQuantiles(n_expert, 12345);
  for (float& o : offset) o *= offset_scale;
  std::vector<uint64_t> count(n_expert, 0);
  std::vector<std::pair<float, uint32_t>> logits(n_expert);
  for (int s = 0; s < kSamples; ++s) {
    for (uint32_t e = 0; e < n_expert; ++e) {
      logits[e] = {offset[e] + NormalFromHash(SplitMix64(s * 1000003ull + e)), e};
    }
    std::partial_sort(logits.begin(), logits.begin() + n_expert_used, logits.end(),
                      [](auto& a, auto& b) { return a.first > b.first; });
    for (uint32_t k = 0; k < n_expert_used; ++k) ++count[logits[k].second];
  }
  std::sort(count.begin(), count.end(), std::greater<>());
  uint32_t n_top = std::max<uint32_t>(1, static_cast<uint32_t>(std::ceil(top_fraction * n_expert)));
  uint64_t top = std::accumulate(count.begin(), count.begin() + n_top, uint64_t{0});
  return static_cast<double>(top) / (double(kSamples) * n_expert_used);
}

float CalibrateRouterOffsets(float skew, uint32_t n_expert, uint32_t n_expert_used) {
  if (skew <= 0 || n_expert_used >= n_expert) return 0;
  // Target share of the top 20 %: uniform at skew 0, 0.5 at skew 1, linear beyond, and
  // below the share top-k routing can give (all of it, when the top 20 % are >= k experts).
  const uint32_t n_top = static_cast<uint32_t>(std::ceil(0.2 * n_expert));
  const double uniform = double(n_top) / n_expert;
  const double most = std::min(1.0, double(n_top) / n_expert_used);
  const double target = std::min(0.97 * most, uniform + (0.5 - uniform) * skew);
  float lo = 0, hi = 16;
  for (int it = 0; it < 30; ++it) {
    float mid = 0.5f * (lo + hi);
    if (SimulatedTopShare(mid, n_expert, n_expert_used, 0.2) < target)
      lo = mid;
    else
      hi = mid;
  }
  return 0.5f * (lo + hi);
}

}  // namespace mt
