// x86 CPU features, read once with cpuid (and xgetbv for OS support of AVX/AVX-512
// state). Kernels pick their variant from these at start-up.
#pragma once

#include <string>

namespace mt {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx_vnni = false;  // VEX-encoded vpdpbusd on ymm (Alder Lake, Sapphire Rapids)
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512vnni = false;
  bool avx512bf16 = false;

  // "avx2 fma f16c avx512f ..." for logs and bench output.
  std::string ToString() const;
};

// The features of this machine (computed once, thread-safe).
const CpuFeatures& GetCpuFeatures();

}  // namespace mt
