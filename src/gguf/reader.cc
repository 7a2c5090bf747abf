// GGUF reader: parses one image with every read bounds-checked and every size
// overflow-checked, and opens split sets. Facts about the format come from ggml's gguf.cpp,
// gguf-py and llama.cpp's model loader; see format.h.
#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <numeric>
#include <unordered_set>
#include <utility>

#include "base/check.h"
#include "gguf/format.h"
#include "gguf/gguf.h"
#include "io/mapped_file.h"

namespace mt {
namespace {

namespace gf = gguf_format;

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader copies little-endian fields as they are");

constexpr uint64_t kInt64Max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

// The fewest bytes a key/value pair takes: u64 key length (the key may not be empty, but
// the bound stays simple), u32 type and a one-byte value.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
// The fewest bytes a tensor info takes: u64 name length, u32 n_dims, one u64 dimension,
// u32 type and u64 offset.
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;

// One parsed file, with the byte offsets that later checks quote in their errors.
struct ParsedShard {
  GgufShard shard;
  std::vector<GgufTensor> tensors;
  std::vector<uint64_t> value_offsets;   // (n_kv) offset of each metadata value
  std::vector<uint64_t> tensor_offsets;  // (n_tensors) offset of each tensor info
  std::vector<uint64_t> offset_fields;   // (n_tensors) offset of each info's data offset
};

// Reads little-endian fields from a byte span. Every read checks the bytes left first.
class Cursor {
 public:
  Cursor(std::span<const uint8_t> bytes, const std::string& name)
      : base_(bytes.data()), size_(bytes.size()), name_(name) {}

  uint64_t pos() const { return pos_; }
  uint64_t size() const { return size_; }
  uint64_t left() const { return size_ - pos_; }
  const uint8_t* base() const { return base_; }

  template <typename... Args>
  Status Error(uint64_t offset, fmt::format_string<Args...> f, Args&&... args) const {
    return Corrupt("{}: offset {}: {}", name_, offset, fmt::format(f, std::forward<Args>(args)...));
  }

  Status Truncated(std::string_view what, uint64_t need) const {
    return Error(pos_, "truncated: {} needs {} bytes, {} left", what, need, left());
  }

  template <typename T>
  Status Read(T* out, std::string_view what) {
    if (left() < sizeof(T)) return Truncated(what, sizeof(T));
    std::memcpy(out, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::Ok();
  }

  // Moves past `n` bytes the caller has checked are there.
  void Skip(uint64_t n) {
    MT_CHECK(n <= left());
    pos_ += n;
  }

  // A u64 length, then that many bytes; `out` views the input, nothing is copied.
  Status ReadString(std::string_view* out, std::string_view what) {
    const uint64_t length_offset = pos_;
    uint64_t n = 0;
    if (left() < sizeof(n)) return Truncated(what, sizeof(n));
    std::memcpy(&n, base_ + pos_, sizeof(n));
    pos_ += sizeof(n);
    if (n > left()) {
      return Error(length_offset, "{} length {} exceeds the {} bytes left", what, n, left());
    }
    *out = std::string_view(reinterpret_cast<const char*>(base_ + pos_), n);
    pos_ += n;
    return Status::Ok();
  }

 private:
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& name_;
};

// Renders a string from a file for an error message: at most 80 bytes, no control bytes.
class Parser {
 public:
  Parser(std::span<const uint8_t> bytes, const std::string& name) : c_(bytes, name), name_(name) {}

  Result<ParsedShard> Run() {
    ParsedShard out;
    out.shard.path = name_;
    out.shard.file_size = c_.size();
    uint64_t n_tensors = 0, n_kv = 0;
    MT_RETURN_IF_ERROR(ReadHeader(&out.shard.version, &n_tensors, &n_kv));
    MT_RETURN_IF_ERROR(ReadMetadata(n_kv, &out));
    MT_RETURN_IF_ERROR(ReadAlignment(&out));
    MT_RETURN_IF_ERROR(ReadTensorInfos(n_tensors, &out));
    MT_RETURN_IF_ERROR(PlaceTensors(&out));
    return out;
  }

 private:
  Status ReadHeader(uint32_t* version, uint64_t* n_tensors, uint64_t* n_kv) {
    if (c_.left() < 4) return c_.Truncated("magic", 4);
    const uint8_t* m = c_.base();
    if (std::memcmp(m, gf::kMagic, 4) != 0) {
      return c_.Error(0, "bad magic {:02x} {:02x} {:02x} {:02x}, expected 'GGUF': not a GGUF file",
                      m[0], m[1], m[2], m[3]);
    }
    uint32_t magic;
    MT_RETURN_IF_ERROR(c_.Read(&magic, "magic"));

    const uint64_t version_offset = c_.pos();
    MT_RETURN_IF_ERROR(c_.Read(version, "version"));
    const uint32_t v = *version;
    if (v == 0) return c_.Error(version_offset, "bad GGUF version 0");
    // A big-endian file (gguf-py can write one) stores the version byte-swapped, so a
    // little-endian read puts it in the high half; real versions are small.
    if ((v & 0xffffu) == 0) {
      return Status(StatusCode::kUnimplemented,
                    fmt::format("{}: offset {}: big-endian GGUF (version {} byte-swapped) is not "
                                "supported; convert it to little-endian",
                                name_, version_offset, __builtin_bswap32(v)));
    }
    if (v < gf::kMinVersion || v > gf::kMaxVersion) {
      return Status(StatusCode::kUnimplemented,
                    fmt::format("{}: offset {}: GGUF version {} is not supported (only {} and {})",
                                name_, version_offset, v, gf::kMinVersion, gf::kMaxVersion));
    }

    const uint64_t n_tensors_offset = c_.pos();
    MT_RETURN_IF_ERROR(c_.Read(n_tensors, "tensor count"));
    const uint64_t n_kv_offset = c_.pos();
    MT_RETURN_IF_ERROR(c_.Read(n_kv, "metadata count"));
    // Refuse counts the rest of the file cannot hold before anything is allocated for them.
    if (*n_tensors > c_.left() / kMinTensorInfoBytes) {
      return c_.Error(n_tensors_offset, "tensor count {} is more than the {} bytes left can hold",
                      *n_tensors, c_.left());
    }
    if (*n_kv > c_.left() / kMinKvBytes) {
      return c_.Error(n_kv_offset, "metadata count {} is more than the {} bytes left can hold",
                      *n_kv, c_.left());
    }
    return Status::Ok();
  }

  Status ReadType(GgufType* out, std::string_view what) {
    const uint64_t offset = c_.pos();
    uint32_t id = 0;
    MT_RETURN_IF_ERROR(c_.Read(&id, what));
    if (id > gf::kMaxValueTypeId) return c_.Error(offset, "unknown {} {}", what, id);
    *out = static_cast<GgufType>(id);
    return Status::Ok();
  }

  template <typename T>
  Status ReadScalar(GgufValue* out, std::string_view what) {
    T v;
    MT_RETURN_IF_ERROR(c_.Read(&v, what));
    *out = GgufValue(GgufValue::Storage(std::in_place_type<T>, v));
    return Status::Ok();
  }

  // Reads one value of `type`. `depth` is the number of arrays around it.
  Status ReadValue(GgufType type, uint32_t depth, GgufValue* out) {
    switch (type) {
      case GgufType::kUint8:
        return ReadScalar<uint8_t>(out, "uint8 value");
      case GgufType::kInt8:
        return ReadScalar<int8_t>(out, "int8 value");
      case GgufType::kUint16:
        return ReadScalar<uint16_t>(out, "uint16 value");
      case GgufType::kInt16:
        return ReadScalar<int16_t>(out, "int16 value");
      case GgufType::kUint32:
        return ReadScalar<uint32_t>(out, "uint32 value");
      case GgufType::kInt32:
        return ReadScalar<int32_t>(out, "int32 value");
      case GgufType::kFloat32:
        return ReadScalar<float>(out, "float32 value");
      case GgufType::kUint64:
        return ReadScalar<uint64_t>(out, "uint64 value");
      case GgufType::kInt64:
        return ReadScalar<int64_t>(out, "int64 value");
      case GgufType::kFloat64:
        return ReadScalar<double>(out, "float64 value");
      case GgufType::kBool: {
        uint8_t b = 0;
        MT_RETURN_IF_ERROR(c_.Read(&b, "bool value"));
        *out = GgufValue::Bool(b != 0);  // like ggml: any nonzero byte is true
        return Status::Ok();
      }
      case GgufType::kString: {
        std::string_view s;
        MT_RETURN_IF_ERROR(c_.ReadString(&s, "string value"));
        *out = GgufValue(GgufValue::Storage(std::in_place_type<std::string>, s));
        return Status::Ok();
      }
      case GgufType::kArray: {
        GgufArray array;
        MT_RETURN_IF_ERROR(ReadArray(depth + 1, &array));
        *out = GgufValue(GgufValue::Storage(std::move(array)));
        return Status::Ok();
      }
    }
    return c_.Error(c_.pos(), "unknown value type {}", static_cast<uint32_t>(type));
  }

  // Reads an array's element type, length and items. `depth` counts this array (1 for an
  // array that is a metadata value itself).
  Status ReadArray(uint32_t depth, GgufArray* out) {
    const uint64_t type_offset = c_.pos();
    MT_RETURN_IF_ERROR(ReadType(&out->element_type, "array element type"));
    if (out->element_type == GgufType::kArray && depth >= gf::kMaxArrayDepth) {
      return c_.Error(type_offset, "arrays nested deeper than {} levels", gf::kMaxArrayDepth);
    }
    const uint64_t length_offset = c_.pos();
    uint64_t n = 0;
    MT_RETURN_IF_ERROR(c_.Read(&n, "array length"));
    if (n > c_.left() / gf::MinEncodedSize(out->element_type)) {
      return c_.Error(length_offset, "array of {} {} is more than the {} bytes left can hold", n,
                      GgufTypeName(out->element_type), c_.left());
    }
    out->items.reserve(n);
    // Fast paths for the big tokenizer arrays (151936 strings, scores, token types).
    switch (out->element_type) {
      case GgufType::kString:
        return ReadStringItems(n, &out->items);
      case GgufType::kFloat32:
        return ReadScalarItems<float>(n, &out->items);
      case GgufType::kInt32:
        return ReadScalarItems<int32_t>(n, &out->items);
      default:
        break;
    }
    for (uint64_t i = 0; i < n; ++i) {
      MT_RETURN_IF_ERROR(ReadValue(out->element_type, depth, &out->items.emplace_back()));
    }
    return Status::Ok();
  }

  // `n` fixed-size items; the caller checked that n * sizeof(T) bytes are left.
  template <typename T>
  Status ReadScalarItems(uint64_t n, std::vector<GgufValue>* items) {
    const uint8_t* p = c_.base() + c_.pos();
    for (uint64_t i = 0; i < n; ++i) {
      T v;
      std::memcpy(&v, p + i * sizeof(T), sizeof(T));
      items->emplace_back(GgufValue::Storage(std::in_place_type<T>, v));
    }
    c_.Skip(n * sizeof(T));
    return Status::Ok();
  }

  Status ReadStringItems(uint64_t n, std::vector<GgufValue>* items) {
    for (uint64_t i = 0; i < n; ++i) {
      std::string_view s;
      MT_RETURN_IF_ERROR(c_.ReadString(&s, "string value"));
      items->emplace_back(GgufValue::Storage(std::in_place_type<std::string>, s));
    }
    return Status::Ok();
  }

  Status ReadMetadata(uint64_t n_kv, ParsedShard* out) {
    std::unordered_set<std::string_view> keys;  // views into the input bytes
    keys.reserve(n_kv);
    out->value_offsets.reserve(n_kv);
    for (uint64_t i = 0; i < n_kv; ++i) {
      const uint64_t key_offset = c_.pos();
      std::string_view key;
      MT_RETURN_IF_ERROR(c_.ReadString(&key, "key"));
      if (key.empty()) return c_.Error(key_offset, "empty key (metadata entry {})", i);
      if (!keys.insert(key).second) {
        return c_.Error(key_offset, "duplicate key '{}'", Printable(key));
      }
      GgufType type;
      MT_RETURN_IF_ERROR(ReadType(&type, "value type"));
      out->value_offsets.push_back(c_.pos());
      GgufValue value;
      MT_RETURN_IF_ERROR(ReadValue(type, 0, &value));
      out->shard.metadata.AppendNew(std::string(key), std::move(value));
    }
    return Status::Ok();
  }

  Status ReadAlignment(ParsedShard* out) {
    const auto& entries = out->shard.metadata.entries();
    for (size_t i = 0; i < entries.size(); ++i) {
      if (entries[i].key != gf::kKeyAlignment) continue;
      const uint64_t offset = out->value_offsets[i];
      const GgufValue& v = entries[i].value;
      if (v.type() != GgufType::kUint32) {
        return c_.Error(offset, "{} must be uint32, not {}", gf::kKeyAlignment,
                        GgufTypeName(v.type()));
      }
      const uint32_t alignment = std::get<uint32_t>(v.storage());
      if (!gf::IsPowerOfTwo(alignment)) {
        return c_.Error(offset, "{} {} is not a nonzero power of two", gf::kKeyAlignment,
                        alignment);
      }
      out->shard.alignment = alignment;
    }
    return Status::Ok();
  }

  Status ReadTensorInfos(uint64_t n_tensors, ParsedShard* out) {
    std::unordered_set<std::string_view> names;  // views into the input bytes
    names.reserve(n_tensors);
    out->tensors.reserve(n_tensors);
    out->tensor_offsets.reserve(n_tensors);
    out->offset_fields.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) {
      const uint64_t info_offset = c_.pos();
      std::string_view name;
      MT_RETURN_IF_ERROR(c_.ReadString(&name, "tensor name"));
      if (!names.insert(name).second) {
        return c_.Error(info_offset, "duplicate tensor name '{}'", Printable(name));
      }
      GgufTensor t;
      t.name = std::string(name);
      MT_RETURN_IF_ERROR(ReadShape(&t));
      MT_RETURN_IF_ERROR(ReadTensorType(&t));
      out->offset_fields.push_back(c_.pos());
      MT_RETURN_IF_ERROR(c_.Read(&t.file_offset, "tensor offset"));  // relative until placed
      out->tensors.push_back(std::move(t));
      out->tensor_offsets.push_back(info_offset);
    }
    return Status::Ok();
  }

  Status ReadShape(GgufTensor* t) {
    const uint64_t n_dims_offset = c_.pos();
    uint32_t n_dims = 0;
    MT_RETURN_IF_ERROR(c_.Read(&n_dims, "n_dims"));
    if (n_dims == 0 || n_dims > gf::kMaxDims) {
      return c_.Error(n_dims_offset, "tensor '{}': n_dims {} is not in 1..{}", Printable(t->name),
                      n_dims, gf::kMaxDims);
    }
    t->shape.resize(n_dims);
    uint64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim_offset = c_.pos();
      MT_RETURN_IF_ERROR(c_.Read(&t->shape[d], "tensor dimension"));
      const uint64_t ne = t->shape[d];
      if (ne == 0) {
        return c_.Error(dim_offset, "tensor '{}': dimension {} is 0", Printable(t->name), d);
      }
      // ggml keeps element counts in int64_t.
      if (__builtin_mul_overflow(n_elements, ne, &n_elements) || n_elements > kInt64Max) {
        return c_.Error(dim_offset, "tensor '{}': element count overflows at dimension {} ({})",
                        Printable(t->name), d, ne);
      }
    }
    t->n_elements = n_elements;
    return Status::Ok();
  }

  Status ReadTensorType(GgufTensor* t) {
    const uint64_t type_offset = c_.pos();
    uint32_t id = 0;
    MT_RETURN_IF_ERROR(c_.Read(&id, "tensor type"));
    const std::optional<GgmlTypeTraits> traits = TraitsOfTypeId(id);
    if (!traits) {
      return c_.Error(type_offset, "tensor '{}': unknown or removed tensor type {}",
                      Printable(t->name), id);
    }
    if (t->shape[0] % traits->block_size != 0) {
      return c_.Error(type_offset,
                      "tensor '{}': row length {} is not a multiple of the block size {} of {}",
                      Printable(t->name), t->shape[0], traits->block_size, traits->name);
    }
    t->type = static_cast<GgmlType>(id);
    if (__builtin_mul_overflow(t->n_elements / traits->block_size, uint64_t{traits->type_size},
                               &t->n_bytes)) {
      return c_.Error(type_offset, "tensor '{}': size in bytes overflows", Printable(t->name));
    }
    return Status::Ok();
  }

  // Finds the data section and checks every tensor lies inside the file, aligned and
  // without overlapping another.
  Status PlaceTensors(ParsedShard* out) {
    GgufShard& shard = out->shard;
    const uint64_t end_of_infos = c_.pos();
    const uint64_t aligned = gf::AlignUp(end_of_infos, shard.alignment);
    if (aligned > c_.size()) {
      if (!out->tensors.empty()) {
        return c_.Error(end_of_infos,
                        "truncated: the data section would start at {} (aligned to {}), past the "
                        "end of the file ({} bytes)",
                        aligned, shard.alignment, c_.size());
      }
      shard.data_offset = end_of_infos;  // no data; ggml accepts a file without the padding
    } else {
      shard.data_offset = aligned;
    }
    const uint64_t data_bytes = c_.size() - shard.data_offset;
    for (size_t i = 0; i < out->tensors.size(); ++i) {
      GgufTensor& t = out->tensors[i];
      const uint64_t offset_field = out->offset_fields[i];
      const uint64_t rel = t.file_offset;
      if (rel % shard.alignment != 0) {
        return c_.Error(offset_field,
                        "tensor '{}': offset {} is not a multiple of the alignment {}",
                        Printable(t.name), rel, shard.alignment);
      }
      if (rel > data_bytes || t.n_bytes > data_bytes - rel) {
        return c_.Error(offset_field,
                        "truncated: tensor '{}' ({} bytes at offset {} of the data section at {}) "
                        "extends past the end of the file ({} bytes)",
                        Printable(t.name), t.n_bytes, rel, shard.data_offset, c_.size());
      }
      t.file_offset = shard.data_offset + rel;
      t.data = c_.base() + t.file_offset;
    }
    std::vector<size_t> order(out->tensors.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      const uint64_t oa = out->tensors[a].file_offset, ob = out->tensors[b].file_offset;
      return oa != ob ? oa < ob : a < b;  // ties in file order, so errors are deterministic
    });
    for (size_t k = 1; k < order.size(); ++k) {
      const GgufTensor& prev = out->tensors[order[k - 1]];
      const GgufTensor& next = out->tensors[order[k]];
      if (prev.file_offset + prev.n_bytes > next.file_offset) {
        return c_.Error(out->tensor_offsets[order[k]], "tensor '{}' overlaps tensor '{}'",
                        Printable(next.name), Printable(prev.name));
      }
    }
    return Status::Ok();
  }

  Cursor c_;
  const std::string& name_;
};

// An integer split key of `s`: nullopt when absent, an error when it is not an integer in
// [0, max]. ggml writes split.no and split.count as u16 and split.tensors.count as i32;
// any integer type is accepted.
Status FindSplitKey(const ParsedShard& s, std::string_view key, uint64_t max,
                    std::optional<uint64_t>* value, uint64_t* offset) {
  *value = std::nullopt;
  const auto& entries = s.shard.metadata.entries();
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].key != key) continue;
    *offset = s.value_offsets[i];
    const std::optional<uint64_t> v = entries[i].value.AsUint();
    if (!v || *v > max) {
      return Corrupt("{}: offset {}: {} must be an integer in 0..{}, not {} {}", s.shard.path,
                     *offset, key, max, GgufTypeName(entries[i].value.type()),
                     entries[i].value.ToShortString());
    }
    *value = v;
  }
  return Status::Ok();
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

Result<ParsedShard> MapAndParse(const std::string& path, std::unique_ptr<MappedFile>* map) {
  MappedFile mapped = MT_TRY(MappedFile::Open(path));
  *map = std::make_unique<MappedFile>(std::move(mapped));
  return Parser(std::span<const uint8_t>((*map)->data(), (*map)->size()), path).Run();
}

// The "-%05d-of-%05d.gguf" tail of shard `split_no` (from 1) of `count`.
std::string SplitSuffix(uint64_t split_no, uint64_t count) {
  return fmt::format("-{:05}-of-{:05}.gguf", split_no, count);
}

}  // namespace

std::string SplitPath(std::string_view prefix, uint32_t split_no, uint32_t split_count) {
  return fmt::format("{}{}", prefix, SplitSuffix(split_no, split_count));
}

GgufModel::GgufModel() = default;
GgufModel::GgufModel(GgufModel&&) noexcept = default;
GgufModel& GgufModel::operator=(GgufModel&&) noexcept = default;
GgufModel::~GgufModel() = default;

const GgufTensor* GgufModel::FindTensor(std::string_view name) const {
  for (const GgufTensor& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

uint64_t GgufModel::total_file_bytes() const {
  uint64_t total = 0;
  for (const GgufShard& s : shards_) total += s.file_size;
  return total;
}

void GgufModel::ReleasePages(const uint8_t* data, uint64_t bytes) const {
  for (const std::unique_ptr<MappedFile>& map : maps_) {
    if (map->Holds(data, bytes)) return map->Release(data, bytes);
  }
}

Result<GgufModel> GgufModel::Parse(std::span<const uint8_t> bytes, const std::string& name) {
  ParsedShard parsed = MT_TRY(Parser(bytes, name).Run());
  GgufModel model;
  model.shards_.push_back(std::move(parsed.shard));
  model.tensors_ = std::move(parsed.tensors);
  return model;
}

Result<GgufModel> GgufModel::Open(const std::string& path) {
  GgufModel model;
  std::unique_ptr<MappedFile> map;
  ParsedShard first = MT_TRY(MapAndParse(path, &map));
  model.maps_.push_back(std::move(map));

  std::optional<uint64_t> count, split_no, total_tensors;
  uint64_t count_offset = 0, no_offset = 0, total_offset = 0;
  MT_RETURN_IF_ERROR(
      FindSplitKey(first, gf::kKeySplitCount, gf::kMaxSplitCount, &count, &count_offset));
  // Like llama.cpp, split.count 0 or 1 (or none) is a single file.
  if (!count || *count <= 1) {
    model.shards_.push_back(std::move(first.shard));
    model.tensors_ = std::move(first.tensors);
    return model;
  }
  const uint64_t n_split = *count;
  MT_RETURN_IF_ERROR(
      FindSplitKey(first, gf::kKeySplitNo, gf::kMaxSplitCount, &split_no, &no_offset));
  if (!split_no) {
    return Corrupt("{}: offset {}: split.count is {} but split.no is missing", path, count_offset,
                   n_split);
  }
  if (*split_no != 0) {
    // Like llama.cpp, a set is opened from its first shard only; say which file that is.
    const std::string suffix = SplitSuffix(*split_no + 1, n_split);
    std::string hint = "its first shard";
    if (path.size() > suffix.size() && path.ends_with(suffix)) {
      hint = SplitPath(std::string_view(path).substr(0, path.size() - suffix.size()), 1,
                       static_cast<uint32_t>(n_split));
    }
    return InvalidArgument("{}: shard {} of a {}-shard split set; open {} instead", path,
                           *split_no + 1, n_split, hint);
  }
  const std::string first_suffix = SplitSuffix(1, n_split);
  if (path.size() <= first_suffix.size() || !path.ends_with(first_suffix)) {
    return InvalidArgument(
        "{}: first shard of a {}-shard split set, but its name does not end in {}, so the other "
        "shards cannot be found",
        path, n_split, first_suffix);
  }
  const std::string prefix = path.substr(0, path.size() - first_suffix.size());
  MT_RETURN_IF_ERROR(FindSplitKey(first, gf::kKeySplitTensorsCount,
                                  std::numeric_limits<int32_t>::max(), &total_tensors,
                                  &total_offset));
  if (!total_tensors) {
    return Corrupt("{}: offset {}: split.count is {} but split.tensors.count is missing", path,
                   count_offset, n_split);
  }

  std::unordered_set<std::string> names;
  for (const GgufTensor& t : first.tensors) names.insert(t.name);
  model.shards_.push_back(std::move(first.shard));
  model.tensors_ = std::move(first.tensors);

  for (uint64_t k = 1; k < n_split; ++k) {
    const std::string shard_path =
        SplitPath(prefix, static_cast<uint32_t>(k + 1), static_cast<uint32_t>(n_split));
    if (!FileExists(shard_path)) {
      return NotFound("{}: missing shard {} of {} of the split set opened from {}", shard_path,
                      k + 1, n_split, path);
    }
    ParsedShard shard = MT_TRY(MapAndParse(shard_path, &map));
    model.maps_.push_back(std::move(map));

    std::optional<uint64_t> v;
    uint64_t offset = 0;
    MT_RETURN_IF_ERROR(FindSplitKey(shard, gf::kKeySplitCount, gf::kMaxSplitCount, &v, &offset));
    if (!v) {
      return Corrupt("{}: not a shard of a split set (no split.count); expected shard {} of {}",
                     shard_path, k + 1, n_split);
    }
    if (*v != n_split) {
      return Corrupt("{}: offset {}: split.count is {} but the first shard {} says {}", shard_path,
                     offset, *v, path, n_split);
    }
    MT_RETURN_IF_ERROR(FindSplitKey(shard, gf::kKeySplitNo, gf::kMaxSplitCount, &v, &offset));
    if (!v) return Corrupt("{}: split.no is missing; expected {}", shard_path, k);
    if (*v != k) {
      return Corrupt("{}: offset {}: split.no is {}, expected {} (shard {} of {})", shard_path,
                     offset, *v, k, k + 1, n_split);
    }
    MT_RETURN_IF_ERROR(FindSplitKey(shard, gf::kKeySplitTensorsCount,
                                    std::numeric_limits<int32_t>::max(), &v, &offset));
    if (v && *v != *total_tensors) {
      return Corrupt("{}: offset {}: split.tensors.count is {} but the first shard {} says {}",
                     shard_path, offset, *v, path, *total_tensors);
    }
    for (size_t i = 0; i < shard.tensors.size(); ++i) {
      GgufTensor& t = shard.tensors[i];
      if (!names.insert(t.name).second) {
        return Corrupt("{}: offset {}: tensor '{}' is also in an earlier shard of the set",
                       shard_path, shard.tensor_offsets[i], Printable(t.name));
      }
      t.shard = static_cast<uint32_t>(k);
      model.tensors_.push_back(std::move(t));
    }
    model.shards_.push_back(std::move(shard.shard));
  }

  if (model.tensors_.size() != *total_tensors) {
    return Corrupt("{}: offset {}: split.tensors.count is {} but the {} shards hold {} tensors",
                   path, total_offset, *total_tensors, n_split, model.tensors_.size());
  }
  const std::string extra =
      SplitPath(prefix, static_cast<uint32_t>(n_split + 1), static_cast<uint32_t>(n_split));
  if (FileExists(extra)) {
    return Corrupt("{}: extra shard beside a {}-shard split set opened from {}", extra, n_split,
                   path);
  }
  return model;
}

}  // namespace mt
