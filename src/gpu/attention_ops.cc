#include "gpu/attention_ops.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <span>

#include "gpu/op_bindings.h"
#include "gpu/shaders.h"

namespace mt::gpu {
namespace {

// The push constants of the shaders (shaders/<name>.comp), field for field. Offsets are
// word indices from the start of their binding.
struct AddBiasPush {
  uint32_t x_offset, rows, width, stride, bias_offset;
};
struct RmsNormPush {
  uint32_t x_offset, y_offset, rows, dim, stride, weight_offset, has_weight;
  float eps;
};
struct RopePush {
  uint32_t x_offset, n, heads, head_dim, stride, n_rot, neox, cs_offset;
};
// copy_rows (y = x) and sigmoid_gate (x *= sigmoid(g)): rows of two buffers at their strides.
struct RowPairPush {
  uint32_t a_offset, b_offset, rows, width, a_stride, b_stride;
};
struct StoreKvPush {
  uint32_t x_offset, n, heads, head_dim, stride, tokens_offset, cache_offset, cells, f16, n_seq;
};
struct StoreKvQ8Push {
  uint32_t x_offset, n, heads, head_dim, stride, tokens_offset, cache_offset, cells, n_seq;
};
struct AttendPush {
  uint32_t q_offset, q_stride, out_offset, out_stride, n, n_head, n_head_kv, d_k, d_v,
      tokens_offset, k_offset, v_offset, cells, k_type, v_type, n_seq;
  float scale;
  uint32_t window, has_sinks, sinks_offset, v_row;
};
static_assert(sizeof(AttendPush) == 84);  // within the 128 bytes every device has

constexpr uint64_t kGroup = 64;  // every shader's local_size_x
// attend.comp's MAX_DK and MAX_DV: DeepSeek's MLA (a 576-dim K, a 512-dim V) fits.
constexpr int64_t kMaxDk = 576, kMaxDv = 512;

// The product of `factors`, or kIndexLimit when it reaches that (no overflow).
uint64_t Product(std::initializer_list<uint64_t> factors) {
  uint64_t p = 1;
  for (const uint64_t f : factors) {
    if (f != 0 && p > (kIndexLimit - 1) / f) return kIndexLimit;
    p *= f;
  }
  return p;
}

// a * b, two counts of a row (heads and dims), or 0 when either is not in [1, 2^31) (no
// overflow): the callers refuse a row of 0.
int64_t Dims(int64_t a, int64_t b) {
  const auto limit = static_cast<int64_t>(kIndexLimit);
  return a > 0 && b > 0 && a < limit && b < limit ? a * b : 0;
}

// The bytes of a cache cell of d elements of `type` (q8_0: d a multiple of 32).
uint64_t CellBytes(KvElem type, uint64_t d) {
  return type == KvElem::kF16 ? 2 * d : type == KvElem::kF32 ? 4 * d : d / 32 * 34;
}

// A KV cache's binding: from its (seq 0, head 0, cell 0) at byte `offset` (a multiple of 4)
// to the buffer's end or the device's largest range (below 4 GiB for q8_0, whose shaders
// index bytes), and how many sequences of `seq_bytes` bytes it holds whole.
struct CacheBinding {
  Binding binding;
  uint32_t n_seq = 0;
};

CacheBinding BindCache(const Buffer* cache, uint64_t offset, uint64_t seq_bytes, KvElem type,
                       uint64_t alignment, uint64_t max_range) {
  const uint64_t start = offset / alignment * alignment;
  const uint64_t skip = (offset - start) / 4;
  if (type == KvElem::kQ8_0) max_range = std::min<uint64_t>(max_range, (uint64_t{1} << 32) - 4);
  // Whole words: the buffer's memory is whole 16-byte units (gpu/device.h).
  const uint64_t words = std::min((cache->size() - start + 3) / 4, max_range / 4);
  CacheBinding c;
  c.binding = {BufferRange{cache, start, words * 4}, static_cast<uint32_t>(skip)};
  c.n_seq =
      words > skip
          ? static_cast<uint32_t>(std::min<uint64_t>((words - skip) * 4 / seq_bytes, kIndexLimit))
          : 0;
  return c;
}

}  // namespace

struct AttentionOps::Impl {
  Device* device;
  Pipeline add_bias;      // shaders/add_bias.comp
  Pipeline rms_norm;      // shaders/rms_norm.comp
  Pipeline rope;          // shaders/rope.comp
  Pipeline copy_rows;     // shaders/copy_rows.comp
  Pipeline sigmoid_gate;  // shaders/sigmoid_gate.comp
  Pipeline store_kv;      // shaders/store_kv.comp
  Pipeline store_kv_q8;   // shaders/store_kv_q8.comp
  Pipeline attend;        // shaders/attend.comp

  template <typename Push>
  Status Dispatch(CommandRecorder& rec, std::string_view op, const Pipeline& pipeline,
                  std::span<const BufferRange> ranges, const Push& push, uint64_t groups) {
    return DispatchGroups(*device, rec, op, pipeline, ranges, push, groups);
  }
};

AttentionOps::AttentionOps(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
AttentionOps::~AttentionOps() = default;

Result<std::unique_ptr<AttentionOps>> AttentionOps::Create(Device* device) {
  auto impl = std::make_unique<Impl>();
  impl->device = device;
  impl->add_bias =
      MT_TRY(device->CreatePipeline("add_bias", ShaderSpirv("add_bias"), 2, sizeof(AddBiasPush)));
  impl->rms_norm =
      MT_TRY(device->CreatePipeline("rms_norm", ShaderSpirv("rms_norm"), 3, sizeof(RmsNormPush)));
  impl->rope = MT_TRY(device->CreatePipeline("rope", ShaderSpirv("rope"), 2, sizeof(RopePush)));
  impl->copy_rows =
      MT_TRY(device->CreatePipeline("copy_rows", ShaderSpirv("copy_rows"), 2, sizeof(RowPairPush)));
  impl->sigmoid_gate = MT_TRY(
      device->CreatePipeline("sigmoid_gate", ShaderSpirv("sigmoid_gate"), 2, sizeof(RowPairPush)));
  impl->store_kv =
      MT_TRY(device->CreatePipeline("store_kv", ShaderSpirv("store_kv"), 3, sizeof(StoreKvPush)));
  impl->store_kv_q8 = MT_TRY(
      device->CreatePipeline("store_kv_q8", ShaderSpirv("store_kv_q8"), 3, sizeof(StoreKvQ8Push)));
  impl->attend =
      MT_TRY(device->CreatePipeline("attend", ShaderSpirv("attend"), 6, sizeof(AttendPush)));
  return std::unique_ptr<AttentionOps>(new AttentionOps(std::move(impl)));
}

Status AttentionOps::Record(CommandRecorder& rec, const AddBiasArgs& a) {
  const int64_t stride = a.stride > 0 ? a.stride : a.width;
  if (a.x == nullptr || a.bias == nullptr) return InvalidArgument("gpu add bias: a missing buffer");
  if (a.rows < 0 || a.width <= 0 || stride < a.width) {
    return InvalidArgument("gpu add bias: bad shape rows={} width={} stride={}", a.rows, a.width,
                           stride);
  }
  if (a.rows == 0) return Status::Ok();
  const uint64_t rows = a.rows, width = a.width;
  const uint64_t x_floats = Product({rows - 1, static_cast<uint64_t>(stride)}) + width;
  if (x_floats >= kIndexLimit || Product({rows, width}) >= kIndexLimit) {
    return InvalidArgument("gpu add bias: {} rows of {} floats are past 8 GiB", a.rows, stride);
  }
  if (!Inside(a.x_offset, x_floats, a.x->size()) || !Inside(a.bias_offset, width, a.bias->size())) {
    return InvalidArgument(
        "gpu add bias: rows={} width={} stride={}: x (at float {}) or the bias (at float {}) "
        "reaches past its buffer ({} and {} bytes)",
        a.rows, a.width, stride, a.x_offset, a.bias_offset, a.x->size(), a.bias->size());
  }
  const uint64_t align = impl_->device->storage_offset_alignment();
  const Binding x = Bind(a.x, a.x_offset, x_floats, align);
  const Binding bias = Bind(a.bias, a.bias_offset, width, align);
  const AddBiasPush push = {x.skip, static_cast<uint32_t>(rows), static_cast<uint32_t>(width),
                            static_cast<uint32_t>(stride), bias.skip};
  const BufferRange ranges[2] = {x.range, bias.range};
  return impl_->Dispatch(rec, "add bias", impl_->add_bias, ranges, push,
                         (rows * width + kGroup - 1) / kGroup);
}

Status AttentionOps::Record(CommandRecorder& rec, const RmsNormArgs& a) {
  const int64_t stride = a.stride > 0 ? a.stride : a.dim;
  if (a.x == nullptr || a.y == nullptr) return InvalidArgument("gpu rms norm: a missing buffer");
  if (a.rows < 0 || a.dim <= 0 || stride < a.dim) {
    return InvalidArgument("gpu rms norm: bad shape rows={} dim={} stride={}", a.rows, a.dim,
                           stride);
  }
  if (a.rows == 0) return Status::Ok();
  const uint64_t rows = a.rows, dim = a.dim;
  const uint64_t floats = Product({rows - 1, static_cast<uint64_t>(stride)}) + dim;
  if (floats >= kIndexLimit) {
    return InvalidArgument("gpu rms norm: {} rows of {} floats are past 8 GiB", a.rows, stride);
  }
  if (!Inside(a.x_offset, floats, a.x->size()) || !Inside(a.y_offset, floats, a.y->size()) ||
      (a.weight != nullptr && !Inside(a.weight_offset, dim, a.weight->size()))) {
    return InvalidArgument(
        "gpu rms norm: rows={} dim={} stride={}: x (at float {}), y (at float {}) or the weight "
        "(at float {}) reaches past its buffer",
        a.rows, a.dim, stride, a.x_offset, a.y_offset, a.weight_offset);
  }
  const uint64_t align = impl_->device->storage_offset_alignment();
  const Binding x = Bind(a.x, a.x_offset, floats, align);
  const Binding y = Bind(a.y, a.y_offset, floats, align);
  // Without a weight the shader reads none: x's range stands in for the binding.
  const Binding w = a.weight != nullptr ? Bind(a.weight, a.weight_offset, dim, align) : x;
  const RmsNormPush push = {x.skip,
                            y.skip,
                            static_cast<uint32_t>(rows),
                            static_cast<uint32_t>(dim),
                            static_cast<uint32_t>(stride),
                            w.skip,
                            a.weight != nullptr ? 1u : 0u,
                            a.eps};
  const BufferRange ranges[3] = {x.range, y.range, w.range};
  return impl_->Dispatch(rec, "rms norm", impl_->rms_norm, ranges, push, rows);
}

Status AttentionOps::Record(CommandRecorder& rec, const RopeArgs& a) {
  if (a.x == nullptr || a.cos_sin == nullptr) return InvalidArgument("gpu rope: a missing buffer");
  const int64_t row = Dims(a.heads, a.head_dim);
  const int64_t stride = a.stride > 0 ? a.stride : row;
  if (a.n < 0 || row <= 0 || a.n_rot <= 0 || a.n_rot % 2 != 0 || a.n_rot > a.head_dim ||
      stride < row) {
    return InvalidArgument(
        "gpu rope: bad shape n={} heads={} head_dim={} n_rot={} (even, <= head_dim) stride={}", a.n,
        a.heads, a.head_dim, a.n_rot, stride);
  }
  if (a.n == 0) return Status::Ok();
  const uint64_t n = a.n;
  const uint64_t x_floats = Product({n - 1, static_cast<uint64_t>(stride)}) + row;
  const uint64_t cs_floats = Product({n, static_cast<uint64_t>(a.n_rot)});
  if (x_floats >= kIndexLimit || cs_floats >= kIndexLimit) {
    return InvalidArgument("gpu rope: {} tokens of {} floats are past 8 GiB", a.n, stride);
  }
  if (!Inside(a.x_offset, x_floats, a.x->size()) ||
      !Inside(a.cos_sin_offset, cs_floats, a.cos_sin->size())) {
    return InvalidArgument(
        "gpu rope: n={} heads={} head_dim={} n_rot={} stride={}: x (at float {}) or the angles "
        "(at float {}) reach past their buffer",
        a.n, a.heads, a.head_dim, a.n_rot, stride, a.x_offset, a.cos_sin_offset);
  }
  const uint64_t align = impl_->device->storage_offset_alignment();
  const Binding x = Bind(a.x, a.x_offset, x_floats, align);
  const Binding cs = Bind(a.cos_sin, a.cos_sin_offset, cs_floats, align);
  const RopePush push = {x.skip,
                         static_cast<uint32_t>(n),
                         static_cast<uint32_t>(a.heads),
                         static_cast<uint32_t>(a.head_dim),
                         static_cast<uint32_t>(stride),
                         static_cast<uint32_t>(a.n_rot),
                         a.neox ? 1u : 0u,
                         cs.skip};
  const BufferRange ranges[2] = {x.range, cs.range};
  const uint64_t pairs = n * static_cast<uint64_t>(a.heads * (a.n_rot / 2));
  return impl_->Dispatch(rec, "rope", impl_->rope, ranges, push, (pairs + kGroup - 1) / kGroup);
}

namespace {

// The rows of an op over two buffers (copy rows: x and y; sigmoid gate: x and g), each at its
// stride (0: the width) from its word offset: checked, bound and dispatched, one thread an
// element.
struct RowsOf {
  const Buffer* buffer;
  uint64_t offset;
  int64_t stride;
  char name;
};
Status RecordRowPair(AttentionOps::Impl& impl, CommandRecorder& rec, std::string_view op,
                     const Pipeline& pipeline, int64_t n_rows, int64_t n_width, RowsOf a,
                     RowsOf b) {
  const int64_t a_stride = a.stride > 0 ? a.stride : n_width;
  const int64_t b_stride = b.stride > 0 ? b.stride : n_width;
  if (a.buffer == nullptr || b.buffer == nullptr) {
    return InvalidArgument("gpu {}: a missing buffer", op);
  }
  if (n_rows < 0 || n_width <= 0 || a_stride < n_width || b_stride < n_width) {
    return InvalidArgument("gpu {}: bad shape rows={} width={} strides {} {}", op, n_rows, n_width,
                           a_stride, b_stride);
  }
  if (n_rows == 0) return Status::Ok();
  const uint64_t rows = n_rows, width = n_width;
  const uint64_t a_floats = Product({rows - 1, static_cast<uint64_t>(a_stride)}) + width;
  const uint64_t b_floats = Product({rows - 1, static_cast<uint64_t>(b_stride)}) + width;
  if (a_floats >= kIndexLimit || b_floats >= kIndexLimit || Product({rows, width}) >= kIndexLimit) {
    return InvalidArgument("gpu {}: {} rows of {} floats are past 8 GiB", op, n_rows,
                           std::max(a_stride, b_stride));
  }
  if (!Inside(a.offset, a_floats, a.buffer->size()) ||
      !Inside(b.offset, b_floats, b.buffer->size())) {
    return InvalidArgument(
        "gpu {}: rows={} width={} strides {} {}: {} (at float {}) or {} (at float {}) reaches "
        "past its buffer ({} and {} bytes)",
        op, n_rows, n_width, a_stride, b_stride, a.name, a.offset, b.name, b.offset,
        a.buffer->size(), b.buffer->size());
  }
  const uint64_t align = impl.device->storage_offset_alignment();
  const Binding ab = Bind(a.buffer, a.offset, a_floats, align);
  const Binding bb = Bind(b.buffer, b.offset, b_floats, align);
  const RowPairPush push = {ab.skip,
                            bb.skip,
                            static_cast<uint32_t>(rows),
                            static_cast<uint32_t>(width),
                            static_cast<uint32_t>(a_stride),
                            static_cast<uint32_t>(b_stride)};
  const BufferRange ranges[2] = {ab.range, bb.range};
  return impl.Dispatch(rec, op, pipeline, ranges, push, (rows * width + kGroup - 1) / kGroup);
}

}  // namespace

Status AttentionOps::Record(CommandRecorder& rec, const CopyRowsArgs& a) {
  return RecordRowPair(*impl_, rec, "copy rows", impl_->copy_rows, a.rows, a.width,
                       {a.x, a.x_offset, a.x_stride, 'x'}, {a.y, a.y_offset, a.y_stride, 'y'});
}

Status AttentionOps::Record(CommandRecorder& rec, const SigmoidGateArgs& a) {
  return RecordRowPair(*impl_, rec, "sigmoid gate", impl_->sigmoid_gate, a.rows, a.width,
                       {a.x, a.x_offset, a.x_stride, 'x'}, {a.g, a.g_offset, a.g_stride, 'g'});
}

Status AttentionOps::Record(CommandRecorder& rec, const StoreKvArgs& a) {
  if (a.x == nullptr || a.tokens.buffer == nullptr || a.cache == nullptr) {
    return InvalidArgument("gpu store kv: a missing buffer");
  }
  const int64_t row = Dims(a.heads, a.head_dim);
  const int64_t stride = a.stride > 0 ? a.stride : row;
  const bool q8 = a.type == KvElem::kQ8_0;
  if (a.n < 0 || row <= 0 || a.head_dim % (q8 ? 32 : 2) != 0 || stride < row || a.cells == 0 ||
      (a.type != KvElem::kF16 && a.type != KvElem::kF32 && !q8) || a.cache_offset % 4 != 0) {
    return InvalidArgument(
        "gpu store kv: bad shape n={} heads={} head_dim={} (even; q8_0: a multiple of 32) "
        "stride={} cells={} type {} cache offset {} (a multiple of 4)",
        a.n, a.heads, a.head_dim, stride, a.cells, static_cast<uint32_t>(a.type), a.cache_offset);
  }
  if (a.n == 0) return Status::Ok();
  const uint64_t n = a.n;
  // A sequence's cache: below 2^31 words (q8_0's shader indexes bytes: below 2^31 bytes).
  const uint64_t cell = CellBytes(a.type, a.head_dim);
  const uint64_t seq_units =
      Product({static_cast<uint64_t>(a.heads), a.cells, q8 ? cell : cell / 4});
  const uint64_t seq_bytes = q8 ? seq_units : 4 * seq_units;
  const uint64_t x_floats = Product({n - 1, static_cast<uint64_t>(stride)}) + row;
  if (x_floats >= kIndexLimit || seq_units >= kIndexLimit || n >= kIndexLimit / 2) {
    return InvalidArgument(
        "gpu store kv: {} tokens of {} floats, or a sequence's cache, past the shaders' indices",
        a.n, stride);
  }
  if (!Inside(a.x_offset, x_floats, a.x->size()) ||
      !Inside(a.tokens.offset, 2 * n, a.tokens.buffer->size()) ||
      !Inside(a.cache_offset / 4, (seq_bytes + 3) / 4, a.cache->size())) {
    return InvalidArgument(
        "gpu store kv: n={} heads={} head_dim={} cells={}: x (at float {}), the token slots (at "
        "word {}) or one sequence's cache (at byte {}) reaches past its buffer",
        a.n, a.heads, a.head_dim, a.cells, a.x_offset, a.tokens.offset, a.cache_offset);
  }
  const uint64_t align = impl_->device->storage_offset_alignment();
  const Binding x = Bind(a.x, a.x_offset, x_floats, align);
  const Binding tokens = Bind(a.tokens.buffer, a.tokens.offset, 2 * n, align);
  const CacheBinding cache = BindCache(a.cache, a.cache_offset, seq_bytes, a.type, align,
                                       impl_->device->max_storage_range());
  if (cache.n_seq == 0) {
    return InvalidArgument(
        "gpu store kv: one sequence's cache ({} bytes) is past the device's "
        "largest binding ({} bytes)",
        seq_bytes, impl_->device->max_storage_range());
  }
  const BufferRange ranges[3] = {x.range, tokens.range, cache.binding.range};
  if (q8) {
    const StoreKvQ8Push push = {x.skip,
                                static_cast<uint32_t>(n),
                                static_cast<uint32_t>(a.heads),
                                static_cast<uint32_t>(a.head_dim),
                                static_cast<uint32_t>(stride),
                                tokens.skip,
                                cache.binding.skip,
                                a.cells,
                                cache.n_seq};
    const uint64_t blocks = n * static_cast<uint64_t>(a.heads) * (a.head_dim / 32);
    return impl_->Dispatch(rec, "store kv", impl_->store_kv_q8, ranges, push,
                           (blocks + kGroup - 1) / kGroup);
  }
  const StoreKvPush push = {x.skip,
                            static_cast<uint32_t>(n),
                            static_cast<uint32_t>(a.heads),
                            static_cast<uint32_t>(a.head_dim),
                            static_cast<uint32_t>(stride),
                            tokens.skip,
                            cache.binding.skip,
                            a.cells,
                            a.type == KvElem::kF16 ? 1u : 0u,
                            cache.n_seq};
  const uint64_t words = n * static_cast<uint64_t>(a.heads) * (a.head_dim / 2);
  return impl_->Dispatch(rec, "store kv", impl_->store_kv, ranges, push,
                         (words + kGroup - 1) / kGroup);
}

Status AttentionOps::Record(CommandRecorder& rec, const AttendArgs& a) {
  if (a.q == nullptr || a.out == nullptr || a.tokens.buffer == nullptr || a.k_cache == nullptr ||
      a.v_cache == nullptr) {
    return InvalidArgument("gpu attend: a missing buffer");
  }
  const int64_t q_row = Dims(a.n_head, a.d_k), out_row = Dims(a.n_head, a.d_v);
  const int64_t q_stride = a.q_stride > 0 ? a.q_stride : q_row;
  const int64_t out_stride = a.out_stride > 0 ? a.out_stride : out_row;
  const int64_t v_cell = a.v_row > 0 ? a.v_row : a.d_v;
  // A q8_0 K or V: its rows (and V's cells) whole blocks.
  auto valid = [](KvElem t, int64_t d, int64_t cell) {
    return t == KvElem::kF16 || t == KvElem::kF32 ||
           (t == KvElem::kQ8_0 && d % 32 == 0 && cell % 32 == 0);
  };
  if (a.n < 0 || q_row <= 0 || out_row <= 0 || a.n_head_kv <= 0 || a.n_head % a.n_head_kv != 0 ||
      a.d_k % 2 != 0 || a.d_k > kMaxDk || a.d_v % 2 != 0 || a.d_v > kMaxDv || q_stride < q_row ||
      out_stride < out_row || a.cells == 0 || !valid(a.k_type, a.d_k, a.d_k) ||
      !valid(a.v_type, a.d_v, v_cell) || a.k_offset % 4 != 0 || a.v_offset % 4 != 0 ||
      v_cell < a.d_v || v_cell % 2 != 0 || v_cell >= static_cast<int64_t>(kIndexLimit)) {
    return InvalidArgument(
        "gpu attend: bad shape n={} n_head={} n_head_kv={} d_k={} d_v={} (even, at most {} and "
        "{}) strides {} {} cells={} types {} {} (q8_0: rows of whole blocks of 32) cache offsets "
        "{} {} (multiples of 4) V row {} (even, at least d_v)",
        a.n, a.n_head, a.n_head_kv, a.d_k, a.d_v, kMaxDk, kMaxDv, q_stride, out_stride, a.cells,
        static_cast<uint32_t>(a.k_type), static_cast<uint32_t>(a.v_type), a.k_offset, a.v_offset,
        v_cell);
  }
  if (a.n == 0) return Status::Ok();
  const uint64_t n = a.n, n_head = a.n_head, n_kv = a.n_head_kv;
  // A sequence's K and V: below 2^31 words (q8_0's indexed in bytes: below 2^31 bytes).
  auto units = [&](KvElem t, uint64_t d) {
    const uint64_t cell = CellBytes(t, d);
    return Product({n_kv, a.cells, t == KvElem::kQ8_0 ? cell : cell / 4});
  };
  const uint64_t k_units = units(a.k_type, a.d_k), v_units = units(a.v_type, v_cell);
  const uint64_t k_seq_bytes = a.k_type == KvElem::kQ8_0 ? k_units : 4 * k_units;
  const uint64_t v_seq_bytes = a.v_type == KvElem::kQ8_0 ? v_units : 4 * v_units;
  const uint64_t k_seq = (k_seq_bytes + 3) / 4, v_seq = (v_seq_bytes + 3) / 4;  // words
  const uint64_t q_floats = Product({n - 1, static_cast<uint64_t>(q_stride)}) + q_row;
  const uint64_t out_floats = Product({n - 1, static_cast<uint64_t>(out_stride)}) + out_row;
  if (q_floats >= kIndexLimit || out_floats >= kIndexLimit || k_units >= kIndexLimit ||
      v_units >= kIndexLimit || Product({n, n_head}) >= kIndexLimit) {
    return InvalidArgument(
        "gpu attend: {} tokens of {} query heads, or a sequence's cache, past the shaders' "
        "indices",
        a.n, a.n_head);
  }
  if (!Inside(a.q_offset, q_floats, a.q->size()) ||
      !Inside(a.out_offset, out_floats, a.out->size()) ||
      !Inside(a.tokens.offset, 2 * n, a.tokens.buffer->size()) ||
      !Inside(a.k_offset / 4, k_seq, a.k_cache->size()) ||
      !Inside(a.v_offset / 4, v_seq, a.v_cache->size()) ||
      (a.sinks != nullptr && !Inside(a.sinks_offset, n_head, a.sinks->size()))) {
    return InvalidArgument(
        "gpu attend: n={} n_head={} n_head_kv={} d_k={} d_v={} cells={}: q (at float {}), out "
        "(at float {}), the token slots (at word {}), one sequence's K or V (at bytes {}, {}) or "
        "the sinks (at float {}) reach past their buffer",
        a.n, a.n_head, a.n_head_kv, a.d_k, a.d_v, a.cells, a.q_offset, a.out_offset,
        a.tokens.offset, a.k_offset, a.v_offset, a.sinks_offset);
  }
  const uint64_t align = impl_->device->storage_offset_alignment();
  const uint64_t max_range = impl_->device->max_storage_range();
  const Binding q = Bind(a.q, a.q_offset, q_floats, align);
  const Binding out = Bind(a.out, a.out_offset, out_floats, align);
  const Binding tokens = Bind(a.tokens.buffer, a.tokens.offset, 2 * n, align);
  const CacheBinding k = BindCache(a.k_cache, a.k_offset, k_seq_bytes, a.k_type, align, max_range);
  const CacheBinding v = BindCache(a.v_cache, a.v_offset, v_seq_bytes, a.v_type, align, max_range);
  if (k.n_seq == 0 || v.n_seq == 0) {
    return InvalidArgument(
        "gpu attend: one sequence's K or V ({} or {} bytes) is past the device's largest "
        "binding ({} bytes)",
        k_seq_bytes, v_seq_bytes, max_range);
  }
  // Without sinks the shader reads none: q's range stands in for the binding.
  const Binding sinks = a.sinks != nullptr ? Bind(a.sinks, a.sinks_offset, n_head, align) : q;
  const AttendPush push = {q.skip,
                           static_cast<uint32_t>(q_stride),
                           out.skip,
                           static_cast<uint32_t>(out_stride),
                           static_cast<uint32_t>(n),
                           static_cast<uint32_t>(n_head),
                           static_cast<uint32_t>(n_kv),
                           static_cast<uint32_t>(a.d_k),
                           static_cast<uint32_t>(a.d_v),
                           tokens.skip,
                           k.binding.skip,
                           v.binding.skip,
                           a.cells,
                           static_cast<uint32_t>(a.k_type),
                           static_cast<uint32_t>(a.v_type),
                           std::min(k.n_seq, v.n_seq),
                           a.scale,
                           a.window,
                           a.sinks != nullptr ? 1u : 0u,
                           sinks.skip,
                           static_cast<uint32_t>(v_cell)};
  const BufferRange ranges[6] = {q.range,         out.range,       tokens.range,
                                 k.binding.range, v.binding.range, sinks.range};
  return impl_->Dispatch(rec, "attend", impl_->attend, ranges, push, n * n_head);
}

}  // namespace mt::gpu
