#include "kernels/isa.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/cpu_features.h"

namespace mt {

std::string_view IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

bool IsaSupported(Isa isa) {
  const CpuFeatures& f = GetCpuFeatures();
  switch (isa) {
    case Isa::kScalar:
      return true;
    case Isa::kAvx2:
#ifdef MT_KERNELS_X86
      return f.avx2 && f.fma && f.f16c;
#else
      return false;
#endif
    case Isa::kAvx512:
#ifdef MT_KERNELS_X86
      return f.avx2 && f.fma && f.f16c && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq &&
             f.avx512vnni;
#else
      return false;
#endif
  }
  return false;
}

Isa BestIsa() {
  if (IsaSupported(Isa::kAvx512)) return Isa::kAvx512;
  if (IsaSupported(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kScalar;
}

Result<Isa> IsaFromEnv() {
  const char* env = std::getenv("MOETIER_ISA");
  if (env == nullptr || env[0] == '\0') return BestIsa();
  const std::string_view name(env);
  for (Isa isa : kAllIsas) {
    if (name != IsaName(isa)) continue;
    if (!IsaSupported(isa)) {
      return InvalidArgument("MOETIER_ISA={}: this CPU cannot run it (features: {})", name,
                             GetCpuFeatures().ToString());
    }
    return isa;
  }
  return InvalidArgument("MOETIER_ISA={}: unknown variant (expected scalar, avx2 or avx512)", name);
}

Isa ActiveIsa() {
  static const Isa active = [] {
    Result<Isa> isa = IsaFromEnv();
    if (!isa.ok()) {
      std::fprintf(stderr, "moetier: %s\n", isa.status().message().c_str());
      std::exit(2);
    }
    return isa.value();
  }();
  return active;
}

}  // namespace mt
