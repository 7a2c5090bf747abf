#include "kernels/attention.h"

#include "base/check.h"
#include "kernels/attention_internal.h"

namespace mt {
namespace {

using AttendFn = void (*)(const kernels::AttendArgs&);

AttendFn Variant(Isa isa) {
  MT_CHECK_MSG(IsaSupported(isa), "attention variant not supported by this CPU or build");
  switch (isa) {
    case Isa::kScalar:
      return kernels::AttendScalar;
#ifdef MT_KERNELS_X86
    case Isa::kAvx2:
      return kernels::AttendAvx2;
    case Isa::kAvx512:
      return kernels::AttendAvx512;
#endif
    default:
      break;
  }
  MT_CHECK_MSG(false, "attention variant not compiled in");
  return kernels::AttendScalar;
}

void Run(AttendFn fn, const float* q, const void* k, const void* v, KvElemType type,
         int64_t k_stride, int64_t v_stride, int64_t n_pos, int d_k, int d_v, float scale,
         float* out, float* scratch) {
  MT_CHECK(n_pos >= 1 && d_k >= 1 && d_v >= 1 && k_stride >= 0 && v_stride >= 0);
  fn(kernels::AttendArgs{q, k, v, type == KvElemType::kF16, k_stride, v_stride, n_pos, d_k, d_v,
                         scale, out, scratch});
}

}  // namespace

void AttendHead(const float* q, const void* k, const void* v, KvElemType type, int64_t k_stride,
                int64_t v_stride, int64_t n_pos, int d_k, int d_v, float scale, float* out,
                float* scratch) {
  static const AttendFn fn = Variant(ActiveIsa());
  Run(fn, q, k, v, type, k_stride, v_stride, n_pos, d_k, d_v, scale, out, scratch);
}

void AttendHead(Isa isa, const float* q, const void* k, const void* v, KvElemType type,
                int64_t k_stride, int64_t v_stride, int64_t n_pos, int d_k, int d_v, float scale,
                float* out, float* scratch) {
  Run(Variant(isa), q, k, v, type, k_stride, v_stride, n_pos, d_k, d_v, scale, out, scratch);
}

}  // namespace mt
