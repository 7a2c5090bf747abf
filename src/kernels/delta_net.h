// The gated delta rule of linear attention (Gated DeltaNet: qwen3next, qwen35moe), one token
// on one value head's state. The state S (S_k x S_v) is stored as M with M[j][i] = S[i][j]:
// row j, one value dim, holds S's column j (S_k contiguous floats), so each row's update
// depends on that row alone:
//   m = decay * M_in[j];  d = beta * (v[j] - m . k);  M_out[j] = m + d * k;
//   out[j] = scale * (M_out[j] . q)
// the recurrence llama.cpp's ggml_gated_delta_net runs per token (decay = exp(g)). One pass
// over the state per token: read, update in registers, write.
//
// Numerics: each variant (scalar, AVX2, AVX-512; kernels/isa.h) has one fixed float op
// sequence per row, whatever the batch, the thread or the other heads, so a token's output
// and state depend on its inputs only; variants agree within float rounding (tested).
#pragma once

#include <cstdint>

#include "kernels/isa.h"

namespace mt {

struct DeltaRuleArgs {
  const float* state_in = nullptr;  // (dim_v, dim_k) M before the token; null: all zeros
  float* state_out = nullptr;       // (dim_v, dim_k) M after it; may be state_in
  const float* q = nullptr;         // (dim_k) l2-normalised query
  const float* k = nullptr;         // (dim_k) l2-normalised key
  const float* v = nullptr;         // (dim_v)
  float decay = 1;                  // exp(g), in (0, 1]
  float beta = 0;                   // sigmoid(b)
  float scale = 1;                  // 1 / sqrt(dim_k)
  int dim_k = 0;
  int dim_v = 0;
  float* out = nullptr;  // (dim_v)
};

// One token's step with the active variant (ActiveIsa).
void DeltaRuleStep(const DeltaRuleArgs& a);
// ... with a given one (it must be IsaSupported; for tests).
void DeltaRuleStepWith(Isa isa, const DeltaRuleArgs& a);

namespace kernels {
void DeltaRuleScalar(const DeltaRuleArgs& a);
void DeltaRuleAvx2(const DeltaRuleArgs& a);    // only in x86 builds
void DeltaRuleAvx512(const DeltaRuleArgs& a);  // only in x86 builds
}  // namespace kernels

}  // namespace mt
