#include "kernels/delta_net.h"

#include "base/check.h"

namespace mt {
namespace {

using DeltaRuleFn = void (*)(const DeltaRuleArgs&);

DeltaRuleFn Variant(Isa isa) {
  switch (isa) {
#ifdef MT_KERNELS_X86
    case Isa::kAvx2:
      return kernels::DeltaRuleAvx2;
    case Isa::kAvx512:
      return kernels::DeltaRuleAvx512;
#endif
    default:
      return kernels::DeltaRuleScalar;
  }
}

}  // namespace

void DeltaRuleStepWith(Isa isa, const DeltaRuleArgs& a) {
  MT_CHECK(IsaSupported(isa) && a.dim_k >= 1 && a.dim_v >= 1 && a.state_out != nullptr);
  Variant(isa)(a);
}

void DeltaRuleStep(const DeltaRuleArgs& a) {
  MT_CHECK(a.dim_k >= 1 && a.dim_v >= 1 && a.state_out != nullptr);
  static const DeltaRuleFn fn = Variant(ActiveIsa());
  fn(a);
}

}  // namespace mt
