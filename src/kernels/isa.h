// Which instruction-set variant of the matmul kernels runs. Each variant lives in its own
// translation unit compiled with its own flags (kernels/matmul_<isa>.cc); the choice is made
// once, at the first use, from the CPU's features (base/cpu_features.h) or from the
// environment variable MOETIER_ISA=scalar|avx2|avx512 (for tests and benchmarks).
//
// Numerics: every variant computes the same definition (kernels/matmul.h) within its stated
// tolerance, but variants differ from each other in float rounding. Within one variant the
// result of each (row, token) is bit-identical whatever the batch and the row split.
#pragma once

#include <string_view>

#include "base/status.h"

namespace mt {

enum class Isa {
  kScalar,  // portable C++, the reference of the integer path
  kAvx2,    // AVX2 + FMA + F16C (Haswell, Zen 1 and later)
  kAvx512,  // AVX-512 F/BW/VL/DQ + VNNI (Ice Lake, Sapphire Rapids, Zen 4 and later)
};

inline constexpr Isa kAllIsas[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512};

// "scalar", "avx2", "avx512".
std::string_view IsaName(Isa isa);

// True if this build contains the variant and this CPU can run it.
bool IsaSupported(Isa isa);

// The best variant this CPU supports.
Isa BestIsa();

// The variant named by MOETIER_ISA, or BestIsa() when it is unset or empty. An unknown
// name, or a variant this CPU cannot run, is an InvalidArgument error naming the variable,
// the value and the CPU's features. Thread-safe.
Result<Isa> IsaFromEnv();

// The variant the kernels use: IsaFromEnv(), resolved once at the first call. If
// MOETIER_ISA is invalid it prints the error and exits with status 2 (a CLI can call
// IsaFromEnv() first to report it properly). Thread-safe.
Isa ActiveIsa();

}  // namespace mt
