#include "engine/bench.h"

#include <chrono>
#include <cmath>
#include <numeric>

#include "engine/attention_block.h"

namespace mt {
namespace {

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

void Summarize(BenchSample* s) {
  const double n = static_cast<double>(s->tps.size());
  s->mean = std::accumulate(s->tps.begin(), s->tps.end(), 0.0) / n;
  double var = 0;
  for (double x : s->tps) var += (x - s->mean) * (x - s->mean);
  s->sd = s->tps.size() > 1 ? std::sqrt(var / (n - 1)) : 0.0;
}

int32_t RandomToken(uint64_t& state, uint32_t n_vocab) {
  state = state * 6364136223846793005ull + 1442695040888963407ull;
  return static_cast<int32_t>((state >> 33) % n_vocab);
}

// Positions [0, n_depth) of sequence `seq`: random tokens (Decode runs them in batches).
Status FillDepth(Context& ctx, uint32_t seq, int n_depth, uint64_t& state) {
  if (n_depth == 0) return Status::Ok();
  std::vector<BatchToken> batch;
  for (int p = 0; p < n_depth; ++p) {
    batch.push_back({RandomToken(state, ctx.n_vocab()), seq, static_cast<uint32_t>(p), false});
  }
  batch.back().logits = true;
  std::vector<float> logits;
  return ctx.Decode(batch, &logits);
}

std::string DepthSuffix(int n_depth) {
  return n_depth > 0 ? fmt::format(" @ d{}", n_depth) : std::string();
}

}  // namespace

Result<BenchSample> BenchPrefill(Context& ctx, int n_prompt, int n_depth, int reps, uint64_t seed) {
  BenchSample s;
  s.test = fmt::format("pp{}", n_prompt) + DepthSuffix(n_depth);
  s.n_prompt = n_prompt;
  s.n_depth = n_depth;
  uint64_t state = seed;
  std::vector<int32_t> tokens(n_prompt);
  std::vector<float> logits;
  ctx.ClearKv();
  if (n_depth > 0) {
    std::vector<int32_t> depth(n_depth);
    for (int32_t& t : depth) t = RandomToken(state, ctx.n_vocab());
    MT_RETURN_IF_ERROR(ctx.Eval(depth, LogitsFor::kLast, &logits));
  }
  for (int r = -1; r < reps; ++r) {  // r = -1: warm-up, not counted
    for (int32_t& t : tokens) t = RandomToken(state, ctx.n_vocab());
    ctx.TruncateKv(static_cast<uint32_t>(n_depth));
    auto t0 = std::chrono::steady_clock::now();
    MT_RETURN_IF_ERROR(ctx.Eval(tokens, LogitsFor::kLast, &logits));
    auto t1 = std::chrono::steady_clock::now();
    if (r >= 0) s.tps.push_back(n_prompt / Seconds(t0, t1));
  }
  ctx.ClearKv();
  Summarize(&s);
  return s;
}

Result<BenchSample> BenchDecode(Context& ctx, int n_gen, int n_seq, int n_depth, int reps,
                                uint64_t seed, const std::function<void()>& after_warmup) {
  BenchSample s;
  s.test = (n_seq == 1 ? fmt::format("tg{}", n_gen) : fmt::format("tg{}-b{}", n_gen, n_seq)) +
           DepthSuffix(n_depth);
  s.n_gen = n_gen;
  s.n_seq = n_seq;
  s.n_depth = n_depth;
  uint64_t state = seed;
  // Each repetition writes positions [n_depth, n_depth + n_gen) again: one fill serves all.
  for (int q = 0; q < n_seq; ++q) {
    MT_RETURN_IF_ERROR(FillDepth(ctx, static_cast<uint32_t>(q), n_depth, state));
  }
  std::vector<BatchToken> step(n_seq);
  std::vector<float> logits;
  for (int r = -1; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n_gen; ++i) {
      for (int q = 0; q < n_seq; ++q) {
        step[q] = {RandomToken(state, ctx.n_vocab()), static_cast<uint32_t>(q),
                   static_cast<uint32_t>(n_depth + i), true};
      }
      MT_RETURN_IF_ERROR(ctx.Decode(step, &logits));
    }
    auto t1 = std::chrono::steady_clock::now();
    if (r >= 0) s.tps.push_back(double(n_gen) * n_seq / Seconds(t0, t1));
    if (r == -1 && after_warmup) after_warmup();
  }
  Summarize(&s);
  return s;
}

TokenCost TokenCostOf(const Model& m, KvTypes kv_types) {
  const HParams& hp = m.hparams();
  TokenCost c;
  auto bytes = [](const WeightMatrix& w) { return w.row_bytes * static_cast<uint64_t>(w.rows); };
  auto macs = [](const WeightMatrix& w) { return static_cast<uint64_t>(w.rows) * w.cols; };
  c.bytes += m.token_embd().row_bytes;  // one row of the embedding
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    const LayerWeights& L = m.layer(il);
    for (const WeightMatrix* w : L.matrices()) {
      if (w->data == nullptr) continue;
      c.bytes += bytes(*w);
      c.macs_per_token += macs(*w);
    }
    const AttentionParts& attention = m.parts().layers[il].attention;
    if (attention.kind == AttentionKind::kDeltaNet) {
      c.state_bytes += DeltaNetAttention::StateBytes(attention.delta_net);
    }
    c.bytes += L.router.size() * sizeof(float);
    c.macs_per_token += L.router.size();
    const ExpertSpec& spec = m.expert_layout().spec(il);
    c.bytes += uint64_t{hp.n_expert_used} * spec.bytes();
    c.macs_per_token += uint64_t{hp.n_expert_used} * 3 * spec.n_embd * spec.n_ff;
  }
  c.bytes += bytes(m.output());
  c.macs_head = macs(m.output());
  c.kv_bytes_per_position = KvBytesPerPosition(m, kv_types);
  return c;
}

}  // namespace mt
