#include "engine/swiglu_ffn.h"

#include "kernels/ops.h"

namespace mt {

void SwiGluFfn::SizeScratch(ScratchSizer& sizer) {
  const size_t B = n_batch_, F = static_cast<size_t>(max_ff_);
  sizer.Resize(gate_, B * F);
  sizer.Resize(up_, B * F);
  sizer.Reserve(in_, static_cast<int64_t>(B), n_embd_);
  sizer.Reserve(hid_, static_cast<int64_t>(B), max_ff_);
}

void SwiGluFfn::Run(const WeightMatrix& gate, const WeightMatrix& up, const WeightMatrix& down,
                    const float* xn, int n, float* out) {
  const int64_t D = n_embd_, F = gate.rows;
  in_.Set(xn, D, n, D);
  ProjectAll(pool_, {{&gate, gate_.data(), F}, {&up, up_.data(), F}}, in_);
  SwiGlu(gate_.data(), up_.data(), int64_t{n} * F, gate_.data());
  hid_.Set(gate_.data(), F, n, F);
  Project(pool_, down, hid_, out, D);
}

}  // namespace mt
