// Multi-head latent attention, absorbed (engine/attention_block.h).
//
// For head h with q = [q_nope | q_pe] and the position's cache row [c | k_pe]:
//   score = kq_scale * (q_nope . (k_b_h c) + q_pe . k_pe) = kq_scale * ([k_b_h^T q_nope | q_pe]
//           . [c | k_pe])
//   out_h = sum_j p_j (v_b_h c_j) = v_b_h (sum_j p_j c_j)
// so the cache holds one (L + R) row per position for all heads, and the per-head K and V
// never exist. llama.cpp's deepseek2 graph computes the same (its "absorption optimization").
#include <algorithm>
#include <cmath>

#include "engine/attention_block.h"
#include "kernels/ops.h"

namespace mt {
namespace {

// Queries per AttendTokens call: heads of one token x tokens of a run. The kernels share each
// cache row's load among 4 queries; 4 heads per call leave enough items to balance the
// threads in decode (V3's 128 heads: 32 items, V2-Lite's 16: 4).
constexpr int kMlaHeadsPerCall = 4;
constexpr int kMlaTokensPerRun = 4;

bool IsMla(const Model& m, int il) {
  return m.parts().layers[il].attention.kind == AttentionKind::kMla;
}

// The first MLA layer's parts (all MLA layers of a model have the same).
MlaParts FirstMla(const Model& m) {
  for (const LayerParts& l : m.parts().layers) {
    if (l.attention.kind == AttentionKind::kMla) return l.attention.mla;
  }
  return {};
}

}  // namespace

MlaAttention::MlaAttention(const Model& model, ThreadPool& pool, const AttentionShape& shape)
    : model_(model),
      hp_(model.hparams()),
      pool_(pool),
      shape_(shape),
      mla_(FirstMla(model)),
      L_(mla_.kv_lora_rank),
      R_(hp_.n_rot),
      N_(mla_.head_dim_nope),
      V_(mla_.head_dim_v),
      H_(hp_.n_head),
      Q_(mla_.q_lora_rank) {}

void MlaAttention::SizeScratch(ScratchSizer& sizer) {
  const size_t B = shape_.n_batch;
  sizer.Resize(qa_, B * Q_);
  sizer.Resize(q_, B * H_ * (N_ + R_));
  sizer.Resize(kva_, B * (L_ + R_));
  sizer.Resize(q_abs_, B * H_ * (L_ + R_));
  sizer.Resize(latent_, B * H_ * L_);
  sizer.Resize(attn_, B * H_ * V_);
  const int heads = std::min<int>(static_cast<int>(H_), kMlaHeadsPerCall);
  sizer.Resize(scores_, static_cast<size_t>(pool_.size()) * heads * kMlaTokensPerRun * kAttendTile);
  sizer.Resize(run_start_, B + 1);
  sizer.Reserve(in_, static_cast<int64_t>(B), std::max<int64_t>(hp_.n_embd, H_ * V_));
  if (Q_ > 0) sizer.Reserve(in_qa_, static_cast<int64_t>(B), Q_);
  head_in_.resize(static_cast<size_t>(pool_.size()));  // shells; their buffers follow
  for (QuantizedInput& in : head_in_) {
    sizer.Reserve(in, static_cast<int64_t>(B), std::max(N_, L_));
  }
}

uint64_t MlaAttention::kv_bytes() const {
  uint64_t per_position = 0;
  for (uint32_t il = 0; il < hp_.n_layer; ++il) {
    if (IsMla(model_, static_cast<int>(il))) {
      per_position += KvBytesPerPosition(model_, static_cast<int>(il), shape_.kv_types);
    }
  }
  return per_position * shape_.n_seq * shape_.n_ctx;
}

Status MlaAttention::AllocateKv(bool populate) {
  const uint64_t positions = uint64_t{shape_.n_seq} * shape_.n_ctx;
  cache_.resize(hp_.n_layer);
  for (uint32_t il = 0; il < hp_.n_layer; ++il) {
    if (!IsMla(model_, static_cast<int>(il))) continue;
    Result<AlignedBuffer> b =
        AlignedBuffer::Allocate(positions * KvBytes(shape_.kv_types.k, L_ + R_));
    if (!b.ok()) return b.status().WithContext("KV cache");
    if (populate) MT_RETURN_IF_ERROR(b->Populate().WithContext("KV cache"));
    cache_[il] = std::move(b.value());
  }
  return Status::Ok();
}

void MlaAttention::HeadProduct(const WeightMatrix& w, int h, int64_t rows, const float* in,
                               int64_t in_stride, int64_t cols, int n, float* y, int64_t y_stride,
                               QuantizedInput& acts) {
  acts.Set(in, in_stride, n, cols);
  // MatMul writes row r of the output at y + r: shift y back so the head's first row lands
  // at the head's first output.
  MatMul(w, acts.For(w.type, nullptr), y - h * rows, y_stride, h * rows, (h + 1) * rows);
}

void MlaAttention::FindRuns(std::span<const BatchToken> batch) {
  n_runs_ = 0;
  for (int t = 0; t < static_cast<int>(batch.size()); ++t) {
    const bool extends = t > 0 && t - run_start_[n_runs_ - 1] < kMlaTokensPerRun &&
                         batch[t].seq == batch[t - 1].seq && batch[t].pos == batch[t - 1].pos + 1;
    if (!extends) run_start_[n_runs_++] = t;
  }
  run_start_[n_runs_] = static_cast<int>(batch.size());
}

Status MlaAttention::Run(int il, std::span<const BatchToken> batch, const float* xn,
                         const float* rope_cs, float* out) {
  const LayerWeights& W = model_.layer(il);
  const AttentionParts& parts = model_.parts().layers[il].attention;
  const int n = static_cast<int>(batch.size());
  const int64_t D = hp_.n_embd, QW = H_ * (N_ + R_), KVW = L_ + R_, AW = H_ * (L_ + R_);

  // Projections of the input: the query (directly, or through the q LoRA and its norm) and
  // the compressed KV with the shared key part.
  in_.Set(xn, D, n, D);
  if (Q_ > 0) {
    ProjectAll(pool_, {{&W.wq_a, qa_.data(), Q_}, {&W.wkv_a, kva_.data(), KVW}}, in_);
    for (int t = 0; t < n; ++t) {
      float* row = qa_.data() + t * Q_;
      RmsNorm(row, W.q_a_norm.data(), Q_, hp_.rms_eps, row);
    }
    in_qa_.Set(qa_.data(), Q_, n, Q_);
    Project(pool_, W.wq_b, in_qa_, q_.data(), QW);
  } else {
    ProjectAll(pool_, {{&W.wq, q_.data(), QW}, {&W.wkv_a, kva_.data(), KVW}}, in_);
  }

  // Per token: the latent normed, k_pe and every head's q_pe rotated, the row cached.
  const RopeParts& rp = model_.parts().rope;
  const RopeMode mode = rp.type == RopeType::kNeox ? RopeMode::kNeox : RopeMode::kNorm;
  const KvElemType type = shape_.kv_types.k;
  const int64_t row_bytes = KvBytes(type, KVW);
  uint8_t* cache = cache_[il].data();
  pool_.ParallelFor(n, [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* cos_sin = rope_cs + t * rp.n_rot;
      float* kv = kva_.data() + t * KVW;
      RmsNorm(kv, W.kv_a_norm.data(), L_, hp_.rms_eps, kv);
      RopeRotate(kv + L_, 1, static_cast<int>(R_), rp.n_rot, cos_sin, mode);
      RopeRotate(q_.data() + t * QW + N_, static_cast<int>(H_), static_cast<int>(N_ + R_), rp.n_rot,
                 cos_sin, mode);
      const int64_t cell = int64_t{batch[t].seq} * shape_.n_ctx + batch[t].pos;
      StoreKv(kv, KVW, type, cache + cell * row_bytes);
    }
  });

  // Absorb: head h's query becomes [k_b_h^T q_nope_h | q_pe_h].
  pool_.ParallelForDynamic(
      H_,
      [&](int64_t h0, int64_t h1, int thread) {
        for (int64_t h = h0; h < h1; ++h) {
          float* y = q_abs_.data() + h * KVW;
          HeadProduct(W.wk_b, static_cast<int>(h), L_, q_.data() + h * (N_ + R_), QW, N_, n, y, AW,
                      head_in_[thread]);
          for (int t = 0; t < n; ++t) {
            std::copy_n(q_.data() + t * QW + h * (N_ + R_) + N_, R_, y + t * AW + L_);
          }
        }
      },
      1);

  // Attention over the cached rows: K is the whole row, V its first L values.
  FindRuns(batch);
  const int heads = std::min<int>(static_cast<int>(H_), kMlaHeadsPerCall);
  const int chunks = static_cast<int>((H_ + heads - 1) / heads);
  const int runs = n_runs_;
  const float scale = parts.kq_scale;
  pool_.ParallelFor(int64_t{runs} * chunks, [&](int64_t begin, int64_t end, int thread) {
    float* p =
        scores_.data() + static_cast<size_t>(thread) * heads * kMlaTokensPerRun * kAttendTile;
    for (int64_t item = begin; item < end; ++item) {
      const int r = static_cast<int>(item / chunks), c = static_cast<int>(item % chunks);
      const int t = run_start_[r], n_tok = run_start_[r + 1] - t;
      const int h = c * heads;
      const AttendQueries qs{q_abs_.data() + int64_t{t} * AW + h * KVW,
                             AW,
                             KVW,
                             latent_.data() + (int64_t{t} * H_ + h) * L_,
                             H_ * L_,
                             L_,
                             static_cast<int>(std::min<int64_t>(heads, H_ - h)),
                             n_tok,
                             batch[t].pos + 1};  // causal: positions 0..pos of its sequence
      const uint8_t* rows = cache + int64_t{batch[t].seq} * shape_.n_ctx * row_bytes;
      AttendTokens(qs, rows, rows, {type, type}, KVW, KVW, static_cast<int>(KVW),
                   static_cast<int>(L_), scale, p);
    }
  });

  // Decompress each head's output: v_b_h (latent sum), then the output projection.
  pool_.ParallelForDynamic(
      H_,
      [&](int64_t h0, int64_t h1, int thread) {
        for (int64_t h = h0; h < h1; ++h) {
          HeadProduct(W.wv_b, static_cast<int>(h), V_, latent_.data() + h * L_, H_ * L_, L_, n,
                      attn_.data() + h * V_, H_ * V_, head_in_[thread]);
        }
      },
      1);
  in_.Set(attn_.data(), H_ * V_, n, H_ * V_);
  Project(pool_, W.wo, in_, out, D);
  return Status::Ok();
}

}  // namespace mt
