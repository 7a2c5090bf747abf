// GGUF model files (versions 2 and 3): metadata, tensor table, split shards.
//
// Layout (little-endian): magic "GGUF", u32 version, u64 n_tensors, u64 n_kv, then n_kv
// key/value pairs, then n_tensors tensor infos {name, u32 n_dims, u64 ne[n_dims], u32 type,
// u64 offset}, then padding to `general.alignment` (default 32), then the data section.
// A tensor's offset is relative to the data section and must be a multiple of the
// alignment. Split sets are NAME-00001-of-0000N.gguf; each shard carries split.no,
// split.count and split.tensors.count, and only the first carries the model's metadata.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/status.h"
#include "quant/ggml_type.h"

namespace mt {

inline constexpr uint32_t kGgufDefaultAlignment = 32;

// The on-disk value type ids of GGUF metadata.
enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

std::string_view GgufTypeName(GgufType type);

class GgufValue;

// A homogeneous array; elements may themselves be arrays (nested arrays).
struct GgufArray {
  GgufType element_type = GgufType::kUint8;
  std::vector<GgufValue> items;
};

// One metadata value of any GGUF type. Copyable; arrays own their items.
class GgufValue {
 public:
  using Storage = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                               std::string, GgufArray, uint64_t, int64_t, double>;

  GgufValue() : v_(uint8_t{0}) {}
  GgufValue(Storage v) : v_(std::move(v)) {}  // NOLINT: implicit by design

  static GgufValue Uint32(uint32_t v) { return GgufValue(Storage(v)); }
  static GgufValue Int32(int32_t v) { return GgufValue(Storage(v)); }
  static GgufValue Uint64(uint64_t v) { return GgufValue(Storage(v)); }
  static GgufValue Float32(float v) { return GgufValue(Storage(v)); }
  static GgufValue Bool(bool v) { return GgufValue(Storage(v)); }
  static GgufValue String(std::string v) { return GgufValue(Storage(std::move(v))); }
  static GgufValue Array(GgufType element_type, std::vector<GgufValue> items);
  static GgufValue StringArray(const std::vector<std::string>& items);
  static GgufValue Float32Array(const std::vector<float>& items);
  static GgufValue Int32Array(const std::vector<int32_t>& items);

  GgufType type() const;
  const Storage& storage() const { return v_; }

  // Any integer type whose value fits; nullopt for other types or a negative value.
  std::optional<uint64_t> AsUint() const;
  // Any integer type whose value fits in int64.
  std::optional<int64_t> AsInt() const;
  // float32 or float64 (widened), or any integer type (converted).
  std::optional<double> AsDouble() const;
  std::optional<bool> AsBool() const;
  const std::string* AsString() const;
  const GgufArray* AsArray() const;

  // A short human rendering: numbers, quoted strings, "[array of 151936 string]".
  std::string ToShortString() const;

 private:
  Storage v_;
};

// Ordered key -> value map; keys are unique. Lookups are by exact key.
class GgufMetadata {
 public:
  struct Entry {
    std::string key;
    GgufValue value;
  };

  const std::vector<Entry>& entries() const { return entries_; }
  const GgufValue* Find(std::string_view key) const;
  bool Contains(std::string_view key) const { return Find(key) != nullptr; }

  // Sets or replaces `key`, keeping the position of an existing key.
  void Set(std::string key, GgufValue value);
  // Removes `key` if present.
  void Erase(std::string_view key);
  // Appends `key` without searching (O(1), unlike Set). The caller guarantees `key` is not
  // present yet; parsers use it after their own duplicate check.
  void AppendNew(std::string key, GgufValue value) {
    entries_.push_back({std::move(key), std::move(value)});
  }

  // Typed lookups for model loading: nullopt if missing or of an incompatible type.
  std::optional<uint64_t> FindUint(std::string_view key) const;
  std::optional<double> FindDouble(std::string_view key) const;
  std::optional<bool> FindBool(std::string_view key) const;
  const std::string* FindString(std::string_view key) const;
  const GgufArray* FindArray(std::string_view key) const;

 private:
  std::vector<Entry> entries_;
};

// One tensor of a (possibly split) model. `data` points into a shard's read-only mapping
// and stays valid as long as the GgufModel lives.
struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<uint64_t> shape;  // ggml order: shape[0] is the row length (ne0)
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;      // bytes of data, from type and shape
  uint32_t shard = 0;        // index of the file that holds the data
  uint64_t file_offset = 0;  // absolute byte offset of the data in that file
  const uint8_t* data = nullptr;

  uint64_t rows() const { return shape.empty() ? 0 : n_elements / shape[0]; }
};

// One opened file of a set, memory-mapped read-only.
struct GgufShard {
  std::string path;
  uint32_t version = 0;
  uint64_t file_size = 0;
  uint32_t alignment = kGgufDefaultAlignment;
  uint64_t data_offset = 0;  // absolute offset of the data section
  GgufMetadata metadata;     // this shard's own keys (split.* on later shards)
};

class MappedFile;

// A GGUF model: one file or a whole split set. Immutable after Open; thread-safe to read.
class GgufModel {
 public:
  // Opens `path`. If it is the first shard of a split set (split.count > 1), opens every
  // shard NAME-0000K-of-0000N.gguf beside it. Every error is one line naming the file and,
  // for format errors, the byte offset: bad magic or version, truncation, duplicate keys or
  // tensor names, unknown value or tensor types, absurd counts or lengths, a misaligned
  // data offset, a tensor past the end of its file, a missing, extra or mismatched shard.
  // Like llama.cpp, a set opens from its first shard only: a later shard is refused with an
  // error naming the first. split.count 0 or 1 is a single file.
  static Result<GgufModel> Open(const std::string& path);

  // Parses one GGUF image already in memory (no split handling). `name` is used in
  // errors. The returned model points into `bytes`, which must outlive it. For tests/fuzz.
  static Result<GgufModel> Parse(std::span<const uint8_t> bytes, const std::string& name);

  GgufModel(GgufModel&&) noexcept;
  GgufModel& operator=(GgufModel&&) noexcept;
  ~GgufModel();

  uint32_t version() const { return shards_.front().version; }
  // The model's metadata: the first shard's keys.
  const GgufMetadata& metadata() const { return shards_.front().metadata; }
  const std::vector<GgufShard>& shards() const { return shards_; }
  // All tensors of the set in file order (shard 0 first).
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* FindTensor(std::string_view name) const;
  uint64_t total_file_bytes() const;
  // Hands the pages of [data, data + bytes) back to the kernel (MappedFile::Release) when the
  // range lies inside one shard's mapping; anything else (a host copy, a Parse'd image) is left
  // alone. For bytes a device has taken: the host keeps no copy of them, not even in its RSS.
  void ReleasePages(const uint8_t* data, uint64_t bytes) const;

 private:
  GgufModel();
  std::vector<GgufShard> shards_;
  std::vector<GgufTensor> tensors_;
  std::vector<std::unique_ptr<MappedFile>> maps_;  // one per shard, empty after Parse
};

// Writer options. A split set is written when split_max_bytes > 0 or split_max_tensors > 0.
struct GgufWriterOptions {
  uint32_t alignment = kGgufDefaultAlignment;
  uint64_t split_max_bytes = 0;    // a new shard starts before a tensor that would pass this
  uint64_t split_max_tensors = 0;  // at most this many tensors per shard
};

// Streams a GGUF file (or split set) to disk with bounded memory.
//
// Usage: set metadata, declare every tensor with AddTensor (this fixes order, offsets and
// shards), call Begin, then Write the tensors' bytes in declaration order, in chunks of
// any size, then Finish. Files are written as "<final>.tmp" and renamed only by Finish
// after fsync, so an error, a crash or a destructor without Finish never leaves a partial
// file at the final path. The writer owns the split.* keys (written on every shard of a set,
// dropped from a single file) and writes general.alignment when it is not 32 (a value already
// in metadata() must agree). Not thread-safe.
class GgufWriter {
 public:
  // `path` is the final path. For a split set it must end in ".gguf"; shards are named
  // PREFIX-00001-of-0000N.gguf where PREFIX is `path` without ".gguf".
  GgufWriter(std::string path, GgufWriterOptions options = {});
  ~GgufWriter();  // removes temp files unless Finish succeeded
  GgufWriter(const GgufWriter&) = delete;
  GgufWriter& operator=(const GgufWriter&) = delete;

  GgufMetadata& metadata() { return metadata_; }

  // Declares the next tensor. Fails on a duplicate name, a name that is empty or longer than
  // llama.cpp's 63 bytes, an empty or oversized shape, a zero dimension, or a row length that
  // is not a multiple of the type's block size. With `keep_with_previous`, a split set never
  // starts a new shard before this tensor: it lands in the same shard as the one declared
  // before it (a group that alone passes split_max_bytes gets a shard to itself, as an
  // oversized single tensor does).
  Status AddTensor(std::string name, GgmlType type, std::vector<uint64_t> shape,
                   bool keep_with_previous = false);

  // Creates the temporary file(s) and writes headers. No AddTensor after this.
  Status Begin();

  // Appends tensor data in declaration order. Fails if more bytes are written than
  // declared.
  Status Write(std::span<const uint8_t> bytes);

  // Checks every declared byte was written, pads, fsyncs and renames into place.
  Status Finish();

  // The final paths (one, or one per shard), known after Begin.
  const std::vector<std::string>& output_paths() const { return output_paths_; }

 private:
  struct Impl;
  std::string path_;
  GgufWriterOptions options_;
  GgufMetadata metadata_;
  std::vector<std::string> output_paths_;
  std::unique_ptr<Impl> impl_;
};

// Returns the shard path llama.cpp's gguf-split uses: "<prefix>-%05d-of-%05d.gguf", with
// split_no counted from 1.
std::string SplitPath(std::string_view prefix, uint32_t split_no, uint32_t split_count);

}  // namespace mt
