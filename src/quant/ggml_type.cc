#include "quant/ggml_type.h"

#include <array>
#include <cctype>

#include "base/check.h"

namespace mt {
namespace {

constexpr uint32_t kQK_K = 256;

struct Entry {
  uint32_t id;
  GgmlTypeTraits traits;
};

// Sizes follow the block structs in ggml-common.h; see the static_asserts there. The two
// flags: what moetier reads and computes with, and what it writes (quantizes).
constexpr std::array<Entry, 35> kTypes = {{
    {0, {"f32", 1, 4, true, true}},
    {1, {"f16", 1, 2, true, true}},
    {2, {"q4_0", 32, 2 + 16, true, true}},
    {3, {"q4_1", 32, 2 * 2 + 16, true, true}},
    {6, {"q5_0", 32, 2 + 4 + 16, true, true}},
    {7, {"q5_1", 32, 2 * 2 + 4 + 16, true, true}},
    {8, {"q8_0", 32, 2 + 32, true, true}},
    {9, {"q8_1", 32, 2 * 2 + 32}},
    {10, {"q2_K", kQK_K, 2 * 2 + kQK_K / 16 + kQK_K / 4, true, true}},
    {11, {"q3_K", kQK_K, 2 + kQK_K / 4 + kQK_K / 8 + 12, true, true}},
    {12, {"q4_K", kQK_K, 2 * 2 + 12 + kQK_K / 2, true, true}},
    {13, {"q5_K", kQK_K, 2 * 2 + 12 + kQK_K / 2 + kQK_K / 8, true, true}},
    {14, {"q6_K", kQK_K, 2 + kQK_K / 16 + 3 * kQK_K / 4, true, true}},
    {15, {"q8_K", kQK_K, 4 + kQK_K + kQK_K / 16 * 2}},
    {16, {"iq2_xxs", kQK_K, 2 + kQK_K / 8 * 2, true, true}},
    {17, {"iq2_xs", kQK_K, 2 + kQK_K / 8 * 2 + kQK_K / 32, true, true}},
    {18, {"iq3_xxs", kQK_K, 2 + 3 * kQK_K / 8, true, true}},
    {19, {"iq1_s", kQK_K, 2 + kQK_K / 8 + kQK_K / 16, true, true}},
    {20, {"iq4_nl", 32, 2 + 16, true, true}},
    {21, {"iq3_s", kQK_K, 2 + kQK_K / 4 + kQK_K / 32 + kQK_K / 8 + kQK_K / 64, true, true}},
    {22, {"iq2_s", kQK_K, 2 + kQK_K / 4 + kQK_K / 32 + kQK_K / 32, true, true}},
    {23, {"iq4_xs", kQK_K, 2 + 2 + kQK_K / 64 + kQK_K / 2, true, true}},
    {24, {"i8", 1, 1}},
    {25, {"i16", 1, 2}},
    {26, {"i32", 1, 4}},
    {27, {"i64", 1, 8}},
    {28, {"f64", 1, 8}},
    {29, {"iq1_m", kQK_K, kQK_K / 8 + kQK_K / 16 + kQK_K / 32, true, true}},
    {30, {"bf16", 1, 2, true, true}},
    {34, {"tq1_0", kQK_K, 2 + kQK_K / 64 + (kQK_K - 4 * kQK_K / 64) / 5}},
    {35, {"tq2_0", kQK_K, 2 + kQK_K / 4}},
    {39, {"mxfp4", 32, 1 + 16, true, true}},
    {40, {"nvfp4", 64, 64 / 16 + 64 / 2}},
    {41, {"q1_0", 128, 2 + 128 / 8}},
    {42, {"q2_0", 64, 2 + 64 / 4}},
}};

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  }
  return true;
}

}  // namespace

std::optional<GgmlTypeTraits> TraitsOfTypeId(uint32_t id) {
  for (const Entry& e : kTypes) {
    if (e.id == id) return e.traits;
  }
  return std::nullopt;
}

const GgmlTypeTraits& TraitsOf(GgmlType type) {
  for (const Entry& e : kTypes) {
    if (e.id == static_cast<uint32_t>(type)) return e.traits;
  }
  MT_CHECK_MSG(false, "GgmlType value outside the table");
}

std::optional<GgmlType> TypeFromName(std::string_view name) {
  for (const Entry& e : kTypes) {
    if (EqualsIgnoreCase(e.traits.name, name)) return static_cast<GgmlType>(e.id);
  }
  return std::nullopt;
}

}  // namespace mt
