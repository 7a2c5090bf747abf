#include "gpu/matmul.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <string>

#include "base/check.h"
#include "gpu/shaders.h"
#include "quant/iq_grids.h"
#include "quant/quantize_iq.h"  // IsIqLatticeType: these read their grids from a 4th binding

namespace mt::gpu {
namespace {

// The push constants of the mm_*.comp shaders (shaders/mm_head.glsl), field for field.
struct MatMulPush {
  uint32_t w_offset;   // bytes: row 0 of W in the weight binding
  uint32_t row_bytes;  // bytes per row of W
  uint32_t m, k, n;
  uint32_t x_offset, x_stride;  // floats
  uint32_t y_offset, y_stride;  // floats
  uint32_t row_threads;         // threads per row (RowThreads)
  uint32_t heads;               // products a dispatch (MatMulArgs::heads)
  uint32_t w_head_bytes;        // bytes between heads' W
  uint32_t x_head, y_head;      // floats between heads' X and Y
};
static_assert(sizeof(MatMulPush) == 56);

constexpr uint32_t kTokensPerGroup = 8;  // TOKENS in shaders/mm_main.glsl
constexpr uint32_t kGroupThreads = 64;   // WG
constexpr int64_t kMaxGroupsZ = 65535;   // Vulkan's least maxComputeWorkGroupCount[2]

// The threads of a workgroup that share one row: its chunks (32 elements of a block type, or
// single elements of f32/f16/bf16: CHUNK of the shaders) rounded up to a power of 2, at least
// a thread per token of the group (each writes one) and at most the workgroup.
uint32_t RowThreads(const GgmlTypeTraits& traits, int64_t k) {
  const int64_t chunks = traits.block_size == 1 ? k : k / 32;
  uint32_t threads = kTokensPerGroup;
  while (threads < kGroupThreads && threads < chunks) threads *= 2;
  return threads;
}

template <typename Entry, int kPoints>
void AppendGrid(const IqGrid<Entry, kPoints>& grid, std::vector<uint32_t>* words) {
  const size_t at = words->size();
  words->resize(at + sizeof(grid.entry) / 4);
  std::memcpy(words->data() + at, grid.entry, sizeof(grid.entry));
}

// The grids one after another, at the word offsets IQ*_GRID of shaders/mm_iq_grids.glsl.
std::vector<uint32_t> GridWords() {
  std::vector<uint32_t> words;
  AppendGrid(kIq2XxsGrid, &words);  // word 0
  AppendGrid(kIq2XsGrid, &words);   // 512
  AppendGrid(kIq2SGrid, &words);    // 1536
  AppendGrid(kIq3XxsGrid, &words);  // 3584
  AppendGrid(kIq3SGrid, &words);    // 3840
  MT_CHECK_MSG(words.size() == 4352, "gpu matmul: IQ grid layout changed");
  AppendGrid(kIq1SGrid, &words);  // 4352
  return words;
}

// "mm_q4_k" for Q4_K: the shader's file name.
std::string ShaderName(GgmlType type) {
  std::string name = "mm_" + std::string(TypeName(type));
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return name;
}

// The binding of `bytes` bytes from byte `offset` of `buffer`: the offset rounded down to
// the device's alignment, the rest left to the shader (returned in *skip).
BufferRange Binding(const Buffer* buffer, uint64_t offset, uint64_t bytes, uint64_t alignment,
                    uint64_t* skip) {
  const uint64_t start = offset / alignment * alignment;
  *skip = offset - start;
  // Whole words: a shader reads the word that holds a range's last byte, and robust buffer
  // access gives 0 for a word that is not wholly inside the binding. Buffers are allocated
  // in 16-byte units, so the rounded range stays inside the allocation.
  return BufferRange{buffer, start, (*skip + bytes + 3) / 4 * 4};
}

}  // namespace

const std::vector<GgmlType>& GpuMatMulTypes() {
  static const std::vector<GgmlType> kTypes = {
      GgmlType::kF32,     GgmlType::kF16,    GgmlType::kBF16,   GgmlType::kQ8_0,
      GgmlType::kQ4_K,    GgmlType::kQ6_K,   GgmlType::kQ5_K,   GgmlType::kQ4_0,
      GgmlType::kQ4_1,    GgmlType::kQ5_0,   GgmlType::kQ5_1,   GgmlType::kQ2_K,
      GgmlType::kQ3_K,    GgmlType::kMXFP4,  GgmlType::kIQ4_NL, GgmlType::kIQ4_XS,
      GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS, GgmlType::kIQ2_S,  GgmlType::kIQ3_XXS,
      GgmlType::kIQ3_S,   GgmlType::kIQ1_S,  GgmlType::kIQ1_M,
  };
  return kTypes;
}

bool GpuCanMatMul(GgmlType type) {
  const std::vector<GgmlType>& types = GpuMatMulTypes();
  return std::find(types.begin(), types.end(), type) != types.end();
}

Result<std::unique_ptr<MatMul>> MatMul::Create(Device* device) {
  std::unique_ptr<MatMul> matmul(new MatMul(device));
  const std::vector<uint32_t> words = GridWords();
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(words.data()),
                                       words.size() * 4);
  Buffer grids = MT_TRY(device->CreateBuffer(bytes.size()));
  MT_RETURN_IF_ERROR(device->Upload(grids, 0, bytes));
  matmul->grids_ = std::move(grids);
  return matmul;
}

Result<const Pipeline*> MatMul::PipelineFor(GgmlType type) {
  const auto id = static_cast<size_t>(type);
  if (id >= pipelines_.size()) pipelines_.resize(id + 1);
  if (pipelines_[id] == nullptr) {
    const std::string name = ShaderName(type);
    Pipeline p = MT_TRY(device_->CreatePipeline(name, ShaderSpirv(name),
                                                IsIqLatticeType(type) ? 4 : 3, sizeof(MatMulPush)));
    pipelines_[id] = std::make_unique<Pipeline>(std::move(p));
  }
  return pipelines_[id].get();
}

Status MatMul::Record(CommandRecorder& rec, const MatMulArgs& a) {
  const std::string_view type_name = TypeName(a.type);
  if (!GpuCanMatMul(a.type)) return InvalidArgument("gpu matmul: no shader for {}", type_name);
  const GgmlTypeTraits& traits = TraitsOf(a.type);
  const int64_t x_stride = a.x_stride > 0 ? a.x_stride : a.k;
  const int64_t y_stride = a.y_stride > 0 ? a.y_stride : a.m;
  if (a.m <= 0 || a.k <= 0 || a.n <= 0 || a.k % traits.block_size != 0 || x_stride < a.k ||
      y_stride < a.m || a.heads <= 0 || a.heads >= 65536) {
    return InvalidArgument(
        "gpu matmul {}: bad shape m={} k={} n={} (k a multiple of {}), strides {} {}, heads {}",
        type_name, a.m, a.k, a.n, traits.block_size, x_stride, y_stride, a.heads);
  }
  if (a.w == nullptr || a.x == nullptr || a.y == nullptr) {
    return InvalidArgument("gpu matmul {}: a missing buffer", type_name);
  }
  // More token groups x heads than a dispatch's z holds: the heads in parts (each head's sums
  // are its own, so the bits do not change).
  const int64_t token_groups = (a.n + kTokensPerGroup - 1) / kTokensPerGroup;
  if (a.heads > 1 && token_groups * a.heads > kMaxGroupsZ) {
    const int64_t per_part = std::max<int64_t>(kMaxGroupsZ / token_groups, 1);
    for (int64_t h0 = 0; h0 < a.heads; h0 += per_part) {
      MatMulArgs part = a;
      part.heads = std::min(per_part, a.heads - h0);
      part.w_offset += static_cast<uint64_t>(h0) * a.w_head_bytes;
      part.x_offset += static_cast<uint64_t>(h0) * a.x_head_floats;
      part.y_offset += static_cast<uint64_t>(h0) * a.y_head_floats;
      MT_RETURN_IF_ERROR(Record(rec, part));
    }
    return rec.status();
  }
  const uint64_t row_bytes = RowBytes(a.type, static_cast<uint64_t>(a.k));
  const uint64_t more_heads = static_cast<uint64_t>(a.heads - 1);
  const uint64_t w_bytes = more_heads * a.w_head_bytes + row_bytes * static_cast<uint64_t>(a.m);
  const uint64_t x_floats =
      more_heads * a.x_head_floats + static_cast<uint64_t>((a.n - 1) * x_stride + a.k);
  const uint64_t y_floats =
      more_heads * a.y_head_floats + static_cast<uint64_t>((a.n - 1) * y_stride + a.m);
  if (a.w_offset + w_bytes > a.w->size() || (a.x_offset + x_floats) * 4 > a.x->size() ||
      (a.y_offset + y_floats) * 4 > a.y->size()) {
    return InvalidArgument(
        "gpu matmul {} m={} k={} n={}: W, X or Y reaches past its buffer ({} + {} > {} bytes, "
        "{} + {} > {} floats, {} + {} > {} floats)",
        type_name, a.m, a.k, a.n, a.w_offset, w_bytes, a.w->size(), a.x_offset, x_floats,
        a.x->size() / 4, a.y_offset, y_floats, a.y->size() / 4);
  }
  const uint64_t align = device_->storage_offset_alignment();
  uint64_t w_skip, x_skip, y_skip;
  const BufferRange ranges[4] = {
      Binding(a.w, a.w_offset, w_bytes, align, &w_skip),
      Binding(a.x, a.x_offset * 4, x_floats * 4, align, &x_skip),
      Binding(a.y, a.y_offset * 4, y_floats * 4, align, &y_skip),
      BufferRange{&grids_, 0, grids_.size()},
  };
  // The shader indexes 32-bit words with 32-bit integers.
  const uint64_t kMaxWords = uint64_t{1} << 32;
  if (ranges[0].size / 4 >= kMaxWords || ranges[1].size / 4 >= kMaxWords ||
      ranges[2].size / 4 >= kMaxWords || x_skip % 4 != 0 || y_skip % 4 != 0) {
    return InvalidArgument("gpu matmul {} m={} k={} n={}: a binding past 16 GiB", type_name, a.m,
                           a.k, a.n);
  }
  const Pipeline* pipeline = MT_TRY(PipelineFor(a.type));
  const MatMulPush push = {
      static_cast<uint32_t>(w_skip),
      static_cast<uint32_t>(row_bytes),
      static_cast<uint32_t>(a.m),
      static_cast<uint32_t>(a.k),
      static_cast<uint32_t>(a.n),
      static_cast<uint32_t>(x_skip / 4),
      static_cast<uint32_t>(x_stride),
      static_cast<uint32_t>(y_skip / 4),
      static_cast<uint32_t>(y_stride),
      RowThreads(traits, a.k),
      static_cast<uint32_t>(a.heads),
      static_cast<uint32_t>(a.w_head_bytes),
      static_cast<uint32_t>(a.x_head_floats),
      static_cast<uint32_t>(a.y_head_floats),
  };
  uint8_t push_bytes[sizeof(MatMulPush)];
  std::memcpy(push_bytes, &push, sizeof(push));
  // Runs of rows as (x, y) groups: group = y * count_x + x; the last y may hold fewer than
  // count_x. z: the runs of tokens of head 0, then of head 1, ...
  const uint64_t rows_per_group = kGroupThreads / push.row_threads;
  const uint64_t groups = (static_cast<uint64_t>(a.m) + rows_per_group - 1) / rows_per_group;
  const uint64_t max_x = device_->max_group_count_x();
  const uint64_t groups_x = std::min<uint64_t>(groups, max_x);
  const uint64_t groups_y = (groups + groups_x - 1) / groups_x;
  const uint64_t groups_z = (static_cast<uint64_t>(a.n) + kTokensPerGroup - 1) / kTokensPerGroup *
                            static_cast<uint64_t>(a.heads);
  if (groups_z > kMaxGroupsZ) {
    return InvalidArgument("gpu matmul {}: {} tokens are more than one dispatch holds", type_name,
                           a.n);
  }
  rec.Dispatch(*pipeline, std::span(ranges, IsIqLatticeType(a.type) ? 4 : 3), push_bytes,
               static_cast<uint32_t>(groups_x), static_cast<uint32_t>(groups_y),
               static_cast<uint32_t>(groups_z));
  return rec.status();
}

Status MatMul::Run(const MatMulArgs& args) {
  Status recorded;
  Status executed = device_->Execute([&](CommandRecorder& rec) { recorded = Record(rec, args); });
  MT_RETURN_IF_ERROR(recorded);
  return executed;
}

}  // namespace mt::gpu
