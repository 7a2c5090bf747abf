// GGUF writer: headers are built in memory (they are small), tensor data is streamed through
// a bounded buffer into "<final>.tmp" files that Finish fsyncs and renames into place.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "gguf/format.h"
#include "gguf/gguf.h"

namespace mt {
namespace {

namespace gf = gguf_format;

static_assert(std::endian::native == std::endian::little,
              "the GGUF writer stores fields in host order");

constexpr size_t kBufferBytes = size_t{4} << 20;  // write buffer; larger chunks bypass it
constexpr size_t kMaxTensorName = 63;  // llama.cpp refuses names of GGML_MAX_NAME (64) or more

// Appends little-endian fields to a byte vector.
class ByteWriter {
 public:
  template <typename T>
  void Put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
  }
  void PutString(std::string_view s) {
    Put<uint64_t>(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

// Writes `n` bytes fully, retrying short writes and EINTR.
Status WriteAll(int fd, const uint8_t* p, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return IoError("{}: cannot write: {}", path, std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

}  // namespace

struct GgufWriter::Impl {
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<uint64_t> shape;  // ggml order, ne0 first
    uint64_t n_bytes = 0;
    uint32_t shard = 0;
    uint64_t offset = 0;              // relative to its shard's data section
    bool keep_with_previous = false;  // never the first tensor of a shard
  };
  struct Shard {
    std::string final_path;
    std::string temp_path;
    int fd = -1;
    uint64_t expected_size = 0;  // header, padding and padded tensors
  };
  enum class State { kDeclaring, kWriting, kFinished, kFailed };

  State state = State::kDeclaring;
  std::vector<Tensor> tensors;
  std::unordered_set<std::string> names;
  std::vector<Shard> shards;
  size_t current = 0;           // index of the tensor Write fills next
  uint64_t current_done = 0;    // bytes of tensors[current] written so far
  std::vector<uint8_t> buffer;  // (<= kBufferBytes) pending bytes of shards[buffer_shard]
  size_t buffer_shard = 0;

  ~Impl() {
    if (state != State::kFinished) RemoveTemps();
  }

  void RemoveTemps() {
    for (Shard& s : shards) {
      if (s.fd >= 0) ::close(s.fd);
      s.fd = -1;
      if (!s.temp_path.empty()) ::unlink(s.temp_path.c_str());
    }
  }

  // Marks the writer failed, removes its temp files and returns `s`.
  Status Fail(Status s) {
    state = State::kFailed;
    buffer.clear();
    RemoveTemps();
    return s;
  }

  Status Flush() {
    if (buffer.empty()) return Status::Ok();
    const Shard& s = shards[buffer_shard];
    Status st = WriteAll(s.fd, buffer.data(), buffer.size(), s.temp_path);
    buffer.clear();
    return st;
  }

  Status Append(size_t shard, const uint8_t* p, size_t n) {
    if (shard != buffer_shard) {
      MT_RETURN_IF_ERROR(Flush());
      buffer_shard = shard;
    }
    if (buffer.size() + n > kBufferBytes) {
      MT_RETURN_IF_ERROR(Flush());
      if (n >= kBufferBytes) return WriteAll(shards[shard].fd, p, n, shards[shard].temp_path);
    }
    buffer.insert(buffer.end(), p, p + n);
    return Status::Ok();
  }

  Status AppendZeros(size_t shard, uint64_t n) {
    static constexpr uint8_t kZeros[4096] = {};
    while (n > 0) {
      const size_t k = static_cast<size_t>(std::min<uint64_t>(n, sizeof(kZeros)));
      MT_RETURN_IF_ERROR(Append(shard, kZeros, k));
      n -= k;
    }
    return Status::Ok();
  }
};

GgufWriter::GgufWriter(std::string path, GgufWriterOptions options)
    : path_(std::move(path)), options_(options), impl_(std::make_unique<Impl>()) {}

GgufWriter::~GgufWriter() = default;

Status GgufWriter::AddTensor(std::string name, GgmlType type, std::vector<uint64_t> shape,
                             bool keep_with_previous) {
  Impl& im = *impl_;
  if (im.state != Impl::State::kDeclaring) {
    return InvalidArgument("{}: tensor '{}' declared after Begin", path_, name);
  }
  if (name.empty() || name.size() > kMaxTensorName) {
    return InvalidArgument("{}: tensor name '{}' must have 1..{} bytes", path_, name,
                           kMaxTensorName);
  }
  if (im.names.count(name)) return InvalidArgument("{}: duplicate tensor '{}'", path_, name);
  const std::optional<GgmlTypeTraits> traits = TraitsOfTypeId(static_cast<uint32_t>(type));
  if (!traits) {
    return InvalidArgument("{}: tensor '{}': unknown type {}", path_, name,
                           static_cast<uint32_t>(type));
  }
  if (shape.empty() || shape.size() > gf::kMaxDims) {
    return InvalidArgument("{}: tensor '{}': {} dimensions, expected 1..{}", path_, name,
                           shape.size(), gf::kMaxDims);
  }
  uint64_t n_elements = 1;
  for (uint64_t ne : shape) {
    if (ne == 0) return InvalidArgument("{}: tensor '{}': a dimension is 0", path_, name);
    if (__builtin_mul_overflow(n_elements, ne, &n_elements) ||
        n_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return InvalidArgument("{}: tensor '{}': element count overflows", path_, name);
    }
  }
  if (shape[0] % traits->block_size != 0) {
    return InvalidArgument("{}: tensor '{}': row length {} is not a multiple of {}'s block size {}",
                           path_, name, shape[0], traits->name, traits->block_size);
  }
  Impl::Tensor t;
  if (__builtin_mul_overflow(n_elements / traits->block_size, uint64_t{traits->type_size},
                             &t.n_bytes) ||
      t.n_bytes > (uint64_t{1} << 62)) {
    return InvalidArgument("{}: tensor '{}': size in bytes overflows", path_, name);
  }
  im.names.insert(name);
  t.keep_with_previous = keep_with_previous && !im.tensors.empty();
  t.name = std::move(name);
  t.type = type;
  t.shape = std::move(shape);
  im.tensors.push_back(std::move(t));
  return Status::Ok();
}

namespace {

// Appends the payload of `v` (no type id): scalars, strings, arrays of any depth.
Status EncodeValue(const GgufValue& v, uint32_t depth, std::string_view key,
                   const std::string& path, ByteWriter* w) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) {
          w->PutString(x);
        } else if constexpr (std::is_same_v<T, bool>) {
          w->Put<uint8_t>(x ? 1 : 0);
        } else if constexpr (!std::is_same_v<T, GgufArray>) {
          w->Put<T>(x);
        }
      },
      v.storage());
  const GgufArray* a = v.AsArray();
  if (a == nullptr) return Status::Ok();
  const uint32_t array_depth = depth + 1;
  if (static_cast<uint32_t>(a->element_type) > gf::kMaxValueTypeId) {
    return InvalidArgument("{}: key '{}': array element type {} is not a GGUF type", path, key,
                           static_cast<uint32_t>(a->element_type));
  }
  if (a->element_type == GgufType::kArray && array_depth >= gf::kMaxArrayDepth) {
    return InvalidArgument("{}: key '{}': arrays nested deeper than {} levels", path, key,
                           gf::kMaxArrayDepth);
  }
  w->Put<uint32_t>(static_cast<uint32_t>(a->element_type));
  w->Put<uint64_t>(a->items.size());
  for (const GgufValue& item : a->items) {
    if (item.type() != a->element_type) {
      return InvalidArgument("{}: key '{}': array of {} holds a {} item", path, key,
                             GgufTypeName(a->element_type), GgufTypeName(item.type()));
    }
    MT_RETURN_IF_ERROR(EncodeValue(item, array_depth, key, path, w));
  }
  return Status::Ok();
}

bool IsSplitKey(std::string_view key) {
  return key == gf::kKeySplitNo || key == gf::kKeySplitCount || key == gf::kKeySplitTensorsCount;
}

}  // namespace

Status GgufWriter::Begin() {
  Impl& im = *impl_;
  if (im.state != Impl::State::kDeclaring) {
    return InvalidArgument("{}: Begin called twice or after a failure", path_);
  }
  const uint32_t alignment = options_.alignment;
  if (!gf::IsPowerOfTwo(alignment)) {
    return im.Fail(
        InvalidArgument("{}: alignment {} is not a nonzero power of two", path_, alignment));
  }
  if (const GgufValue* a = metadata_.Find(gf::kKeyAlignment)) {
    if (a->type() != GgufType::kUint32 || std::get<uint32_t>(a->storage()) != alignment) {
      return im.Fail(InvalidArgument("{}: metadata {} is {} but the writer aligns to {}", path_,
                                     gf::kKeyAlignment, a->ToShortString(), alignment));
    }
  }

  // Assign tensors to shards the way gguf-split does: by padded data bytes or by count. A
  // group (a tensor and those kept with it) is placed as one.
  const bool split = options_.split_max_bytes > 0 || options_.split_max_tensors > 0;
  uint32_t n_shards = 1;
  {
    uint64_t shard_bytes = 0, shard_tensors = 0;
    for (size_t i = 0; i < im.tensors.size(); ++i) {
      Impl::Tensor& t = im.tensors[i];
      uint64_t group_bytes = 0, group_tensors = 0;
      for (size_t j = i; !t.keep_with_previous && j < im.tensors.size() &&
                         (j == i || im.tensors[j].keep_with_previous);
           ++j) {
        group_bytes += gf::AlignUp(im.tensors[j].n_bytes, alignment);
        ++group_tensors;
      }
      const bool full =
          !t.keep_with_previous && shard_tensors > 0 &&
          ((options_.split_max_tensors > 0 &&
            shard_tensors + group_tensors > options_.split_max_tensors) ||
           (options_.split_max_bytes > 0 && shard_bytes + group_bytes > options_.split_max_bytes));
      const uint64_t padded = gf::AlignUp(t.n_bytes, alignment);
      if (split && full) {
        ++n_shards;
        shard_bytes = shard_tensors = 0;
        if (n_shards > gf::kMaxSplitCount) {
          return im.Fail(
              InvalidArgument("{}: more than {} shards needed", path_, gf::kMaxSplitCount));
        }
      }
      t.shard = n_shards - 1;
      t.offset = shard_bytes;
      shard_bytes += padded;
      ++shard_tensors;
    }
  }
  if (split && im.tensors.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return im.Fail(InvalidArgument("{}: too many tensors for split.tensors.count", path_));
  }

  output_paths_.clear();
  if (split) {
    constexpr std::string_view kExt = ".gguf";
    if (path_.size() <= kExt.size() || !path_.ends_with(kExt)) {
      return im.Fail(InvalidArgument("{}: a split set's path must end in .gguf", path_));
    }
    const std::string_view prefix = std::string_view(path_).substr(0, path_.size() - kExt.size());
    for (uint32_t k = 0; k < n_shards; ++k) {
      output_paths_.push_back(SplitPath(prefix, k + 1, n_shards));
    }
  } else {
    output_paths_.push_back(path_);
  }

  im.shards.resize(n_shards);
  for (uint32_t k = 0; k < n_shards; ++k) {
    Impl::Shard& s = im.shards[k];
    s.final_path = output_paths_[k];
    s.temp_path = s.final_path + ".tmp";

    // The keys of this shard: the model's metadata on the first, split keys on every shard
    // of a split set, and the alignment wherever it is not the default.
    std::vector<GgufMetadata::Entry> extra;
    std::vector<const GgufMetadata::Entry*> entries;
    if (k == 0) {
      for (const GgufMetadata::Entry& e : metadata_.entries()) {
        if (!IsSplitKey(e.key)) entries.push_back(&e);
      }
    }
    if ((k > 0 || !metadata_.Contains(gf::kKeyAlignment)) && alignment != kGgufDefaultAlignment) {
      extra.push_back({std::string(gf::kKeyAlignment), GgufValue::Uint32(alignment)});
    }
    if (split) {
      // gguf-split's order (it sets split.count last), so a set can match its output byte
      // for byte.
      extra.push_back({std::string(gf::kKeySplitNo), GgufValue::Storage(uint16_t(k))});
      extra.push_back({std::string(gf::kKeySplitTensorsCount),
                       GgufValue::Int32(static_cast<int32_t>(im.tensors.size()))});
      extra.push_back({std::string(gf::kKeySplitCount), GgufValue::Storage(uint16_t(n_shards))});
    }
    for (const GgufMetadata::Entry& e : extra) entries.push_back(&e);

    uint64_t n_tensors = 0, data_bytes = 0;
    for (const Impl::Tensor& t : im.tensors) {
      if (t.shard != k) continue;
      ++n_tensors;
      data_bytes = t.offset + gf::AlignUp(t.n_bytes, alignment);
    }

    ByteWriter w;
    w.bytes().insert(w.bytes().end(), std::begin(gf::kMagic), std::end(gf::kMagic));
    w.Put<uint32_t>(gf::kVersionWritten);
    w.Put<uint64_t>(n_tensors);
    w.Put<uint64_t>(entries.size());
    for (const GgufMetadata::Entry* e : entries) {
      if (e->key.empty()) return im.Fail(InvalidArgument("{}: empty metadata key", path_));
      w.PutString(e->key);
      w.Put<uint32_t>(static_cast<uint32_t>(e->value.type()));
      Status st = EncodeValue(e->value, 0, e->key, path_, &w);
      if (!st.ok()) return im.Fail(st);
    }
    for (const Impl::Tensor& t : im.tensors) {
      if (t.shard != k) continue;
      w.PutString(t.name);
      w.Put<uint32_t>(static_cast<uint32_t>(t.shape.size()));
      for (uint64_t ne : t.shape) w.Put<uint64_t>(ne);
      w.Put<uint32_t>(static_cast<uint32_t>(t.type));
      w.Put<uint64_t>(t.offset);
    }
    const uint64_t data_offset = gf::AlignUp(w.bytes().size(), alignment);
    s.expected_size = data_offset + data_bytes;

    s.fd = ::open(s.temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (s.fd < 0) {
      return im.Fail(IoError("{}: cannot create: {}", s.temp_path, std::strerror(errno)));
    }
    Status st = WriteAll(s.fd, w.bytes().data(), w.bytes().size(), s.temp_path);
    if (st.ok()) st = im.AppendZeros(k, data_offset - w.bytes().size());
    if (st.ok()) st = im.Flush();
    if (!st.ok()) return im.Fail(st);
  }
  im.state = Impl::State::kWriting;
  return Status::Ok();
}

Status GgufWriter::Write(std::span<const uint8_t> bytes) {
  Impl& im = *impl_;
  if (im.state != Impl::State::kWriting) {
    return InvalidArgument("{}: Write before Begin, after Finish or after a failure", path_);
  }
  const uint64_t alignment = options_.alignment;
  while (!bytes.empty()) {
    if (im.current == im.tensors.size()) {
      return im.Fail(InvalidArgument("{}: {} bytes written past the last declared tensor", path_,
                                     bytes.size()));
    }
    const Impl::Tensor& t = im.tensors[im.current];
    const uint64_t take = std::min<uint64_t>(bytes.size(), t.n_bytes - im.current_done);
    Status st = im.Append(t.shard, bytes.data(), static_cast<size_t>(take));
    bytes = bytes.subspan(static_cast<size_t>(take));
    im.current_done += take;
    if (st.ok() && im.current_done == t.n_bytes) {
      st = im.AppendZeros(t.shard, gf::AlignUp(t.n_bytes, alignment) - t.n_bytes);
      ++im.current;
      im.current_done = 0;
    }
    if (!st.ok()) return im.Fail(st);
  }
  return Status::Ok();
}

Status GgufWriter::Finish() {
  Impl& im = *impl_;
  if (im.state != Impl::State::kWriting) {
    return InvalidArgument("{}: Finish before Begin, twice or after a failure", path_);
  }
  if (im.current != im.tensors.size()) {
    const Impl::Tensor& t = im.tensors[im.current];
    return im.Fail(InvalidArgument("{}: Finish with tensor '{}' at {} of {} bytes", path_, t.name,
                                   im.current_done, t.n_bytes));
  }
  if (Status st = im.Flush(); !st.ok()) return im.Fail(st);
  for (Impl::Shard& s : im.shards) {
    struct stat st;
    if (::fstat(s.fd, &st) != 0) {
      return im.Fail(IoError("{}: cannot stat: {}", s.temp_path, std::strerror(errno)));
    }
    if (static_cast<uint64_t>(st.st_size) != s.expected_size) {
      return im.Fail(
          IoError("{}: has {} bytes, expected {}", s.temp_path, st.st_size, s.expected_size));
    }
    if (::fsync(s.fd) != 0) {
      return im.Fail(IoError("{}: fsync failed: {}", s.temp_path, std::strerror(errno)));
    }
    const int fd = s.fd;
    s.fd = -1;
    if (::close(fd) != 0) {
      return im.Fail(IoError("{}: close failed: {}", s.temp_path, std::strerror(errno)));
    }
  }
  for (size_t k = 0; k < im.shards.size(); ++k) {
    const Impl::Shard& s = im.shards[k];
    if (::rename(s.temp_path.c_str(), s.final_path.c_str()) != 0) {
      Status err =
          IoError("{}: cannot rename to {}: {}", s.temp_path, s.final_path, std::strerror(errno));
      // Leave no partial set behind: take back the shards already renamed.
      for (size_t j = 0; j < k; ++j) ::unlink(im.shards[j].final_path.c_str());
      return im.Fail(err);
    }
  }
  im.state = Impl::State::kFinished;
  // Make the renames durable; best effort, the files are complete either way.
  const size_t slash = path_.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path_.substr(0, slash + 1);
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  return Status::Ok();
}

}  // namespace mt
