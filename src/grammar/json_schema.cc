// JSON Schema to GBNF: one rule per object, array, bounded string, enum, union and $defs entry;
// the JSON primitives (value, object, array, string, char, number, integer, boolean, null, ws)
// are shared rules, emitted when used. Generated names hold a '-', primitive names none, so
// the two never collide.
#include "grammar/json_schema.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "base/check.h"
#include "tokenizer/utf8.h"

namespace mt::grammar {
namespace {

using Json = nlohmann::ordered_json;

constexpr int kMaxDepth = 64;         // schemas nested inside each other, $refs included
constexpr int64_t kMaxBound = 10000;  // minItems, maxItems, minLength, maxLength
// A bound on the elements Grammar::Parse makes of the output (it takes 100000): at most one
// per byte of text, plus what each copy of a bounded repetition expands to.
constexpr size_t kMaxCost = 90000;
constexpr size_t kCharCopyCost = 2;  // one `char` of string{m,n}: a rule reference, a rule
constexpr size_t kItemCopyCost = 5;  // one `ws "," ws item` of array{m,n}: 4 elements, a rule

// ---- The shared primitives ------------------------------------------------------------------

enum Prim : uint32_t {
  kValue,
  kObject,
  kArray,
  kString,
  kChar,
  kNumber,
  kInteger,
  kBoolean,
  kNull,
  kWs,
  kNumPrims
};

struct PrimRule {
  const char* name;
  const char* body;
  uint32_t deps;  // bit p: uses primitive p
};

constexpr uint32_t Bit(Prim p) { return 1u << p; }

// clang-format off
const PrimRule kPrims[kNumPrims] = {
    {"value", R"(object | array | string | number | "true" | "false" | "null")",
     Bit(kObject) | Bit(kArray) | Bit(kString) | Bit(kNumber)},
    {"object", R"("{" ws ( string ws ":" ws value ( ws "," ws string ws ":" ws value )* ws )? "}")",
     Bit(kString) | Bit(kValue) | Bit(kWs)},
    {"array", R"("[" ws ( value ( ws "," ws value )* ws )? "]")", Bit(kValue) | Bit(kWs)},
    {"string", R"("\"" char* "\"")", Bit(kChar)},
    // A \u escape of a surrogate: a high one (D800-DBFF) followed by a low one (DC00-DFFF).
    {"char", R"([^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" ( [0-9a-cA-CeEfF] [0-9a-fA-F]{3} | )"
             R"([dD] [0-7] [0-9a-fA-F]{2} | [dD] [89abAB] [0-9a-fA-F]{2} "\\u" [dD] [c-fC-F] )"
             R"([0-9a-fA-F]{2} ) ))", 0},
    // At most 16+16 digits and a 2-digit exponent: never past a double's range (1e308), which
    // strict parsers (nlohmann's) refuse as an overflow.
    {"number", R"(integer ( "." [0-9]{1,16} )? ( [eE] ( "+" | "-" )? [0-9]{1,2} )?)",
     Bit(kInteger)},
    {"integer", R"("-"? ( "0" | [1-9] [0-9]{0,15} ))", 0},
    {"boolean", R"("true" | "false")", 0},
    {"null", R"("null")", 0},
    {"ws", R"(( " " | "\n" [ \t]{0,20} )?)", 0},
};
// clang-format on

// `root ::= root_body` followed by `rules`, then the primitives in `used` and what they use.
std::string Emit(std::string_view root_body,
                 const std::vector<std::pair<std::string, std::string>>& rules, uint32_t used) {
  for (bool grew = true; grew;) {
    grew = false;
    for (uint32_t p = 0; p < kNumPrims; ++p) {
      if ((used & (1u << p)) && (used | kPrims[p].deps) != used) {
        used |= kPrims[p].deps;
        grew = true;
      }
    }
  }
  std::string out = fmt::format("root ::= {}\n", root_body);
  for (const auto& [name, body] : rules) out += fmt::format("{} ::= {}\n", name, body);
  for (uint32_t p = 0; p < kNumPrims; ++p) {
    if (used & (1u << p)) out += fmt::format("{} ::= {}\n", kPrims[p].name, kPrims[p].body);
  }
  return out;
}

// ---- Text helpers ---------------------------------------------------------------------------

// Appends `s` as a JSON string literal (only `"`, `\` and control characters escaped). Returns
// false when `s` is not UTF-8 (overlong forms, surrogates and code points past U+10FFFF
// included). `code_points`, when given, receives the string's length in code points.
bool AppendJsonString(std::string_view s, std::string* out, size_t* code_points = nullptr) {
  *out += '"';
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"':
          *out += "\\\"";
          break;
        case '\\':
          *out += "\\\\";
          break;
        case '\b':
          *out += "\\b";
          break;
        case '\f':
          *out += "\\f";
          break;
        case '\n':
          *out += "\\n";
          break;
        case '\r':
          *out += "\\r";
          break;
        case '\t':
          *out += "\\t";
          break;
        default:
          if (c < 0x20) {
            *out += fmt::format("\\u{:04x}", c);
          } else {
            *out += static_cast<char>(c);
          }
      }
      ++i;
      continue;
    }
    const size_t len = utf8::ValidSequenceLength(s, i);
    if (len == 0) return false;
    out->append(s.substr(i, len));
    i += len;
  }
  *out += '"';
  if (code_points) *code_points = n;
  return true;
}

// A GBNF literal matching the UTF-8 text `s` exactly.
std::string GbnfLiteral(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += ch;
    }
  }
  out += '"';
  return out;
}

// `s` for an error message: one short line of UTF-8. Control bytes, and every byte of a
// string that is not UTF-8, as \xHH; cut at a character boundary after `max` bytes.
std::string Printable(std::string_view s, size_t max = 80) {
  std::string ignored;
  const bool utf8 = AppendJsonString(s, &ignored);
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (i >= max && (c & 0xc0) != 0x80) {
      out += "...";
      break;
    }
    if (c < 0x20 || c == 0x7f || (c >= 0x80 && !utf8)) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// One reference token of a JSON pointer: '~' as "~0", '/' as "~1".
std::string PointerToken(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

// A rule name from free text: letters and digits kept, anything else as '-'; at most 24.
std::string NameFragment(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 24)) {
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    out += alnum ? c : '-';
  }
  return out;
}

// GBNF alternatives: the expressions joined by " | ".
std::string Join(const std::vector<std::string>& alternatives) {
  std::string out;
  for (const std::string& a : alternatives) {
    if (!out.empty()) out += " | ";
    out += a;
  }
  return out;
}

// A repetition suffix for {lo,hi}; hi < 0: unbounded. Not for {0,0}.
std::string RepeatSuffix(int64_t lo, int64_t hi) {
  if (hi < 0) {
    if (lo == 0) return "*";
    if (lo == 1) return "+";
    return fmt::format("{{{},}}", lo);
  }
  if (lo == hi) return lo == 1 ? "" : fmt::format("{{{}}}", lo);
  if (lo == 0 && hi == 1) return "?";
  return fmt::format("{{{},{}}}", lo, hi);
}

bool IsAnnotation(std::string_view key) {
  static const std::set<std::string_view> kAnnotations = {
      "title",  "description", "$schema",  "$id",       "default", "examples",   "$comment",
      "strict", "deprecated",  "readOnly", "writeOnly", "$defs",   "definitions"};
  return kAnnotations.count(key) != 0;
}

bool IsSupported(std::string_view key) {
  static const std::set<std::string_view> kSupported = {
      "type",      "properties", "required", "additionalProperties",
      "items",     "minItems",   "maxItems", "minLength",
      "maxLength", "enum",       "const",    "anyOf",
      "oneOf",     "allOf",      "$ref"};
  return kSupported.count(key) != 0;
}

// The JSON types, as bits, in the order alternatives are generated.
enum TypeBit : uint32_t {
  kTObject = 1,
  kTArray = 2,
  kTString = 4,
  kTNumber = 8,
  kTInteger = 16,
  kTBoolean = 32,
  kTNull = 64
};

uint32_t TypeFromName(std::string_view name) {
  if (name == "object") return kTObject;
  if (name == "array") return kTArray;
  if (name == "string") return kTString;
  if (name == "number") return kTNumber;
  if (name == "integer") return kTInteger;
  if (name == "boolean") return kTBoolean;
  if (name == "null") return kTNull;
  return 0;
}

// Whether `v` is of JSON Schema type `t` (an integer is a number without a fraction).
bool HasType(const Json& v, uint32_t t) {
  switch (t) {
    case kTObject:
      return v.is_object();
    case kTArray:
      return v.is_array();
    case kTString:
      return v.is_string();
    case kTNumber:
      return v.is_number();
    case kTInteger:
      if (v.is_number_integer()) return true;
      if (v.is_number_float()) {
        const double d = v.get<double>();
        return std::isfinite(d) && std::floor(d) == d;
      }
      return false;
    case kTBoolean:
      return v.is_boolean();
    case kTNull:
      return v.is_null();
  }
  return false;
}

// ---- The converter --------------------------------------------------------------------------

// A bound keyword's value: absent, or a count in [0, kMaxBound].
struct Bound {
  bool present = false;
  int64_t value = 0;
};

class Converter {
 public:
  // `prefix` goes before every generated rule name, so several schemas can share a grammar.
  explicit Converter(const Json& root, std::string prefix = "")
      : root_(root), prefix_(std::move(prefix)) {}

  // The expression for the root schema's documents; then rules() and prims_used() hold what
  // it refers to.
  Result<std::string> Run() {
    std::string root = MT_TRY(Visit(root_, "", 0));
    MT_RETURN_IF_ERROR(CheckRefCycles());
    return root;
  }
  const std::vector<std::pair<std::string, std::string>>& rules() const { return rules_; }
  uint32_t prims_used() const { return prims_used_; }

 private:
  struct Def {
    std::string rule;     // its rule's name
    std::string ref;      // the $ref text first seen, for messages
    std::string pointer;  // where it lives, for messages
  };

  template <typename... Args>
  static Status Error(const std::string& pointer, fmt::format_string<Args...> f, Args&&... args) {
    return InvalidArgument("json_schema: {} at {}", fmt::format(f, std::forward<Args>(args)...),
                           pointer.empty() ? std::string("/") : Printable(pointer, 200));
  }

  std::string Use(Prim p) {
    prims_used_ |= 1u << p;
    return kPrims[p].name;
  }

  // Reserves a rule named "<kind>-<n>" (unique: n counts up) and returns its index.
  size_t NewRule(std::string_view kind) {
    std::string name = fmt::format("{}{}-{}", prefix_, kind, ++counter_);
    rules_.emplace_back(std::move(name), std::string());
    return rules_.size() - 1;
  }
  // Sets the body of rule `index`, adding `extra_cost` for what its repetitions expand to.
  Status SetRule(size_t index, std::string body, size_t extra_cost, const std::string& ptr) {
    cost_ += rules_[index].first.size() + body.size() + 8 + extra_cost;
    rules_[index].second = std::move(body);
    if (cost_ > kMaxCost) {
      return Error(ptr, "the schema needs a grammar too large (over {} elements)", kMaxCost);
    }
    return Status::Ok();
  }
  // A new rule `<kind>-<n> ::= body`; returns its name.
  Result<std::string> AddRule(std::string_view kind, std::string body, size_t extra_cost,
                              const std::string& ptr) {
    const size_t index = NewRule(kind);
    MT_RETURN_IF_ERROR(SetRule(index, std::move(body), extra_cost, ptr));
    return rules_[index].first;
  }

  // The expression matching the documents generated for `schema` (a rule or primitive name).
  Result<std::string> Visit(const Json& schema, const std::string& ptr, int depth);
  Result<std::string> VisitRef(const Json& schema, const std::string& ptr, int depth);
  Result<std::string> VisitEnum(const Json& schema, const std::string& ptr, uint32_t types,
                                Bound min_length, Bound max_length, Bound min_items,
                                Bound max_items, int depth);
  Result<std::string> VisitObject(const Json& schema, const std::string& ptr, int depth);
  Result<std::string> VisitArray(const Json& schema, const std::string& ptr, Bound min_items,
                                 Bound max_items, int depth);
  Result<std::string> VisitString(const std::string& ptr, Bound min_length, Bound max_length);
  // Visits a subschema whose text is always preceded by a consumed token ("{", "["): $refs
  // met there cannot close a left-recursive cycle.
  Result<std::string> VisitGuarded(const Json& schema, const std::string& ptr, int depth) {
    const bool saved = guarded_;
    guarded_ = true;
    Result<std::string> r = Visit(schema, ptr, depth);
    guarded_ = saved;
    return r;
  }
  Status ReadBound(const Json& schema, const char* key, const std::string& ptr, Bound* out);
  Status AppendValue(const Json& v, const std::string& ptr, int depth, std::string* out);
  Status CheckRefCycles();

  const Json& root_;
  const std::string prefix_;
  std::vector<std::pair<std::string, std::string>> rules_;  // (name, body) in creation order
  uint32_t prims_used_ = 0;
  int counter_ = 0;
  size_t cost_ = 0;
  std::map<std::string, Def> defs_;  // key: "$defs/NAME" or "definitions/NAME"
  std::set<std::string> def_names_;
  // $refs met in a definition's body before any consumed token: the edges along which a
  // reference cycle would be left recursion.
  std::map<std::string, std::set<std::string>> unguarded_refs_;
  std::string current_def_;  // the definition whose body is being visited; "" at the root
  bool guarded_ = true;
};

Status Converter::ReadBound(const Json& schema, const char* key, const std::string& ptr,
                            Bound* out) {
  const auto it = schema.find(key);
  if (it == schema.end()) return Status::Ok();
  double v = -1;
  if (it->is_number_unsigned()) {
    v = static_cast<double>(it->get<uint64_t>());
  } else if (it->is_number_integer()) {
    v = static_cast<double>(it->get<int64_t>());
  } else if (it->is_number_float()) {
    v = it->get<double>();
    if (!std::isfinite(v) || std::floor(v) != v) v = -1;
  }
  if (!it->is_number() || v < 0) return Error(ptr, "'{}' must be a non-negative integer", key);
  if (v > static_cast<double>(kMaxBound)) {
    return Error(ptr, "'{}' {} is above the limit {}", key, Printable(it->dump()), kMaxBound);
  }
  out->present = true;
  out->value = static_cast<int64_t>(v);
  return Status::Ok();
}

Result<std::string> Converter::Visit(const Json& schema, const std::string& ptr, int depth) {
  if (depth > kMaxDepth) return Error(ptr, "schemas nested deeper than {}", kMaxDepth);
  if (schema.is_boolean()) {
    if (schema.get<bool>()) return Use(kValue);
    return Error(ptr, "the false schema (no value) is not supported");
  }
  if (!schema.is_object()) return Error(ptr, "a schema must be an object or a boolean");

  std::vector<std::string_view> keywords;  // the constraining ones, in order
  for (const auto& [key, value] : schema.items()) {
    if (IsAnnotation(key)) continue;
    if (!IsSupported(key)) return Error(ptr, "unsupported keyword '{}'", Printable(key));
    keywords.push_back(key);
  }

  // The type of every keyword's value, before anything is generated.
  uint32_t types = 0;
  if (const auto it = schema.find("type"); it != schema.end()) {
    std::vector<const Json*> names;
    if (it->is_string()) {
      names.push_back(&*it);
    } else if (it->is_array() && !it->empty()) {
      for (const Json& n : *it) names.push_back(&n);
    }
    if (names.empty()) return Error(ptr, "'type' must be a type name or an array of them");
    for (const Json* n : names) {
      if (!n->is_string()) return Error(ptr, "'type' must be a type name or an array of them");
      const uint32_t t = TypeFromName(n->get_ref<const std::string&>());
      if (t == 0) {
        return Error(ptr, "unknown type '{}'", Printable(n->get_ref<const std::string&>()));
      }
      types |= t;
    }
  }
  Bound min_items, max_items, min_length, max_length;
  MT_RETURN_IF_ERROR(ReadBound(schema, "minItems", ptr, &min_items));
  MT_RETURN_IF_ERROR(ReadBound(schema, "maxItems", ptr, &max_items));
  MT_RETURN_IF_ERROR(ReadBound(schema, "minLength", ptr, &min_length));
  MT_RETURN_IF_ERROR(ReadBound(schema, "maxLength", ptr, &max_length));
  if (min_items.present && max_items.present && min_items.value > max_items.value) {
    return Error(ptr, "minItems {} > maxItems {}", min_items.value, max_items.value);
  }
  if (min_length.present && max_length.present && min_length.value > max_length.value) {
    return Error(ptr, "minLength {} > maxLength {}", min_length.value, max_length.value);
  }
  if (const auto it = schema.find("required"); it != schema.end()) {
    bool ok = it->is_array();
    for (size_t i = 0; ok && i < it->size(); ++i) ok = (*it)[i].is_string();
    if (!ok) return Error(ptr, "'required' must be an array of strings");
  }
  if (const auto it = schema.find("properties"); it != schema.end() && !it->is_object()) {
    return Error(ptr, "'properties' must be an object of schemas");
  }
  if (const auto it = schema.find("additionalProperties");
      it != schema.end() && !it->is_object() && !it->is_boolean()) {
    return Error(ptr, "'additionalProperties' must be a schema");
  }
  if (const auto it = schema.find("items");
      it != schema.end() && !it->is_object() && !it->is_boolean()) {
    return Error(ptr, "'items' must be a schema (the array form is not supported)");
  }
  for (const char* key : {"anyOf", "oneOf", "allOf"}) {
    if (const auto it = schema.find(key); it != schema.end() && (!it->is_array() || it->empty())) {
      return Error(ptr, "'{}' must be a non-empty array of schemas", key);
    }
  }
  if (const auto it = schema.find("allOf"); it != schema.end() && it->size() != 1) {
    return Error(ptr, "'allOf' with {} members is not supported (only one)", it->size());
  }
  if (const auto it = schema.find("enum"); it != schema.end() && !it->is_array()) {
    return Error(ptr, "'enum' must be an array");
  }
  if (const auto it = schema.find("$ref"); it != schema.end() && !it->is_string()) {
    return Error(ptr, "'$ref' must be a string");
  }

  // Keywords that stand for a whole schema of their own: alone, or with annotations only (the
  // documents of two schemas at once would need the intersection of two grammars).
  for (const char* key : {"$ref", "allOf", "anyOf", "oneOf"}) {
    if (!schema.contains(key)) continue;
    for (std::string_view other : keywords) {
      if (other != key) {
        return Error(ptr, "'{}' alongside '{}' is not supported", key, Printable(other));
      }
    }
  }
  if (schema.contains("$ref")) return VisitRef(schema, ptr, depth);
  if (schema.contains("allOf")) {
    return Visit(schema["allOf"][0], ptr + "/allOf/0", depth + 1);
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    const auto it = schema.find(key);
    if (it == schema.end()) continue;
    std::vector<std::string> alternatives;
    for (size_t i = 0; i < it->size(); ++i) {
      std::string a = MT_TRY(Visit((*it)[i], fmt::format("{}/{}/{}", ptr, key, i), depth + 1));
      bool seen = false;
      for (const std::string& b : alternatives) seen = seen || b == a;
      if (!seen) alternatives.push_back(std::move(a));
    }
    if (alternatives.size() == 1) return alternatives[0];
    return AddRule("anyof", Join(alternatives), 0, ptr);
  }
  if (schema.contains("enum") || schema.contains("const")) {
    for (std::string_view other : keywords) {
      static const std::set<std::string_view> kFilters = {
          "type", "minLength", "maxLength", "minItems", "maxItems", "enum", "const"};
      if (kFilters.count(other) == 0) {
        return Error(ptr, "'{}' alongside '{}' is not supported",
                     schema.contains("enum") ? "enum" : "const", Printable(other));
      }
    }
    return VisitEnum(schema, ptr, types, min_length, max_length, min_items, max_items, depth);
  }

  if (types == 0) {  // no `type`: the types the keywords present speak of
    for (std::string_view k : keywords) {
      if (k == "properties" || k == "required" || k == "additionalProperties") types |= kTObject;
      if (k == "items" || k == "minItems" || k == "maxItems") types |= kTArray;
      if (k == "minLength" || k == "maxLength") types |= kTString;
    }
    if (types == 0) return Use(kValue);
  }
  if (types & kTNumber) types &= ~kTInteger;
  std::vector<std::string> alternatives;
  if (types & kTObject) {
    std::string r = MT_TRY(VisitObject(schema, ptr, depth));
    alternatives.push_back(std::move(r));
  }
  if (types & kTArray) {
    std::string r = MT_TRY(VisitArray(schema, ptr, min_items, max_items, depth));
    alternatives.push_back(std::move(r));
  }
  if (types & kTString) {
    std::string r = MT_TRY(VisitString(ptr, min_length, max_length));
    alternatives.push_back(std::move(r));
  }
  if (types & kTNumber) alternatives.push_back(Use(kNumber));
  if (types & kTInteger) alternatives.push_back(Use(kInteger));
  if (types & kTBoolean) alternatives.push_back(Use(kBoolean));
  if (types & kTNull) alternatives.push_back(Use(kNull));
  if (alternatives.size() == 1) return alternatives[0];
  return AddRule("types", Join(alternatives), 0, ptr);
}

Result<std::string> Converter::VisitRef(const Json& schema, const std::string& ptr, int depth) {
  const std::string& ref = schema["$ref"].get_ref<const std::string&>();
  std::string_view section;
  std::string_view rest;
  for (std::string_view prefix : {"#/$defs/", "#/definitions/"}) {
    if (std::string_view(ref).substr(0, prefix.size()) == prefix) {
      section = prefix.substr(2, prefix.size() - 3);
      rest = std::string_view(ref).substr(prefix.size());
    }
  }
  // The name: the fragment is percent-encoded (URI), then a JSON pointer token (~0 ~1).
  std::string decoded;
  for (size_t i = 0; i < rest.size(); ++i) {
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    if (rest[i] == '%' && i + 2 < rest.size() && hex(rest[i + 1]) >= 0 && hex(rest[i + 2]) >= 0) {
      decoded += static_cast<char>(hex(rest[i + 1]) * 16 + hex(rest[i + 2]));
      i += 2;
    } else {
      decoded += rest[i];
    }
  }
  std::string name;
  bool nested = false;
  for (size_t i = 0; i < decoded.size(); ++i) {
    if (decoded[i] == '~' && i + 1 < decoded.size() &&
        (decoded[i + 1] == '0' || decoded[i + 1] == '1')) {
      name += decoded[i + 1] == '0' ? '~' : '/';
      ++i;
    } else {
      nested = nested || decoded[i] == '/';
      name += decoded[i];
    }
  }
  if (section.empty() || nested) {
    return Error(ptr, "$ref '{}' is not supported (only #/$defs/NAME and #/definitions/NAME)",
                 Printable(ref));
  }
  const std::string key = fmt::format("{}/{}", section, name);
  const Json* target = nullptr;
  if (root_.is_object()) {
    const auto defs = root_.find(section);
    if (defs != root_.end() && defs->is_object()) {
      const auto it = defs->find(name);
      if (it != defs->end()) target = &*it;
    }
  }
  if (target == nullptr) return Error(ptr, "$ref '{}' does not resolve", Printable(ref));

  if (!guarded_ && !current_def_.empty()) unguarded_refs_[current_def_].insert(key);
  if (const auto it = defs_.find(key); it != defs_.end()) return it->second.rule;

  // A rule per definition, named before its body is visited, so recursion refers to it.
  std::string rule = prefix_ + "def-" + NameFragment(name);
  if (rule == prefix_ + "def-" || def_names_.count(rule)) {
    const std::string base = rule;
    do {
      rule = fmt::format("{}-{}", base, ++counter_);
    } while (def_names_.count(rule));
  }
  def_names_.insert(rule);
  const std::string def_ptr = fmt::format("/{}/{}", section, PointerToken(name));
  defs_[key] = Def{rule, ref, def_ptr};
  rules_.emplace_back(rule, std::string());
  const size_t index = rules_.size() - 1;

  const std::string saved_def = current_def_;
  const bool saved_guarded = guarded_;
  current_def_ = key;
  guarded_ = false;
  Result<std::string> body = Visit(*target, def_ptr, depth + 1);
  current_def_ = saved_def;
  guarded_ = saved_guarded;
  if (!body.ok()) return body.status();
  MT_RETURN_IF_ERROR(SetRule(index, std::move(*body), 0, def_ptr));
  return rule;
}

// A cycle of $refs none of which is inside an object or array would be a left-recursive rule
// (def-a ::= def-b, def-b ::= def-a | null): a schema without documents, refused here.
Status Converter::CheckRefCycles() {
  std::map<std::string, int> state;  // 1: on the path, 2: done
  std::vector<std::pair<std::string, std::set<std::string>::const_iterator>> path;
  static const std::set<std::string> kNone;
  for (const auto& [start, unused] : unguarded_refs_) {
    if (state[start]) continue;
    auto edges = [&](const std::string& k) -> const std::set<std::string>& {
      const auto it = unguarded_refs_.find(k);
      return it == unguarded_refs_.end() ? kNone : it->second;
    };
    state[start] = 1;
    path.emplace_back(start, edges(start).begin());
    while (!path.empty()) {
      auto& [node, next] = path.back();
      if (next == edges(node).end()) {
        state[node] = 2;
        path.pop_back();
        continue;
      }
      const std::string& to = *next++;
      if (state[to] == 1) {
        const Def& d = defs_.at(to);
        return Error(d.pointer, "$ref cycle through '{}' that never enters an object or array",
                     Printable(d.ref));
      }
      if (state[to] == 0) {
        state[to] = 1;
        path.emplace_back(to, edges(to).begin());
      }
    }
  }
  return Status::Ok();
}

Status Converter::AppendValue(const Json& v, const std::string& ptr, int depth, std::string* out) {
  if (depth > kMaxDepth) return Error(ptr, "enum/const value nested deeper than {}", kMaxDepth);
  if (v.is_string()) {
    if (!AppendJsonString(v.get_ref<const std::string&>(), out)) {
      return Error(ptr, "enum/const string is not UTF-8");
    }
  } else if (v.is_array()) {
    *out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) *out += ',';
      MT_RETURN_IF_ERROR(AppendValue(v[i], ptr, depth + 1, out));
    }
    *out += ']';
  } else if (v.is_object()) {
    *out += '{';
    bool first = true;
    for (const auto& [key, value] : v.items()) {
      if (!first) *out += ',';
      first = false;
      if (!AppendJsonString(key, out)) return Error(ptr, "enum/const key is not UTF-8");
      *out += ':';
      MT_RETURN_IF_ERROR(AppendValue(value, ptr, depth + 1, out));
    }
    *out += '}';
  } else if (v.is_number_float() && !std::isfinite(v.get<double>())) {
    return Error(ptr, "enum/const number is not finite");
  } else if (v.is_number() || v.is_boolean() || v.is_null()) {
    *out += v.dump();
  } else {
    return Error(ptr, "enum/const value is not JSON");
  }
  if (out->size() > kMaxCost) {
    return Error(ptr, "the schema needs a grammar too large (over {} elements)", kMaxCost);
  }
  return Status::Ok();
}

Result<std::string> Converter::VisitEnum(const Json& schema, const std::string& ptr, uint32_t types,
                                         Bound min_length, Bound max_length, Bound min_items,
                                         Bound max_items, int depth) {
  std::vector<const Json*> candidates;
  const auto c = schema.find("const");
  const auto e = schema.find("enum");
  if (c != schema.end()) {
    bool in_enum = e == schema.end();
    for (size_t i = 0; !in_enum && i < e->size(); ++i) in_enum = (*e)[i] == *c;
    if (in_enum) candidates.push_back(&*c);
  } else {
    for (const Json& v : *e) candidates.push_back(&v);
  }
  std::vector<std::string> literals;
  std::set<std::string> seen;
  size_t bytes = 0;
  for (const Json* v : candidates) {
    // The value must satisfy the other keywords too: type, and the bounds of its type.
    bool typed = types == 0;
    for (uint32_t t = 1; t <= kTNull; t <<= 1) typed = typed || ((types & t) && HasType(*v, t));
    if (!typed) continue;
    std::string text;
    if (v->is_string()) {
      size_t length = 0;
      if (!AppendJsonString(v->get_ref<const std::string&>(), &text, &length)) {
        return Error(ptr, "enum/const string is not UTF-8");
      }
      if (min_length.present && static_cast<int64_t>(length) < min_length.value) continue;
      if (max_length.present && static_cast<int64_t>(length) > max_length.value) continue;
    } else {
      if (v->is_array()) {
        const auto n = static_cast<int64_t>(v->size());
        if ((min_items.present && n < min_items.value) ||
            (max_items.present && n > max_items.value)) {
          continue;
        }
      }
      MT_RETURN_IF_ERROR(AppendValue(*v, ptr, 0, &text));
    }
    if (!seen.insert(text).second) continue;
    bytes += text.size();
    if (bytes > kMaxCost) {
      return Error(ptr, "the schema needs a grammar too large (over {} elements)", kMaxCost);
    }
    literals.push_back(GbnfLiteral(text));
  }
  if (literals.empty()) {
    return Error(ptr, "no value of '{}' satisfies the schema",
                 c != schema.end() ? "const" : "enum");
  }
  return AddRule("enum", Join(literals), 0, ptr);
}

Result<std::string> Converter::VisitObject(const Json& schema, const std::string& ptr, int depth) {
  struct Property {
    std::string key;    // GBNF literal of the JSON-encoded name
    std::string value;  // expression of its value
    bool required = false;
  };
  std::vector<Property> properties;
  std::set<std::string> required;
  if (const auto it = schema.find("required"); it != schema.end()) {
    for (const Json& r : *it) required.insert(r.get<std::string>());
  }
  const auto additional = schema.find("additionalProperties");
  const bool closed =
      additional != schema.end() && additional->is_boolean() && !additional->get<bool>();
  std::string additional_value;  // the expression for additional values, once visited
  auto additional_expr = [&]() -> Result<std::string> {
    if (!additional_value.empty()) return additional_value;
    if (additional == schema.end()) return Use(kValue);
    Result<std::string> r = VisitGuarded(*additional, ptr + "/additionalProperties", depth + 1);
    if (r.ok()) additional_value = *r;
    return r;
  };
  auto add = [&](const std::string& name, std::string value) -> Status {
    std::string encoded;
    if (!AppendJsonString(name, &encoded)) {
      return Error(ptr, "property name is not UTF-8");
    }
    properties.push_back(
        Property{GbnfLiteral(encoded), std::move(value), required.count(name) != 0});
    return Status::Ok();
  };
  std::set<std::string> declared;
  if (const auto it = schema.find("properties"); it != schema.end()) {
    for (const auto& [name, sub] : it->items()) {
      std::string v = MT_TRY(
          VisitGuarded(sub, fmt::format("{}/properties/{}", ptr, PointerToken(name)), depth + 1));
      declared.insert(name);
      MT_RETURN_IF_ERROR(add(name, std::move(v)));
    }
  }
  // Required names without a declaration: their values follow additionalProperties.
  if (const auto it = schema.find("required"); it != schema.end()) {
    for (const Json& r : *it) {
      const std::string& name = r.get_ref<const std::string&>();
      if (!declared.insert(name).second) continue;
      if (closed) {
        return Error(ptr,
                     "required property '{}' is not in 'properties' and "
                     "additionalProperties is false",
                     Printable(name));
      }
      std::string v = MT_TRY(additional_expr());
      MT_RETURN_IF_ERROR(add(name, std::move(v)));
    }
  }
  Use(kWs);
  if (properties.empty()) {
    if (closed) return AddRule("object", R"("{" ws "}")", 0, ptr);
    if (additional == schema.end() || additional->is_boolean()) return Use(kObject);
    std::string v = MT_TRY(additional_expr());
    const std::string pair = fmt::format("{} ws \":\" ws {}", Use(kString), v);
    return AddRule("object",
                   fmt::format(R"("{{" ws ( {} ( ws "," ws {} )* ws )? "}}")", pair, pair), 0, ptr);
  }

  // Properties p0..p(n-1) in order, the optional ones possibly absent, commas between. With
  // next(i) the properties from pi on, at least one of them:
  //   next(i) ::= kvi ( ws "," ws next(i+1) )? | next(i+1)   pi optional, none after required
  //   next(i) ::= kvi ws "," ws next(i+1) | next(i+1)        pi optional, one after required
  //   next(i) ::= kvi ...                                     pi required (no skipping it)
  //   object  ::= "{" ws next(0) ws "}"  (or "{" ws ( next(0) ws )? "}" when none required)
  // The comma is written once, before the choice of the next key, so the parses alive at a
  // time stay few (one per key that may come next), however many properties are optional.
  const size_t n = properties.size();
  std::vector<bool> required_after(n + 1, false);  // some pj with j >= i is required
  for (size_t i = n; i-- > 0;) required_after[i] = required_after[i + 1] || properties[i].required;
  const size_t object_index = NewRule("object");
  const std::string object_name = rules_[object_index].first;
  std::vector<size_t> next(n);
  for (size_t i = 0; i < n; ++i) {
    next[i] = rules_.size();
    rules_.emplace_back(fmt::format("{}-next{}", object_name, i), std::string());
  }
  for (size_t i = 0; i < n; ++i) {
    std::string body = fmt::format("{} ws \":\" ws {}", properties[i].key, properties[i].value);
    if (i + 1 < n) {
      const std::string& rest = rules_[next[i + 1]].first;
      body += required_after[i + 1] ? fmt::format(R"( ws "," ws {})", rest)
                                    : fmt::format(R"( ( ws "," ws {} )?)", rest);
      if (!properties[i].required) body += " | " + rest;
    }
    MT_RETURN_IF_ERROR(SetRule(next[i], std::move(body), 0, ptr));
  }
  const std::string& first = rules_[next[0]].first;
  std::string body = required_after[0] ? fmt::format(R"("{{" ws {} ws "}}")", first)
                                       : fmt::format(R"("{{" ws ( {} ws )? "}}")", first);
  MT_RETURN_IF_ERROR(SetRule(object_index, std::move(body), 0, ptr));
  return object_name;
}

Result<std::string> Converter::VisitArray(const Json& schema, const std::string& ptr,
                                          Bound min_items, Bound max_items, int depth) {
  const int64_t lo = min_items.value;
  const int64_t hi = max_items.present ? max_items.value : -1;
  Use(kWs);
  if (hi == 0) return AddRule("array", R"("[" ws "]")", 0, ptr);
  std::string item;
  if (const auto it = schema.find("items"); it != schema.end()) {
    item = MT_TRY(VisitGuarded(*it, ptr + "/items", depth + 1));
  } else {
    item = Use(kValue);
  }
  if (!min_items.present && !max_items.present && item == kPrims[kValue].name) {
    return Use(kArray);
  }
  // The first item, then (n-1) more each after a comma.
  const int64_t more_lo = lo > 0 ? lo - 1 : 0;
  const int64_t more_hi = hi < 0 ? -1 : hi - 1;
  std::string items = item;
  if (more_hi != 0) {
    items += fmt::format(R"( ( ws "," ws {} ){})", item, RepeatSuffix(more_lo, more_hi));
  }
  const size_t copies = static_cast<size_t>(std::max(more_lo, more_hi));
  std::string body = lo > 0 ? fmt::format(R"("[" ws {} ws "]")", items)
                            : fmt::format(R"("[" ws ( {} ws )? "]")", items);
  return AddRule("array", std::move(body), copies * kItemCopyCost, ptr);
}

Result<std::string> Converter::VisitString(const std::string& ptr, Bound min_length,
                                           Bound max_length) {
  const int64_t lo = min_length.value;
  const int64_t hi = max_length.present ? max_length.value : -1;
  if (lo == 0 && hi < 0) return Use(kString);
  if (hi == 0) return AddRule("string", R"("\"\"")", 0, ptr);
  const std::string body = fmt::format(R"("\"" {}{} "\"")", Use(kChar), RepeatSuffix(lo, hi));
  const size_t copies = static_cast<size_t>(std::max(lo, hi));
  return AddRule("string", body, copies * kCharCopyCost, ptr);
}

}  // namespace

std::string JsonGbnf() { return Emit(kPrims[kObject].name, {}, Bit(kObject)); }

Result<std::string> JsonSchemaToGbnf(const nlohmann::ordered_json& schema) {
  Converter c(schema);
  std::string root = MT_TRY(c.Run());
  return Emit(root, c.rules(), c.prims_used());
}

Result<std::string> JsonSchemasToGbnf(std::span<const nlohmann::ordered_json> schemas,
                                      std::span<const std::string> names,
                                      std::string_view root_body) {
  MT_CHECK(schemas.size() == names.size());
  std::vector<std::pair<std::string, std::string>> rules;
  uint32_t used = 0;
  for (size_t i = 0; i < schemas.size(); ++i) {
    Converter c(schemas[i], fmt::format("s{}-", i));
    std::string expr = MT_TRY(c.Run());
    rules.emplace_back(names[i], std::move(expr));
    rules.insert(rules.end(), c.rules().begin(), c.rules().end());
    used |= c.prims_used();
  }
  return Emit(root_body, rules, used);
}

Result<std::string> JsonSchemaToGbnf(const nlohmann::json& schema) {
  return JsonSchemaToGbnf(nlohmann::ordered_json(schema));
}

}  // namespace mt::grammar
