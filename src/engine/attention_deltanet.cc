// Gated DeltaNet linear attention (engine/attention_block.h, model/layer_parts.h).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "engine/attention_block.h"
#include "kernels/delta_net.h"
#include "kernels/ops.h"

namespace mt {
namespace {

bool IsDeltaNet(const Model& m, int il) {
  return m.parts().layers[il].attention.kind == AttentionKind::kDeltaNet;
}

DeltaNetParts FirstDeltaNet(const Model& m) {
  for (const LayerParts& l : m.parts().layers) {
    if (l.attention.kind == AttentionKind::kDeltaNet) return l.attention.delta_net;
  }
  MT_CHECK_MSG(false, "DeltaNetAttention: the model has no DeltaNet layer");
  return {};
}

// ggml's sigmoid, silu and softplus (llama.cpp's graph ops of these layers).
float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float Silu(float x) { return x / (1.0f + std::exp(-x)); }
float Softplus(float x) { return x > 20.0f ? x : std::log(1.0f + std::exp(x)); }

// ggml_l2_norm: x / max(|x|, eps), the squares summed in double.
void L2Normalize(float* x, int64_t n, float eps) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float scale = 1.0f / std::fmax(std::sqrt(static_cast<float>(sum)), eps);
  for (int64_t i = 0; i < n; ++i) x[i] *= scale;
}

constexpr int64_t kConvChannelsPerItem = 64;

}  // namespace

uint64_t DeltaNetAttention::StateBytes(const DeltaNetParts& d) {
  const uint64_t conv = uint64_t{d.conv_channels()} * (d.conv_kernel - 1);
  const uint64_t heads = uint64_t{d.n_v_heads} * d.head_v_dim * d.head_k_dim;
  return (conv + heads) * sizeof(float);
}

DeltaNetAttention::DeltaNetAttention(const Model& model, ThreadPool& pool,
                                     const AttentionShape& shape)
    : model_(model),
      hp_(model.hparams()),
      pool_(pool),
      shape_(shape),
      d_(FirstDeltaNet(model)),
      C_(d_.conv_channels()),
      V_(d_.value_dim()),
      H_(d_.n_v_heads),
      S_(d_.head_v_dim),
      conv_floats_(C_ * (d_.conv_kernel - 1)),
      copy_floats_(conv_floats_ + H_ * S_ * d_.head_k_dim),
      states_(shape.n_seq) {
  MT_CHECK(d_.head_k_dim == d_.head_v_dim && H_ % d_.n_k_heads == 0);
}

void DeltaNetAttention::SizeScratch(ScratchSizer& sizer) {
  const size_t B = shape_.n_batch;
  sizer.Resize(qkv_, B * C_);
  sizer.Resize(z_, B * V_);
  sizer.Resize(ba_, B * 2 * H_);
  sizer.Resize(bg_, B * 2 * H_);
  sizer.Resize(o_, B * V_);
  sizer.Resize(order_, B);
  sizer.Reserve(seq_runs_, B);
  sizer.Reserve(in_, static_cast<int64_t>(B), std::max<int64_t>(hp_.n_embd, V_));
}

uint64_t DeltaNetAttention::kv_bytes() const {
  uint64_t bytes = 0;
  for (uint32_t il = 0; il < hp_.n_layer; ++il) {
    if (IsDeltaNet(model_, static_cast<int>(il))) {
      bytes += uint64_t{shape_.n_seq} * 3 * static_cast<uint64_t>(copy_floats_) * sizeof(float);
    }
  }
  return bytes;
}

Status DeltaNetAttention::AllocateKv(bool populate) {
  state_.resize(hp_.n_layer);
  for (uint32_t il = 0; il < hp_.n_layer; ++il) {
    if (!IsDeltaNet(model_, static_cast<int>(il))) continue;
    Result<AlignedBuffer> b = AlignedBuffer::Allocate(uint64_t{shape_.n_seq} * 3 *
                                                      static_cast<uint64_t>(copy_floats_) * 4);
    if (!b.ok()) return b.status().WithContext("recurrent state");
    if (populate) MT_RETURN_IF_ERROR(b->Populate().WithContext("recurrent state"));
    state_[il] = std::move(b.value());
  }
  return Status::Ok();
}

float* DeltaNetAttention::State(int il, uint32_t seq, int copy) {
  float* base = reinterpret_cast<float*>(state_[il].data());
  return base + (int64_t{seq} * 3 + copy) * copy_floats_;
}

const float* DeltaNetAttention::SourceState(int il, uint32_t seq) {
  const int copy = states_.SourceCopy(seq);
  return copy < 0 ? nullptr : State(il, seq, copy);
}

void DeltaNetAttention::GroupBySequence(std::span<const BatchToken> batch) {
  const int n = static_cast<int>(batch.size());
  for (int t = 0; t < n; ++t) order_[t] = t;
  std::stable_sort(order_.begin(), order_.begin() + n,
                   [&](int a, int b) { return batch[a].seq < batch[b].seq; });
  seq_runs_.clear();
  for (int i = 0; i < n; ++i) {
    const uint32_t seq = batch[order_[i]].seq;
    if (seq_runs_.empty() || seq_runs_.back().seq != seq) seq_runs_.push_back({seq, i, i});
    seq_runs_.back().end = i + 1;
  }
}

Status DeltaNetAttention::Run(int il, std::span<const BatchToken> batch, const float* xn,
                              const float* /*rope_cs*/, float* out) {
  const LayerWeights& L = model_.layer(il);
  const int n = static_cast<int>(batch.size());
  const int64_t D = hp_.n_embd, H2 = 2 * H_;
  in_.Set(xn, D, n, D);
  if (d_.separate_beta_alpha) {
    ProjectAll(pool_,
               {{&L.wqkv, qkv_.data(), C_},
                {&L.wqkv_gate, z_.data(), V_},
                {&L.ssm_beta, ba_.data(), H2},
                {&L.ssm_alpha, ba_.data() + H_, H2}},
               in_);
  } else {
    ProjectAll(
        pool_,
        {{&L.wqkv, qkv_.data(), C_}, {&L.wqkv_gate, z_.data(), V_}, {&L.ssm_ba, ba_.data(), H2}},
        in_);
  }
  // Each value head's beta = sigmoid(b) and decay exponent g = softplus(a + dt) * A.
  const int64_t per_k = H_ / d_.n_k_heads;
  for (int t = 0; t < n; ++t) {
    const float* ba = ba_.data() + t * H2;
    float* bg = bg_.data() + t * H2;
    for (int64_t h = 0; h < H_; ++h) {
      // ssm_ba: per key head, the b of its value heads, then their a.
      const int64_t b_at = d_.separate_beta_alpha ? h : (h / per_k) * 2 * per_k + h % per_k;
      const int64_t a_at = d_.separate_beta_alpha ? H_ + h : b_at + per_k;
      bg[h] = Sigmoid(ba[b_at]);
      bg[H_ + h] = Softplus(ba[a_at] + L.ssm_dt[h]) * L.ssm_a[h];
    }
  }
  GroupBySequence(batch);
  Convolve(il, batch);
  DeltaRule(il, batch);
  in_.Set(o_.data(), V_, n, V_);
  Project(pool_, L.ssm_out, in_, out, D);
  return Status::Ok();
}

// The causal convolution per channel over each sequence's tokens in order, its window the
// last d_conv - 1 inputs (from the state for the Decode's first token), then SiLU; q and k
// l2-normalised per key head.
void DeltaNetAttention::Convolve(int il, std::span<const BatchToken> batch) {
  const LayerWeights& L = model_.layer(il);
  const int w = static_cast<int>(d_.conv_kernel) - 1;  // the window kept between tokens
  const int64_t chunks = (C_ + kConvChannelsPerItem - 1) / kConvChannelsPerItem;
  const int64_t items = static_cast<int64_t>(seq_runs_.size()) * chunks;
  pool_.ParallelFor(items, [&](int64_t begin, int64_t end, int) {
    float window[64];
    for (int64_t item = begin; item < end; ++item) {
      const SeqRun& run = seq_runs_[item / chunks];
      const uint32_t s = run.seq;
      const int64_t c0 = item % chunks * kConvChannelsPerItem;
      const int64_t c1 = std::min(C_, c0 + kConvChannelsPerItem);
      const bool first = states_.IsFirst(s, batch[order_[run.begin]].pos);
      const float* from = first ? SourceState(il, s) : State(il, s, NextCopy(s));
      float* next = State(il, s, NextCopy(s));
      float* checkpoint = State(il, s, RecurrentStates::kCheckpoint);
      for (int64_t c = c0; c < c1; ++c) {
        const float* wc = L.ssm_conv1d.data() + c * (w + 1);
        for (int i = 0; i < w; ++i) window[i] = from ? from[c * w + i] : 0.0f;
        for (int r = run.begin; r < run.end; ++r) {
          const int t = order_[r];
          float& x = qkv_[t * C_ + c];
          float sum = 0.0f;  // ggml_ssm_conv's order: oldest first, the token's own last
          for (int i = 0; i < w; ++i) sum += window[i] * wc[i];
          sum += x * wc[w];
          for (int i = 0; i + 1 < w; ++i) window[i] = window[i + 1];
          if (w > 0) window[w - 1] = x;
          x = Silu(sum);
          if (states_.CheckpointAfter(s, batch[t].pos)) {
            std::memcpy(checkpoint + c * w, window, sizeof(float) * w);
          }
        }
        std::memcpy(next + c * w, window, sizeof(float) * w);
      }
    }
  });
  const int64_t K = d_.key_dim(), S = d_.head_k_dim;
  const int n = static_cast<int>(batch.size());
  pool_.ParallelFor(n, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      for (int64_t h = 0; h < 2 * static_cast<int64_t>(d_.n_k_heads); ++h) {
        L2Normalize(qkv_.data() + t * C_ + h * S, S, hp_.rms_eps);  // q heads, then k heads
      }
    }
  });
  (void)K;
}

// Per (sequence, value head) its tokens in order through the delta rule, then each head's
// output RMS-normed, scaled by ssm_norm and gated by silu(z).
void DeltaNetAttention::DeltaRule(int il, std::span<const BatchToken> batch) {
  const LayerWeights& L = model_.layer(il);
  const int64_t K = d_.key_dim(), S = S_, SS = S_ * S_;
  const int64_t per_k = H_ / d_.n_k_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d_.head_k_dim));
  const int64_t items = static_cast<int64_t>(seq_runs_.size()) * H_;
  pool_.ParallelFor(items, [&](int64_t begin, int64_t end, int) {
    for (int64_t item = begin; item < end; ++item) {
      const SeqRun& run = seq_runs_[item / H_];
      const uint32_t s = run.seq;
      const int64_t h = item % H_;
      const int64_t kh = d_.key_heads == KeyHeadOrder::kGrouped ? h / per_k : h % d_.n_k_heads;
      const float* source = SourceState(il, s);
      float* next = State(il, s, NextCopy(s)) + conv_floats_ + h * SS;
      float* checkpoint = State(il, s, RecurrentStates::kCheckpoint) + conv_floats_ + h * SS;
      for (int r = run.begin; r < run.end; ++r) {
        const int t = order_[r];
        const float* row = qkv_.data() + t * C_;
        const bool first = states_.IsFirst(s, batch[t].pos);
        DeltaRuleArgs a;
        a.state_in = !first ? next : source ? source + conv_floats_ + h * SS : nullptr;
        a.state_out = next;
        a.q = row + kh * S;
        a.k = row + K + kh * S;
        a.v = row + 2 * K + h * S;
        a.decay = std::exp(bg_[t * 2 * H_ + H_ + h]);
        a.beta = bg_[t * 2 * H_ + h];
        a.scale = scale;
        a.dim_k = static_cast<int>(S);
        a.dim_v = static_cast<int>(S);
        a.out = o_.data() + t * V_ + h * S;
        DeltaRuleStep(a);
        if (states_.CheckpointAfter(s, batch[t].pos)) {
          std::memcpy(checkpoint, next, sizeof(float) * SS);
        }
        float* o = a.out;
        RmsNorm(o, L.ssm_norm.data(), S, hp_.rms_eps, o);
        const float* z = z_.data() + t * V_ + h * S;
        for (int64_t i = 0; i < S; ++i) o[i] *= Silu(z[i]);
      }
    }
  });
}

}  // namespace mt
