#include "gpu/deltanet_ops.h"

#include <algorithm>
#include <cstring>
#include <span>

#include "gpu/op_bindings.h"
#include "gpu/shaders.h"

namespace mt::gpu {
namespace {

// The push constants of the shaders (shaders/<name>.comp), field for field. Offsets are
// word indices from the start of their binding.
struct ConvPush {
  uint32_t x_offset, stride, channels, d_conv, w_offset, runs_offset, n_runs, order_offset,
      state_offset;
};
struct RulePush {
  uint32_t qkv_offset, qkv_stride, ba_offset, z_offset, out_offset, n_k_heads, n_v_heads, dim,
      tiled, separate, dt_offset, a_offset, norm_offset, runs_offset, order_offset, state_offset,
      heads_offset, n_runs;
  float eps, scale;
};
static_assert(sizeof(RulePush) == 80);  // within the 128 bytes every device has

constexpr uint64_t kGroup = 64;        // every shader's local_size_x
constexpr int64_t kMaxConvWindow = 8;  // deltanet_conv.comp's MAX_W
constexpr int64_t kMaxHeadDim = 256;   // deltanet_rule.comp's MAX_S

// The rows of a batch: n rows of `row` floats, `stride` apart, from word `offset`.
bool RowsInside(const Buffer* b, uint64_t offset, int64_t n, int64_t row, int64_t stride) {
  const uint64_t floats =
      static_cast<uint64_t>(n - 1) * static_cast<uint64_t>(stride) + static_cast<uint64_t>(row);
  return floats < kIndexLimit && offset < kIndexLimit && Inside(offset, floats, b->size());
}
uint64_t RowFloats(int64_t n, int64_t row, int64_t stride) {
  return static_cast<uint64_t>(n - 1) * static_cast<uint64_t>(stride) + static_cast<uint64_t>(row);
}

// The runs' records and order, and the state from its offset: their bindings, or an error
// naming `op`.
Status CheckRuns(std::string_view op, const DeltaNetRuns& r, int64_t n) {
  if (r.buffer == nullptr) return InvalidArgument("gpu {}: no runs", op);
  if (r.n_runs < 0 || r.n_order < 0 || r.n_order > n ||
      static_cast<uint64_t>(r.n_runs) >= kIndexLimit / 8 ||
      !Inside(r.runs_offset, static_cast<uint64_t>(r.n_runs) * 8, r.buffer->size()) ||
      !Inside(r.order_offset, static_cast<uint64_t>(r.n_order), r.buffer->size())) {
    return InvalidArgument(
        "gpu {}: {} runs at word {} and {} tokens at word {} (of {} rows) reach past their "
        "buffer ({} bytes)",
        op, r.n_runs, r.runs_offset, r.n_order, r.order_offset, n, r.buffer->size());
  }
  return Status::Ok();
}

}  // namespace

struct DeltaNetOps::Impl {
  Device* device;
  Pipeline conv;  // shaders/deltanet_conv.comp
  Pipeline rule;  // shaders/deltanet_rule.comp

  template <typename Push>
  Status Dispatch(CommandRecorder& rec, std::string_view op, const Pipeline& pipeline,
                  std::span<const BufferRange> ranges, const Push& push, uint64_t groups) {
    return DispatchGroups(*device, rec, op, pipeline, ranges, push, groups);
  }

  // The state binding from `offset` floats to the buffer's end (at most the device's largest
  // range), which must hold a copy; copies are at offsets the runs name, below the end.
  Result<Binding> BindState(std::string_view op, const Buffer* state, uint64_t offset,
                            uint64_t copy_floats) const {
    if (state == nullptr) return InvalidArgument("gpu {}: no state buffer", op);
    const uint64_t words = state->size() / 4;
    const uint64_t align = device->storage_offset_alignment();
    if (offset > words || copy_floats == 0 || copy_floats > words - offset) {
      return InvalidArgument("gpu {}: a state copy of {} floats at float {} is past the buffer", op,
                             copy_floats, offset);
    }
    const Binding b = Bind(state, offset, words - offset, align);
    if (b.range.size > device->max_storage_range() || b.range.size / 4 >= kIndexLimit) {
      return InvalidArgument("gpu {}: the states ({} bytes) are past the device's largest binding",
                             op, b.range.size);
    }
    return b;
  }
};

DeltaNetOps::DeltaNetOps(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DeltaNetOps::~DeltaNetOps() = default;

Result<std::unique_ptr<DeltaNetOps>> DeltaNetOps::Create(Device* device) {
  auto impl = std::make_unique<Impl>();
  impl->device = device;
  impl->conv = MT_TRY(
      device->CreatePipeline("deltanet_conv", ShaderSpirv("deltanet_conv"), 4, sizeof(ConvPush)));
  impl->rule = MT_TRY(
      device->CreatePipeline("deltanet_rule", ShaderSpirv("deltanet_rule"), 7, sizeof(RulePush)));
  return std::unique_ptr<DeltaNetOps>(new DeltaNetOps(std::move(impl)));
}

Status DeltaNetOps::Record(CommandRecorder& rec, const DeltaConvArgs& a) {
  const int64_t stride = a.stride > 0 ? a.stride : a.channels;
  if (a.x == nullptr || a.weight == nullptr) {
    return InvalidArgument("gpu deltanet conv: a missing buffer");
  }
  if (a.n < 0 || a.channels <= 0 || stride < a.channels || a.d_conv < 1 ||
      a.d_conv - 1 > kMaxConvWindow ||
      a.copy_floats < static_cast<uint64_t>(a.channels) * static_cast<uint64_t>(a.d_conv - 1)) {
    return InvalidArgument(
        "gpu deltanet conv: bad shape n={} channels={} stride={} d_conv={} (1 to {}) copy {}", a.n,
        a.channels, stride, a.d_conv, kMaxConvWindow + 1, a.copy_floats);
  }
  if (a.n == 0 || a.runs.n_runs == 0) return Status::Ok();
  MT_RETURN_IF_ERROR(CheckRuns("deltanet conv", a.runs, a.n));
  const uint64_t weights = static_cast<uint64_t>(a.channels) * static_cast<uint64_t>(a.d_conv);
  if (!RowsInside(a.x, a.x_offset, a.n, a.channels, stride) ||
      !Inside(a.weight_offset, weights, a.weight->size()) ||
      static_cast<uint64_t>(a.runs.n_runs) * static_cast<uint64_t>(a.channels) >= kIndexLimit) {
    return InvalidArgument(
        "gpu deltanet conv: n={} channels={} stride={}: x (at float {}) or the weights (at float "
        "{}) reach past their buffer",
        a.n, a.channels, stride, a.x_offset, a.weight_offset);
  }
  const Binding state =
      MT_TRY(impl_->BindState("deltanet conv", a.state, a.state_offset, a.copy_floats));
  const uint64_t align = impl_->device->storage_offset_alignment();
  const Binding x = Bind(a.x, a.x_offset, RowFloats(a.n, a.channels, stride), align);
  const Binding w = Bind(a.weight, a.weight_offset, weights, align);
  const uint64_t runs_words =
      std::max(a.runs.runs_offset + a.runs.n_runs * 8, a.runs.order_offset + a.runs.n_order);
  const Binding runs = Bind(a.runs.buffer, 0, runs_words, align);
  const ConvPush push = {x.skip,
                         static_cast<uint32_t>(stride),
                         static_cast<uint32_t>(a.channels),
                         static_cast<uint32_t>(a.d_conv),
                         w.skip,
                         static_cast<uint32_t>(a.runs.runs_offset),
                         static_cast<uint32_t>(a.runs.n_runs),
                         static_cast<uint32_t>(a.runs.order_offset),
                         state.skip};
  const BufferRange ranges[4] = {x.range, w.range, runs.range, state.range};
  const uint64_t items = static_cast<uint64_t>(a.runs.n_runs) * static_cast<uint64_t>(a.channels);
  return impl_->Dispatch(rec, "deltanet conv", impl_->conv, ranges, push,
                         (items + kGroup - 1) / kGroup);
}

Status DeltaNetOps::Record(CommandRecorder& rec, const GatedDeltaArgs& a) {
  if (a.qkv == nullptr || a.ba == nullptr || a.z == nullptr || a.out == nullptr ||
      a.params == nullptr) {
    return InvalidArgument("gpu deltanet rule: a missing buffer");
  }
  const int64_t S = a.dim, Hk = a.n_k_heads, Hv = a.n_v_heads;
  const bool heads_ok = Hk > 0 && Hv > 0 && Hv % Hk == 0 && Hv <= 4096;
  const int64_t C = heads_ok ? (2 * Hk + Hv) * S : 0, V = heads_ok ? Hv * S : 0;
  const int64_t stride = a.qkv_stride > 0 ? a.qkv_stride : C;
  if (a.n < 0 || !heads_ok || S <= 0 || S > kMaxHeadDim || stride < C ||
      a.copy_floats < a.heads_offset + static_cast<uint64_t>(Hv * S * S)) {
    return InvalidArgument(
        "gpu deltanet rule: bad shape n={} key heads {} value heads {} (a multiple) dim {} (at "
        "most {}) stride {} copy {} heads at {}",
        a.n, Hk, Hv, S, kMaxHeadDim, stride, a.copy_floats, a.heads_offset);
  }
  if (a.n == 0 || a.runs.n_runs == 0) return Status::Ok();
  MT_RETURN_IF_ERROR(CheckRuns("deltanet rule", a.runs, a.n));
  if (!RowsInside(a.qkv, a.qkv_offset, a.n, C, stride) ||
      !RowsInside(a.ba, a.ba_offset, a.n, 2 * Hv, 2 * Hv) ||
      !RowsInside(a.z, a.z_offset, a.n, V, V) || !RowsInside(a.out, a.out_offset, a.n, V, V) ||
      !Inside(a.dt_offset, Hv, a.params->size()) || !Inside(a.a_offset, Hv, a.params->size()) ||
      !Inside(a.norm_offset, S, a.params->size()) ||
      static_cast<uint64_t>(a.runs.n_runs) * static_cast<uint64_t>(Hv) >= kIndexLimit) {
    return InvalidArgument(
        "gpu deltanet rule: n={} key heads {} value heads {} dim {}: qkv (at float {}), ba (at "
        "{}), z (at {}), out (at {}) or the parameters (at {}, {}, {}) reach past their buffer",
        a.n, Hk, Hv, S, a.qkv_offset, a.ba_offset, a.z_offset, a.out_offset, a.dt_offset,
        a.a_offset, a.norm_offset);
  }
  const Binding state =
      MT_TRY(impl_->BindState("deltanet rule", a.state, a.state_offset, a.copy_floats));
  const uint64_t align = impl_->device->storage_offset_alignment();
  const Binding qkv = Bind(a.qkv, a.qkv_offset, RowFloats(a.n, C, stride), align);
  const Binding ba = Bind(a.ba, a.ba_offset, RowFloats(a.n, 2 * Hv, 2 * Hv), align);
  const Binding z = Bind(a.z, a.z_offset, RowFloats(a.n, V, V), align);
  const Binding out = Bind(a.out, a.out_offset, RowFloats(a.n, V, V), align);
  // The parameters from the lowest of the three offsets.
  const uint64_t lo = std::min({a.dt_offset, a.a_offset, a.norm_offset});
  const uint64_t hi = std::max({a.dt_offset + Hv, a.a_offset + Hv, a.norm_offset + S});
  const Binding params = Bind(a.params, lo, hi - lo, align);
  const uint64_t runs_words =
      std::max(a.runs.runs_offset + a.runs.n_runs * 8, a.runs.order_offset + a.runs.n_order);
  const Binding runs = Bind(a.runs.buffer, 0, runs_words, align);
  const RulePush push = {qkv.skip,
                         static_cast<uint32_t>(stride),
                         ba.skip,
                         z.skip,
                         out.skip,
                         static_cast<uint32_t>(Hk),
                         static_cast<uint32_t>(Hv),
                         static_cast<uint32_t>(S),
                         a.tiled ? 1u : 0u,
                         a.separate_beta_alpha ? 1u : 0u,
                         static_cast<uint32_t>(params.skip + (a.dt_offset - lo)),
                         static_cast<uint32_t>(params.skip + (a.a_offset - lo)),
                         static_cast<uint32_t>(params.skip + (a.norm_offset - lo)),
                         static_cast<uint32_t>(a.runs.runs_offset),
                         static_cast<uint32_t>(a.runs.order_offset),
                         state.skip,
                         static_cast<uint32_t>(a.heads_offset),
                         static_cast<uint32_t>(a.runs.n_runs),
                         a.eps,
                         a.scale};
  const BufferRange ranges[7] = {qkv.range,  ba.range,    z.range,  params.range,
                                 runs.range, state.range, out.range};
  return impl_->Dispatch(rec, "deltanet rule", impl_->rule, ranges, push,
                         static_cast<uint64_t>(a.runs.n_runs) * static_cast<uint64_t>(Hv));
}

}  // namespace mt::gpu
