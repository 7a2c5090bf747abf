// Grouped-query attention (engine/attention_block.h).
#include <algorithm>
#include <array>
#include <cmath>

#include "base/check.h"
#include "engine/attention_block.h"
#include "kernels/ops.h"

namespace mt {

uint64_t KvBytesPerPosition(const Model& model, int il, KvTypes kv_types) {
  const HParams& hp = model.hparams();
  const AttentionParts& a = model.parts().layers[il].attention;
  if (a.kind == AttentionKind::kMla) {
    return KvBytes(kv_types.k, int64_t{a.mla.kv_lora_rank} + hp.n_rot);
  }
  if (a.kind == AttentionKind::kDeltaNet) return 0;  // a state per sequence, not per position
  return KvBytes(kv_types.k, hp.n_embd_k_gqa()) + KvBytes(kv_types.v, hp.n_embd_v_gqa());
}

uint64_t KvBytesPerPosition(const Model& model, KvTypes kv_types) {
  uint64_t total = 0;
  for (uint32_t il = 0; il < model.hparams().n_layer; ++il) {
    total += KvBytesPerPosition(model, static_cast<int>(il), kv_types);
  }
  return total;
}

std::unique_ptr<AttentionBlock> MakeAttentionBlock(AttentionKind kind, const Model& model,
                                                   ThreadPool& pool, const AttentionShape& shape) {
  switch (kind) {
    case AttentionKind::kGqa:
      return std::make_unique<GqaAttention>(model, pool, shape);
    case AttentionKind::kMla:
      return std::make_unique<MlaAttention>(model, pool, shape);
    case AttentionKind::kDeltaNet:
      return std::make_unique<DeltaNetAttention>(model, pool, shape);
  }
  MT_CHECK_MSG(false, "MakeAttentionBlock: unknown attention kind");
}

namespace {

bool IsGqa(const Model& m, int il) {
  return m.parts().layers[il].attention.kind == AttentionKind::kGqa;
}

}  // namespace

GqaAttention::GqaAttention(const Model& model, ThreadPool& pool, const AttentionShape& shape)
    : model_(model),
      hp_(model.hparams()),
      pool_(pool),
      shape_(shape),
      attend_tokens_(std::max(1, 16 / std::min<int>(hp_.n_head / hp_.n_head_kv, kAttendGroupMax))) {
  cells_.assign(hp_.n_layer, shape_.n_ctx);
  // One ring length for every sliding layer (the widest window's), so one table of what each
  // cell holds serves them all.
  for (const LayerParts& l : model_.parts().layers) {
    if (l.attention.kind == AttentionKind::kGqa) {
      window_ = std::max(window_, l.attention.sliding_window);
      gated_ = gated_ || l.attention.gqa.output_gate;
    }
  }
  MT_CHECK(!gated_ || hp_.head_dim_k == hp_.head_dim_v);
  const uint64_t ring = uint64_t{window_} + shape_.n_batch;
  if (window_ == 0 || 2 * ring >= shape_.n_ctx) return;  // a ring would save nothing
  ring_ = static_cast<uint32_t>(ring);
  for (uint32_t il = 0; il < hp_.n_layer; ++il) {
    if (!IsGqa(model_, static_cast<int>(il))) continue;
    if (model_.parts().layers[il].attention.sliding_window == 0) continue;
    cells_[il] = 2 * ring_;
    if (first_ring_layer_ < 0) first_ring_layer_ = static_cast<int>(il);
  }
}

int GqaAttention::attend_heads() const {
  return std::min<int>(hp_.n_head / hp_.n_head_kv, kAttendGroupMax);
}

void GqaAttention::SizeScratch(ScratchSizer& sizer) {
  const size_t B = shape_.n_batch;
  sizer.Resize(q_, B * hp_.n_embd_q());
  sizer.Resize(qg_, gated_ ? 2 * B * hp_.n_embd_q() : 0);
  sizer.Resize(gate_, gated_ ? B * hp_.n_embd_q() : 0);
  sizer.Resize(k_, B * hp_.n_embd_k_gqa());
  sizer.Resize(v_, B * hp_.n_embd_v_gqa());
  sizer.Resize(attn_, B * hp_.n_head * hp_.head_dim_v);
  sizer.Resize(scores_,
               static_cast<size_t>(pool_.size()) * attend_heads() * attend_tokens_ * kAttendTile);
  sizer.Resize(run_start_, B + 1);
  sizer.Resize(token_runs_, B + 1);
  sizer.Resize(ring_pos_, size_t{shape_.n_seq} * ring_);
  const int64_t widest = std::max<int64_t>(hp_.n_embd, int64_t{hp_.n_head} * hp_.head_dim_v);
  sizer.Reserve(in_, static_cast<int64_t>(B), widest);
}

uint64_t GqaAttention::kv_bytes() const {
  uint64_t bytes = 0;
  for (uint32_t il = 0; il < hp_.n_layer; ++il) {
    if (IsGqa(model_, static_cast<int>(il))) {
      bytes += KvBytesPerPosition(model_, static_cast<int>(il), shape_.kv_types) * shape_.n_seq *
               cells_[il];
    }
  }
  return bytes;
}

Status GqaAttention::AllocateKv(bool populate) {
  std::fill(ring_pos_.begin(), ring_pos_.end(), kNoPosition);
  for (int i = 0; i < static_cast<int>(token_runs_.size()); ++i) token_runs_[i] = i;
  k_cache_.resize(hp_.n_layer);
  v_cache_.resize(hp_.n_layer);
  for (uint32_t il = 0; il < hp_.n_layer; ++il) {
    if (!IsGqa(model_, static_cast<int>(il))) continue;
    const uint64_t positions = uint64_t{shape_.n_seq} * cells_[il];
    Result<AlignedBuffer> kb =
        AlignedBuffer::Allocate(positions * KvBytes(shape_.kv_types.k, hp_.n_embd_k_gqa()));
    Result<AlignedBuffer> vb =
        AlignedBuffer::Allocate(positions * KvBytes(shape_.kv_types.v, hp_.n_embd_v_gqa()));
    if (!kb.ok()) return kb.status().WithContext("KV cache");
    if (!vb.ok()) return vb.status().WithContext("KV cache");
    if (populate) {
      MT_RETURN_IF_ERROR(kb->Populate().WithContext("KV cache"));
      MT_RETURN_IF_ERROR(vb->Populate().WithContext("KV cache"));
    }
    k_cache_[il] = std::move(kb.value());
    v_cache_[il] = std::move(vb.value());
  }
  return Status::Ok();
}

Status GqaAttention::Run(int il, std::span<const BatchToken> batch, const float* xn,
                         const float* rope_cs, float* out) {
  const LayerWeights& L = model_.layer(il);
  const int n = static_cast<int>(batch.size());
  const int64_t D = hp_.n_embd;
  const int64_t QD = hp_.n_embd_q(), KD = hp_.n_embd_k_gqa(), VD = hp_.n_embd_v_gqa();
  const int64_t AD = int64_t{hp_.n_head} * hp_.head_dim_v;
  const bool gated = model_.parts().layers[il].attention.gqa.output_gate;
  in_.Set(xn, D, n, D);
  ProjectAll(pool_,
             {{&L.wq, gated ? qg_.data() : q_.data(), gated ? 2 * QD : QD},
              {&L.wk, k_.data(), KD},
              {&L.wv, v_.data(), VD}},
             in_);
  Prepare(il, batch, rope_cs);
  FindRuns(batch);
  Attend(il, batch);
  for (int64_t i = 0; gated && i < int64_t{n} * AD; ++i) {
    attn_[i] *= 1.0f / (1.0f + std::exp(-gate_[i]));  // ggml_sigmoid
  }
  in_.Set(attn_.data(), AD, n, AD);
  Project(pool_, L.wo, in_, out, D);
  for (int t = 0; t < n && !L.bo.empty(); ++t) {
    for (int64_t i = 0; i < D; ++i) out[t * D + i] += L.bo[i];
  }
  if (il == first_ring_layer_) {
    for (const BatchToken& b : batch) ring_pos_[size_t{b.seq} * ring_ + b.pos % ring_] = b.pos;
  }
  return Status::Ok();
}

uint32_t GqaAttention::ReusablePrefix(uint32_t seq, uint32_t n) const {
  if (first_ring_layer_ < 0 || n == 0) return n;
  // Position n's window reads positions [n + 1 - W, n - 1]; each must still be in its cell.
  const uint32_t R = ring_;
  for (uint32_t p = n + 1 > window_ ? n + 1 - window_ : 0; p < n; ++p) {
    if (ring_pos_[size_t{seq} * R + p % R] != p) return 0;
  }
  return n;
}

void GqaAttention::StoreHeads(int il, const float* row, uint32_t head_dim, KvElemType type,
                              uint8_t* cache, const BatchToken& token) const {
  const int64_t row_bytes = KvBytes(type, head_dim);
  const uint32_t cell = Cell(il, token.pos);
  for (uint32_t h = 0; h < hp_.n_head_kv; ++h) {
    const int64_t first = (int64_t{token.seq} * hp_.n_head_kv + h) * cells_[il];
    StoreKv(row + size_t{h} * head_dim, head_dim, type, cache + (first + cell) * row_bytes);
    if (Ringed(il)) {  // the ring's second copy (see attention_block.h)
      StoreKv(row + size_t{h} * head_dim, head_dim, type,
              cache + (first + cell + ring_) * row_bytes);
    }
  }
}

void GqaAttention::Prepare(int il, std::span<const BatchToken> batch, const float* rope_cs) {
  const LayerWeights& L = model_.layer(il);
  const GqaParts& gqa = model_.parts().layers[il].attention.gqa;
  const RopeParts& rp = model_.parts().rope;
  const int64_t QD = hp_.n_embd_q(), KD = hp_.n_embd_k_gqa(), VD = hp_.n_embd_v_gqa();
  const RopeMode rope = rp.type == RopeType::kNeox ? RopeMode::kNeox : RopeMode::kNorm;
  // Bias, then the q/k norm, then the rotation of one projection row of one token.
  auto finish = [&](float* row, int64_t width, const std::vector<float>& bias,
                    const std::vector<float>& norm, uint32_t heads, const float* cos_sin) {
    for (int64_t i = 0; i < width && !bias.empty(); ++i) row[i] += bias[i];
    if (norm.empty()) {
      // no q/k norm, or an optional one this file does not have (qk_norm_optional)
    } else if (gqa.qk_norm == QkNorm::kPerHead) {
      for (uint32_t h = 0; h < heads; ++h) {
        float* rh = row + h * hp_.head_dim_k;
        RmsNorm(rh, norm.data(), hp_.head_dim_k, hp_.rms_eps, rh);
      }
    } else if (gqa.qk_norm == QkNorm::kWholeProjection) {
      RmsNorm(row, norm.data(), width, hp_.rms_eps, row);
    }
    RopeRotate(row, static_cast<int>(heads), static_cast<int>(hp_.head_dim_k), rp.n_rot, cos_sin,
               rope);
  };
  // Three items per token: its q; its k, into the cache; its v, into the cache. At one
  // token with two threads the first item goes to one thread and the other two to the
  // other: the first is q where q outweighs k and v together (GQA), else k (then q with
  // v's store balance k with its store).
  enum Part { kQ, kK, kV };
  const std::array<Part, 3> parts =
      QD >= KD + VD ? std::array<Part, 3>{kQ, kK, kV} : std::array<Part, 3>{kK, kQ, kV};
  const int64_t items = int64_t{3} * static_cast<int64_t>(batch.size());
  pool_.ParallelFor(items, [&](int64_t begin, int64_t end, int) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / 3;
      const float* cos_sin = rope_cs + t * rp.n_rot;
      switch (parts[item % 3]) {
        case kQ:
          if (gqa.output_gate) {  // [q | gate] per head, apart
            const int64_t dk = hp_.head_dim_k;
            for (uint32_t h = 0; h < hp_.n_head; ++h) {
              const float* src = qg_.data() + t * 2 * QD + h * 2 * dk;
              std::copy(src, src + dk, q_.data() + t * QD + h * dk);
              std::copy(src + dk, src + 2 * dk, gate_.data() + t * QD + h * dk);
            }
          }
          finish(q_.data() + t * QD, QD, L.bq, L.attn_q_norm, hp_.n_head, cos_sin);
          break;
        case kK: {
          float* kt = k_.data() + t * KD;
          finish(kt, KD, L.bk, L.attn_k_norm, hp_.n_head_kv, cos_sin);
          StoreHeads(il, kt, hp_.head_dim_k, shape_.kv_types.k, k_cache_[il].data(), batch[t]);
          break;
        }
        case kV: {
          float* vt = v_.data() + t * VD;
          for (int64_t i = 0; i < VD && !L.bv.empty(); ++i) vt[i] += L.bv[i];
          StoreHeads(il, vt, hp_.head_dim_v, shape_.kv_types.v, v_cache_[il].data(), batch[t]);
          break;
        }
      }
    }
  });
}

void GqaAttention::FindRuns(std::span<const BatchToken> batch) {
  n_runs_ = 0;
  for (int t = 0; t < static_cast<int>(batch.size()); ++t) {
    const bool extends = t > 0 && t - run_start_[n_runs_ - 1] < attend_tokens_ &&
                         batch[t].seq == batch[t - 1].seq && batch[t].pos == batch[t - 1].pos + 1;
    if (!extends) run_start_[n_runs_++] = t;
  }
  run_start_[n_runs_] = static_cast<int>(batch.size());
}

void GqaAttention::Attend(int il, std::span<const BatchToken> batch) {
  const int n_head = static_cast<int>(hp_.n_head), n_kv = static_cast<int>(hp_.n_head_kv);
  const int dk = static_cast<int>(hp_.head_dim_k), dv = static_cast<int>(hp_.head_dim_v);
  const int group = n_head / n_kv;
  const AttentionParts& parts = model_.parts().layers[il].attention;
  const float scale = parts.kq_scale;
  const uint32_t window = parts.sliding_window;
  const float* sinks =
      model_.layer(il).attn_sinks.empty() ? nullptr : model_.layer(il).attn_sinks.data();
  const KvTypes kv_types = shape_.kv_types;
  const int64_t k_row = KvBytes(kv_types.k, dk), v_row = KvBytes(kv_types.v, dv);  // bytes
  const uint8_t* kc = k_cache_[il].data();
  const uint8_t* vc = v_cache_[il].data();
  // Items are (kv head, run of tokens), in that order. A run (FindRuns) is up to
  // attend_tokens_ consecutive positions of one sequence (a prompt's), which AttendTokens
  // runs with the query heads of the group over one read of their shared rows; consecutive
  // items read the same K/V rows, which later runs then find in L2 (in token order the other
  // heads' rows went through it in between). Every kv head has the same runs, so the
  // threads' contiguous ranges are equal work where the kv heads divide among them (16 or 4
  // on 2). A sliding layer's tokens each see a window of their own: a run per token.
  const int* run_start = window ? token_runs_.data() : run_start_.data();
  const int runs = window ? static_cast<int>(batch.size()) : n_runs_;
  const int heads = attend_heads();  // per AttendTokens call
  const uint32_t cells = cells_[il];
  pool_.ParallelFor(int64_t{runs} * n_kv, [&](int64_t begin, int64_t end, int thread) {
    float* p = scores_.data() + static_cast<size_t>(thread) * heads * attend_tokens_ * kAttendTile;
    for (int64_t item = begin; item < end; ++item) {
      const int kvh = static_cast<int>(item / runs), r = static_cast<int>(item % runs);
      const int t = run_start[r], n_tok = run_start[r + 1] - t;
      const int h = kvh * group;  // the group's first query head
      // Causal: positions first..pos of its sequence (first > 0 only past a window).
      const uint32_t pos = batch[t].pos;
      const uint32_t first = window && pos + 1 > window ? pos + 1 - window : 0;
      const int64_t head = (int64_t{batch[t].seq} * n_kv + kvh) * cells + Cell(il, first);
      for (int g0 = 0; g0 < group; g0 += heads) {
        AttendQueries qs{q_.data() + int64_t{t} * hp_.n_embd_q() + int64_t{h + g0} * dk,
                         hp_.n_embd_q(),
                         dk,
                         attn_.data() + int64_t{t} * n_head * dv + int64_t{h + g0} * dv,
                         int64_t{n_head} * dv,
                         dv,
                         std::min(heads, group - g0),
                         n_tok,
                         pos + 1 - first};
        if (sinks != nullptr) qs.sinks = sinks + h + g0;
        AttendTokens(qs, kc + head * k_row, vc + head * v_row, kv_types, dk, dv, dk, dv, scale, p);
      }
    }
  });
}

}  // namespace mt
