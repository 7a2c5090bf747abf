// GgufValue and GgufMetadata: the in-memory form of GGUF key/value metadata.
#include <limits>
#include <type_traits>

#include "gguf/gguf.h"

namespace mt {

std::string_view GgufTypeName(GgufType type) {
  switch (type) {
    case GgufType::kUint8:
      return "uint8";
    case GgufType::kInt8:
      return "int8";
    case GgufType::kUint16:
      return "uint16";
    case GgufType::kInt16:
      return "int16";
    case GgufType::kUint32:
      return "uint32";
    case GgufType::kInt32:
      return "int32";
    case GgufType::kFloat32:
      return "float32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kUint64:
      return "uint64";
    case GgufType::kInt64:
      return "int64";
    case GgufType::kFloat64:
      return "float64";
  }
  return "unknown";
}

GgufValue GgufValue::Array(GgufType element_type, std::vector<GgufValue> items) {
  return GgufValue(Storage(GgufArray{element_type, std::move(items)}));
}

GgufValue GgufValue::StringArray(const std::vector<std::string>& items) {
  std::vector<GgufValue> values;
  values.reserve(items.size());
  for (const std::string& s : items) values.push_back(String(s));
  return Array(GgufType::kString, std::move(values));
}

GgufValue GgufValue::Float32Array(const std::vector<float>& items) {
  std::vector<GgufValue> values;
  values.reserve(items.size());
  for (float f : items) values.push_back(Float32(f));
  return Array(GgufType::kFloat32, std::move(values));
}

GgufValue GgufValue::Int32Array(const std::vector<int32_t>& items) {
  std::vector<GgufValue> values;
  values.reserve(items.size());
  for (int32_t i : items) values.push_back(Int32(i));
  return Array(GgufType::kInt32, std::move(values));
}

// The variant's alternatives are declared in GGUF type-id order, so index == type id.
GgufType GgufValue::type() const { return static_cast<GgufType>(v_.index()); }

std::optional<uint64_t> GgufValue::AsUint() const {
  return std::visit(
      [](const auto& x) -> std::optional<uint64_t> {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          if constexpr (std::is_signed_v<T>) {
            if (x < 0) return std::nullopt;
          }
          return static_cast<uint64_t>(x);
        }
        return std::nullopt;
      },
      v_);
}

std::optional<int64_t> GgufValue::AsInt() const {
  return std::visit(
      [](const auto& x) -> std::optional<int64_t> {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          if constexpr (std::is_same_v<T, uint64_t>) {
            if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
          }
          return static_cast<int64_t>(x);
        }
        return std::nullopt;
      },
      v_);
}

std::optional<double> GgufValue::AsDouble() const {
  return std::visit(
      [](const auto& x) -> std::optional<double> {
        using T = std::decay_t<decltype(x)>;
        if constexpr ((std::is_arithmetic_v<T>)&&!std::is_same_v<T, bool>) {
          return static_cast<double>(x);
        }
        return std::nullopt;
      },
      v_);
}

std::optional<bool> GgufValue::AsBool() const {
  if (const bool* b = std::get_if<bool>(&v_)) return *b;
  return std::nullopt;
}

const std::string* GgufValue::AsString() const { return std::get_if<std::string>(&v_); }

const GgufArray* GgufValue::AsArray() const { return std::get_if<GgufArray>(&v_); }

std::string GgufValue::ToShortString() const {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) {
          constexpr size_t kMax = 60;
          std::string s = x.size() > kMax ? x.substr(0, kMax) + "..." : x;
          for (char& c : s) {
            if (c == '\n' || c == '\r' || c == '\t') c = ' ';
          }
          return fmt::format("\"{}\"", s);
        } else if constexpr (std::is_same_v<T, GgufArray>) {
          return fmt::format("[array of {} {}]", x.items.size(), GgufTypeName(x.element_type));
        } else if constexpr (std::is_same_v<T, bool>) {
          return x ? "true" : "false";
        } else if constexpr (std::is_same_v<T, uint8_t> || std::is_same_v<T, int8_t>) {
          return fmt::format("{}", static_cast<int>(x));
        } else {
          return fmt::format("{}", x);
        }
      },
      v_);
}

const GgufValue* GgufMetadata::Find(std::string_view key) const {
  for (const Entry& e : entries_) {
    if (e.key == key) return &e.value;
  }
  return nullptr;
}

void GgufMetadata::Set(std::string key, GgufValue value) {
  for (Entry& e : entries_) {
    if (e.key == key) {
      e.value = std::move(value);
      return;
    }
  }
  entries_.push_back({std::move(key), std::move(value)});
}

void GgufMetadata::Erase(std::string_view key) {
  std::erase_if(entries_, [&](const Entry& e) { return e.key == key; });
}

std::optional<uint64_t> GgufMetadata::FindUint(std::string_view key) const {
  const GgufValue* v = Find(key);
  return v ? v->AsUint() : std::nullopt;
}

std::optional<double> GgufMetadata::FindDouble(std::string_view key) const {
  const GgufValue* v = Find(key);
  return v ? v->AsDouble() : std::nullopt;
}

std::optional<bool> GgufMetadata::FindBool(std::string_view key) const {
  const GgufValue* v = Find(key);
  return v ? v->AsBool() : std::nullopt;
}

const std::string* GgufMetadata::FindString(std::string_view key) const {
  const GgufValue* v = Find(key);
  return v ? v->AsString() : nullptr;
}

const GgufArray* GgufMetadata::FindArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  return v ? v->AsArray() : nullptr;
}

}  // namespace mt
