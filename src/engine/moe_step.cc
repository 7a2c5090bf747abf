#include "engine/moe_step.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "kernels/matmul.h"
#include "kernels/ops.h"

namespace mt {

MoeStep::MoeStep(const Model& model, ThreadPool& pool, uint32_t n_batch)
    : model_(model),
      hp_(model.hparams()),
      parts_(model.parts()),
      pool_(pool),
      n_batch_(n_batch),
      selector_(model.parts().router),
      shared_(pool, n_batch, model.hparams().n_embd, model.hparams().n_ff_shexp) {}

void MoeStep::SizeScratch(ScratchSizer& sizer) {
  const size_t B = n_batch_, E = hp_.n_expert, K = hp_.n_expert_used, D = hp_.n_embd;
  const size_t F = hp_.n_ff_exp, FS = hp_.n_ff_shexp;
  sizer.Resize(logits_, B * E);
  sizer.Resize(topk_id_, B * K);
  sizer.Resize(topk_weight_, B * K);
  sizer.Resize(expert_rows_, B * K);
  sizer.Resize(expert_start_, E + 1);
  sizer.Resize(expert_fill_, E);
  sizer.Reserve(used_experts_, E);
  sizer.Reserve(host_experts_, E);
  sizer.Reserve(gpu_experts_, E);
  ex_.resize(static_cast<size_t>(pool_.size()));  // empty shells; their buffers follow
  for (ExpertScratch& s : ex_) {
    sizer.Resize(s.in, B * D);
    sizer.Resize(s.gate, B * F);
    sizer.Resize(s.up, B * F);
    sizer.Resize(s.out, B * D);
    sizer.Reserve(s.in_acts, static_cast<int64_t>(B), static_cast<int64_t>(D));
    sizer.Reserve(s.hid_acts, static_cast<int64_t>(B), static_cast<int64_t>(F));
  }
  sizer.Reserve(group_, E);
  sizer.Reserve(checks_, E);
  sizer.Reserve(expert_order_, E);
  sizer.Resize(slot_out_, B * K * D);
  sizer.Resize(prefetch_counters_, hp_.n_layer);
  sizer.Resize(predicted_, B * E);
  sizer.Resize(predicted_ahead_, B * E);  // for prefetch_depth > 1 (not known yet)
  sizer.Resize(next_norm_, B * D);
  sizer.Resize(next_logits_, B * E);
  sizer.Reserve(hinted_, E);
  sizer.Resize(pred_id_, K);
  sizer.Resize(pred_weight_, K);
  if (FS > 0) {
    shared_.SizeScratch(sizer);
    sizer.Resize(sh_out_, B * D);
  }
}

void MoeStep::Attach(ExpertStore* store, int prefetch_depth) {
  store_ = store;
  prefetch_depth_ = prefetch_depth;
}

// Routes each token to its top-k experts, asks the store for the distinct experts, and
// runs each over all the tokens routed to it as it arrives (cached experts first).
Status MoeStep::Run(int il, int n, const float* x, const float* xn, float* ffn_out) {
  const int K = static_cast<int>(hp_.n_expert_used);
  const int64_t D = hp_.n_embd;
  Route(il, n, xn);
  SplitByTier(il);
  if (!gpu_experts_.empty()) {
    MT_RETURN_IF_ERROR(gpu_->Start(static_cast<uint32_t>(il), gpu_experts_, expert_start_.data(),
                                   expert_rows_.data(), K, xn));
  }
  // The device's work is waited for on every way out, so the next layer can submit.
  struct WaitForGpu {
    GpuExpertTier* gpu;
    ~WaitForGpu() {
      if (gpu != nullptr) static_cast<void>(gpu->Finish());
    }
  } wait_for_gpu{gpu_experts_.empty() ? nullptr : gpu_};
  store_->BeginLayer(static_cast<uint32_t>(il), host_experts_);
  // Demand first, then the hint: the next layer's reads overlap this layer's experts.
  if (prefetch_depth_ > 0) PrefetchNextLayer(il, n, x);
  while (store_->Pending()) {
    // Everything ready now runs together (all of it, for the in-memory tiers); a stream
    // tier's misses join later groups as their reads complete.
    group_.clear();
    for (bool first = true;; first = false) {
      // The experts' checks (a pack's checksums) run on the threads that run them.
      Result<std::optional<ReadyExpert>> next =
          store_->NextReady(/*wait=*/false, /*defer_checks=*/true);
      if (first && next.ok() && !next.value() && store_->Pending()) {
        // Nothing ready: block on the reads, and let the workers sleep meanwhile (a vCPU
        // spinning through a read wait slows this VM's disk: docs/journal/tiering.md).
        ThreadPool::LetSleep idle(pool_);
        next = store_->NextReady(/*wait=*/true, /*defer_checks=*/true);
      }
      if (!next.ok()) {
        group_.clear();
        return next.status();
      }
      if (!next.value()) break;
      group_.push_back(std::move(*next.value()));
    }
    if (Status bad = RunExperts(il, group_, xn); !bad.ok()) {
      group_.clear();  // a failed expert's bytes are dropped as its lease returns
      return bad;
    }
  }
  group_.clear();  // releases the leases
  if (wait_for_gpu.gpu != nullptr) {
    wait_for_gpu.gpu = nullptr;
    MT_RETURN_IF_ERROR(gpu_->Finish());
    ScatterGpuOutputs(il);
  }
  for (int t = 0; t < n; ++t) {
    float* out = ffn_out + t * D;
    std::copy_n(slot_out_.data() + int64_t{t} * K * D, D, out);
    for (int s = 1; s < K; ++s) {
      const float* src = slot_out_.data() + (int64_t{t} * K + s) * D;
      for (int64_t d = 0; d < D; ++d) out[d] += src[d];
    }
  }
  if (parts_.layers[il].ffn.n_ff_shared > 0) return SharedExperts(il, n, xn, ffn_out);
  return Status::Ok();
}

void MoeStep::SplitByTier(int il) {
  host_experts_.clear();
  gpu_experts_.clear();
  for (int32_t e : used_experts_) {
    const bool on_gpu =
        gpu_ != nullptr && gpu_->Owns(static_cast<uint32_t>(il), static_cast<uint32_t>(e));
    (on_gpu ? gpu_experts_ : host_experts_).push_back(e);
  }
}

void MoeStep::ScatterGpuOutputs(int il) {
  for (size_t j = 0; j < gpu_experts_.size(); ++j) WriteSlots(il, gpu_experts_[j], gpu_->output(j));
}

void MoeStep::Route(int il, int n, const float* xn) {
  const LayerWeights& L = model_.layer(il);
  const int E = static_cast<int>(hp_.n_expert), K = static_cast<int>(hp_.n_expert_used);
  RouterLogits(L, xn, n, logits_.data());
  for (int t = 0; t < n; ++t) {
    selector_.Select(logits_.data() + int64_t{t} * E, L.exp_probs_b.data(), topk_id_.data() + t * K,
                     topk_weight_.data() + t * K);
  }
  // Routing statistics, and how well the previous layer predicted this one.
  Context::PrefetchCounters& pc = prefetch_counters_[il];
  for (int t = 0; t < n; ++t) {
    for (int s = 0; s < K; ++s) {
      const int32_t e = topk_id_[t * K + s];
      routing_.Add(static_cast<uint32_t>(il), static_cast<uint32_t>(e));
      if (prefetch_depth_ > 0 && il > 0) {
        ++pc.actual;
        pc.correct += predicted_[int64_t{t} * E + e];
      }
    }
  }
  // Group (token, slot) pairs by expert, in token order within an expert.
  std::fill(expert_start_.begin(), expert_start_.end(), 0);
  for (int i = 0; i < n * K; ++i) ++expert_start_[topk_id_[i] + 1];
  used_experts_.clear();
  for (int e = 0; e < E; ++e) {
    if (expert_start_[e + 1] > 0) used_experts_.push_back(e);
    expert_start_[e + 1] += expert_start_[e];
  }
  std::copy(expert_start_.begin(), expert_start_.end() - 1, expert_fill_.begin());
  for (int i = 0; i < n * K; ++i) expert_rows_[expert_fill_[topk_id_[i]]++] = i;
}

void MoeStep::RouterLogits(const LayerWeights& L, const float* in, int n, float* logits) {
  const int64_t E = hp_.n_expert, D = hp_.n_embd;
  const float* router = L.router.data();
  const float* bias = L.router_b.empty() ? nullptr : L.router_b.data();
  pool_.ParallelFor(
      n * E,
      [&](int64_t i0, int64_t i1, int) {
        for (int64_t i = i0; i < i1; ++i) {
          logits[i] = DotF32(router + (i % E) * D, in + (i / E) * D, D);
          if (bias != nullptr) logits[i] += bias[i % E];
        }
      },
      8);
}

void MoeStep::PrefetchNextLayer(int il, int n, const float* x) {
  const int n_layer = static_cast<int>(hp_.n_layer);
  if (il + 1 < n_layer && parts_.layers[il + 1].has_experts()) {
    prefetch_counters_[il + 1].predicted += PredictExperts(il + 1, n, x, predicted_.data());
    HintPredicted(il + 1, n, predicted_.data());
  }
  for (int d = 2; d <= prefetch_depth_ && il + d < n_layer; ++d) {
    if (!parts_.layers[il + d].has_experts()) continue;
    PredictExperts(il + d, n, x, predicted_ahead_.data());
    HintPredicted(il + d, n, predicted_ahead_.data());
  }
}

uint64_t MoeStep::PredictExperts(int target, int n, const float* x, uint8_t* flags) {
  const LayerWeights& L = model_.layer(target);
  const int E = static_cast<int>(hp_.n_expert), K = static_cast<int>(hp_.n_expert_used);
  const int64_t D = hp_.n_embd;
  std::fill(flags, flags + int64_t{n} * E, 0);
  for (int t = 0; t < n; ++t) {
    RmsNorm(x + t * D, L.ffn_norm.data(), D, hp_.rms_eps, next_norm_.data() + t * D);
  }
  RouterLogits(L, next_norm_.data(), n, next_logits_.data());
  uint64_t set = 0;
  for (int t = 0; t < n; ++t) {
    selector_.Select(next_logits_.data() + int64_t{t} * E, L.exp_probs_b.data(), pred_id_.data(),
                     pred_weight_.data());
    for (int s = 0; s < K; ++s) {
      uint8_t& p = flags[int64_t{t} * E + pred_id_[s]];
      set += !p;
      p = 1;
    }
  }
  return set;
}

void MoeStep::HintPredicted(int target, int n, const uint8_t* flags) {
  const int E = static_cast<int>(hp_.n_expert);
  hinted_.clear();
  for (int e = 0; e < E; ++e) {
    if (gpu_ != nullptr && gpu_->Owns(static_cast<uint32_t>(target), static_cast<uint32_t>(e))) {
      continue;  // the device holds it: nothing to read
    }
    for (int t = 0; t < n; ++t) {
      if (flags[int64_t{t} * E + e]) {
        hinted_.push_back(e);
        break;
      }
    }
  }
  store_->Hint(static_cast<uint32_t>(target), hinted_);
}

namespace {

// rows (m, width) += bias[e * width ..] for each row: expert e's bias (empty: none).
void AddExpertBias(const std::vector<float>& bias, int e, int m, int64_t width, float* rows) {
  if (bias.empty()) return;
  const float* b = bias.data() + e * width;
  for (int i = 0; i < m; ++i) {
    for (int64_t j = 0; j < width; ++j) rows[i * width + j] += b[j];
  }
}

}  // namespace

void MoeStep::RunExpert(int il, const ReadyExpert& r, const float* xn, ExpertScratch& s,
                        ThreadPool* p) {
  const int K = static_cast<int>(hp_.n_expert_used);
  const int64_t D = hp_.n_embd, F = hp_.n_ff_exp;
  const int e = r.expert;
  const LayerWeights& L = model_.layer(il);
  const ExpertMatrices& w = r.lease.matrices();
  const int m = expert_start_[e + 1] - expert_start_[e];
  const int32_t* rows = expert_rows_.data() + expert_start_[e];
  for (int i = 0; i < m; ++i) std::copy_n(xn + (rows[i] / K) * D, D, s.in.data() + i * D);
  s.in_acts.Set(s.in.data(), D, m, D);
  auto project = [&](const WeightMatrix& mat, QuantizedInput& in, float* y, int64_t stride) {
    if (p != nullptr) {
      Project(*p, mat, in, y, stride);
    } else {
      ProjectSerial(mat, in, y, stride);
    }
  };
  project(w.gate, s.in_acts, s.gate.data(), F);
  project(w.up, s.in_acts, s.up.data(), F);
  AddExpertBias(L.gate_exps_b, e, m, F, s.gate.data());
  AddExpertBias(L.up_exps_b, e, m, F, s.up.data());
  if (parts_.layers[il].ffn.activation == FfnActivation::kSwigluOai) {
    SwiGluOai(s.gate.data(), s.up.data(), int64_t{m} * F, s.gate.data());
  } else {
    SwiGlu(s.gate.data(), s.up.data(), int64_t{m} * F, s.gate.data());
  }
  s.hid_acts.Set(s.gate.data(), F, m, F);
  project(w.down, s.hid_acts, s.out.data(), D);
  WriteSlots(il, e, s.out.data());
}

void MoeStep::WriteSlots(int il, int e, float* out) {
  const int64_t D = hp_.n_embd;
  const int m = expert_start_[e + 1] - expert_start_[e];
  const int32_t* rows = expert_rows_.data() + expert_start_[e];
  AddExpertBias(model_.layer(il).down_exps_b, e, m, D, out);
  for (int i = 0; i < m; ++i) {
    const float wt = topk_weight_[rows[i]];
    float* dst = slot_out_.data() + int64_t{rows[i]} * D;
    const float* src = out + i * D;
    for (int64_t d = 0; d < D; ++d) dst[d] = src[d] * wt;
  }
}

Status MoeStep::RunExperts(int il, std::span<const ReadyExpert> g, const float* xn) {
  checks_.assign(g.size(), Status::Ok());
  // An expert handed out unchecked is verified first, by the thread that then runs it.
  auto run = [&](size_t i, ExpertScratch& s, ThreadPool* p) {
    if (g[i].unchecked) {
      checks_[i] = store_->Verify(g[i]);
      if (!checks_[i].ok()) return;
    }
    RunExpert(il, g[i], xn, s, p);
  };
  const int threads = pool_.size();
  if (threads == 1 || g.size() < 2) {
    for (size_t i = 0; i < g.size(); ++i) run(i, ex_[0], &pool_);
  } else {
    // Each thread takes the next expert when done with its last one, the largest (most
    // tokens) first: a static split by tokens left one thread waiting whenever the other's
    // experts ran slower. An expert's output does not depend on which thread runs it.
    expert_order_.resize(g.size());
    std::iota(expert_order_.begin(), expert_order_.end(), 0);
    auto tokens = [&](int32_t i) {
      return expert_start_[g[i].expert + 1] - expert_start_[g[i].expert];
    };
    std::stable_sort(expert_order_.begin(), expert_order_.end(),
                     [&](int32_t a, int32_t b) { return tokens(a) > tokens(b); });
    const auto n = static_cast<int64_t>(g.size());
    pool_.ParallelForDynamic(
        n,
        [&](int64_t i0, int64_t i1, int thread) {
          for (int64_t i = i0; i < i1; ++i) run(expert_order_[i], ex_[thread], nullptr);
        },
        1);
  }
  for (const Status& c : checks_) {
    if (!c.ok()) return c;  // the first in group order, whichever thread found it
  }
  return Status::Ok();
}

Status MoeStep::SharedExperts(int il, int n, const float* xn, float* ffn_out) {
  const LayerWeights& L = model_.layer(il);
  const int64_t D = hp_.n_embd;
  if (gpu_blocks_ != nullptr) {
    MT_RETURN_IF_ERROR(gpu_blocks_->Run(il, xn, n, sh_out_.data()));
  } else {
    shared_.Run(L.shexp_gate, L.shexp_up, L.shexp_down, xn, n, sh_out_.data());
  }
  const bool gated = parts_.layers[il].ffn.shared_gate == SharedExpertGate::kSigmoid;
  for (int t = 0; t < n; ++t) {
    const float g =
        gated ? 1.0f / (1.0f + std::exp(-DotF32(L.shexp_gate_inp.data(), xn + t * D, D))) : 1.0f;
    for (int64_t d = 0; d < D; ++d) ffn_out[t * D + d] += g * sh_out_[t * D + d];
  }
  return Status::Ok();
}

}  // namespace mt
