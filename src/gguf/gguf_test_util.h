// Test helpers for src/gguf: a hand-assembled golden file, a little-endian byte builder that
// is independent of the writer, temp directories and error matchers.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "gguf/gguf.h"

namespace mt::testing_gguf {

using namespace std::string_literals;

// A tiny v3 file assembled by hand, 448 bytes. Field offsets (used by the tests):
//   0 magic, 4 version, 8 n_tensors = 2, 16 n_kv = 5
//   24  kv "general.architecture" = "qwen3moe"   (key len @24, type @52, value len @56)
//   72  kv "qwen3moe.expert_count" = u32 128
//   109 kv "tokenizer.ggml.tokens" = [string] {"a", "<s>", ""}  (elem type @142, n @146)
//   182 kv "x.f32" = f32 1.5
//   203 kv "x.scores" = [f32] {-1, 0.5}
//   243 tensor "tok": n_dims @254 = 2, ne @258 = 4, @266 = 2, type @274 = f32, offset @278 = 0
//   286 tensor "out": n_dims @297 = 1, ne @301 = 32, type @309 = q8_0, offset @313 = 32
//   321 padding to 352 = data section; "tok" 32 bytes @352, "out" 34 bytes @384,
//   418 padding to 448.
inline constexpr uint64_t kGoldenDataOffset = 352;
inline constexpr uint64_t kGoldenSize = 448;
inline constexpr uint64_t kGoldenEndOfData = 418;  // end of the last tensor

// The 32 bytes of "tok": floats 1..8.
inline std::vector<uint8_t> GoldenTokData() {
  std::vector<uint8_t> out(32);
  for (int i = 0; i < 8; ++i) {
    const float f = static_cast<float>(i + 1);
    std::memcpy(out.data() + 4 * i, &f, 4);
  }
  return out;
}

// The 34 bytes of "out": one q8_0 block, d = f16 1.0 (0x3c00), qs = -16..15.
inline std::vector<uint8_t> GoldenOutData() {
  std::vector<uint8_t> out = {0x00, 0x3c};
  for (int i = 0; i < 32; ++i) out.push_back(static_cast<uint8_t>(static_cast<int8_t>(i - 16)));
  return out;
}

inline std::vector<uint8_t> GoldenBytes() {
  const std::string header =
      "GGUF"                   // 0 magic
      "\x03\0\0\0"             // 4 version 3
      "\x02\0\0\0\0\0\0\0"     // 8 n_tensors
      "\x05\0\0\0\0\0\0\0"     // 16 n_kv
      "\x14\0\0\0\0\0\0\0"     // 24 key length 20
      "general.architecture"   // 32
      "\x08\0\0\0"             // 52 type string
      "\x08\0\0\0\0\0\0\0"     // 56 length 8
      "qwen3moe"               // 64
      "\x15\0\0\0\0\0\0\0"     // 72 key length 21
      "qwen3moe.expert_count"  // 80
      "\x04\0\0\0"             // 101 type uint32
      "\x80\0\0\0"             // 105 128
      "\x15\0\0\0\0\0\0\0"     // 109 key length 21
      "tokenizer.ggml.tokens"  // 117
      "\x09\0\0\0"             // 138 type array
      "\x08\0\0\0"             // 142 element type string
      "\x03\0\0\0\0\0\0\0"     // 146 3 items
      "\x01\0\0\0\0\0\0\0"     // 154
      "a"                      // 162
      "\x03\0\0\0\0\0\0\0"     // 163
      "<s>"                    // 171
      "\0\0\0\0\0\0\0\0"       // 174 empty string
      "\x05\0\0\0\0\0\0\0"     // 182 key length 5
      "x.f32"                  // 190
      "\x06\0\0\0"             // 195 type float32
      "\0\0\xc0\x3f"           // 199 1.5
      "\x08\0\0\0\0\0\0\0"     // 203 key length 8
      "x.scores"               // 211
      "\x09\0\0\0"             // 219 type array
      "\x06\0\0\0"             // 223 element type float32
      "\x02\0\0\0\0\0\0\0"     // 227 2 items
      "\0\0\x80\xbf"           // 235 -1.0
      "\0\0\0\x3f"             // 239 0.5
      "\x03\0\0\0\0\0\0\0"     // 243 name length 3
      "tok"                    // 251
      "\x02\0\0\0"             // 254 n_dims 2
      "\x04\0\0\0\0\0\0\0"     // 258 ne0 4
      "\x02\0\0\0\0\0\0\0"     // 266 ne1 2
      "\0\0\0\0"               // 274 type f32
      "\0\0\0\0\0\0\0\0"       // 278 offset 0
      "\x03\0\0\0\0\0\0\0"     // 286 name length 3
      "out"                    // 294
      "\x01\0\0\0"             // 297 n_dims 1
      "\x20\0\0\0\0\0\0\0"     // 301 ne0 32
      "\x08\0\0\0"             // 309 type q8_0
      "\x20\0\0\0\0\0\0\0"s;   // 313 offset 32
  std::vector<uint8_t> out(header.begin(), header.end());
  EXPECT_EQ(out.size(), 321u);
  out.resize(kGoldenDataOffset, 0);
  std::vector<uint8_t> tok = GoldenTokData(), o = GoldenOutData();
  out.insert(out.end(), tok.begin(), tok.end());
  out.insert(out.end(), o.begin(), o.end());
  out.resize(kGoldenSize, 0);
  return out;
}

// Little-endian field builder, independent of the writer under test.
class Bytes {
 public:
  template <typename T>
  Bytes& Put(T v) {
    uint8_t b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    data.insert(data.end(), b, b + sizeof(T));
    return *this;
  }
  Bytes& U32(uint32_t v) { return Put(v); }
  Bytes& U64(uint64_t v) { return Put(v); }
  Bytes& Str(std::string_view s) {
    U64(s.size());
    data.insert(data.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& Header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    data.insert(data.end(), {'G', 'G', 'U', 'F'});
    return U32(version).U64(n_tensors).U64(n_kv);
  }
  // A key and its type id; the caller appends the value.
  Bytes& Key(std::string_view key, GgufType type) {
    return Str(key).U32(static_cast<uint32_t>(type));
  }
  Bytes& TensorInfo(std::string_view name, std::vector<uint64_t> shape, GgmlType type,
                    uint64_t offset) {
    Str(name).U32(static_cast<uint32_t>(shape.size()));
    for (uint64_t ne : shape) U64(ne);
    return U32(static_cast<uint32_t>(type)).U64(offset);
  }
  Bytes& PadTo(uint64_t alignment) {
    while (data.size() % alignment != 0) data.push_back(0);
    return *this;
  }
  Bytes& Fill(size_t n, uint8_t byte) {
    data.insert(data.end(), n, byte);
    return *this;
  }
  uint64_t size() const { return data.size(); }

  std::vector<uint8_t> data;
};

template <typename T>
void Patch(std::vector<uint8_t>* bytes, size_t offset, T v) {
  ASSERT_LE(offset + sizeof(T), bytes->size());
  std::memcpy(bytes->data() + offset, &v, sizeof(T));
}

inline Result<GgufModel> ParseBytes(const std::vector<uint8_t>& bytes,
                                    const std::string& name = "t.gguf") {
  return GgufModel::Parse(std::span<const uint8_t>(bytes.data(), bytes.size()), name);
}

// Checks `s` is the one-line error "<name>: offset <offset>: ..." with `code`, containing
// `fragment`.
inline void ExpectFormatError(const Status& s, StatusCode code, const std::string& name,
                              uint64_t offset, std::string_view fragment) {
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), code) << s.message();
  const std::string head = name + ": offset " + std::to_string(offset) + ": ";
  EXPECT_TRUE(s.message().starts_with(head))
      << "expected prefix '" << head << "' in: " << s.message();
  EXPECT_NE(s.message().find(fragment), std::string::npos)
      << "expected '" << fragment << "' in: " << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
}

// A fresh directory under the test temp dir, removed with its contents at the end.
class TempDir {
 public:
  TempDir() {
    std::string templ = ::testing::TempDir() + "gguf_test_XXXXXX";
    path_ = ::mkdtemp(templ.data()) ? templ : std::string();
    EXPECT_FALSE(path_.empty());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string File(std::string_view name) const { return path_ + "/" + std::string(name); }
  // Names of the entries in the directory, sorted.
  std::vector<std::string> List() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path_)) {
      out.push_back(e.path().filename().string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::string path_;
};

inline void WriteFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

inline std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

inline bool Exists(const std::string& path) { return std::filesystem::exists(path); }

// Deep equality of two values, arrays included (GgufValue has no operator==).
inline bool ValueEqual(const GgufValue& a, const GgufValue& b) {
  if (a.type() != b.type()) return false;
  const GgufArray* x = a.AsArray();
  const GgufArray* y = b.AsArray();
  if (x == nullptr) {
    return std::visit(
        [&](const auto& va) {
          using T = std::decay_t<decltype(va)>;
          if constexpr (std::is_same_v<T, GgufArray>) {
            return false;
          } else {
            return va == std::get<T>(b.storage());
          }
        },
        a.storage());
  }
  if (x->element_type != y->element_type || x->items.size() != y->items.size()) return false;
  for (size_t i = 0; i < x->items.size(); ++i) {
    if (!ValueEqual(x->items[i], y->items[i])) return false;
  }
  return true;
}

}  // namespace mt::testing_gguf
