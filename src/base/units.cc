#include "base/units.h"

#include <cctype>
#include <charconv>
#include <cmath>

namespace mt {

std::string HumanBytes(uint64_t bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return fmt::format("{} B", bytes);
  return fmt::format("{:.{}f} {}", v, u >= 3 ? 2 : 1, kUnits[u]);
}

Result<uint64_t> ParseBytes(std::string_view text) {
  std::string_view s = text;
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  size_t n = 0;
  while (n < s.size() && (std::isdigit(static_cast<unsigned char>(s[n])) || s[n] == '.')) ++n;
  if (n == 0) return InvalidArgument("'{}' is not a size (e.g. 512M, 2G)", text);
  double value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + n, value);
  if (ec != std::errc() || end != s.data() + n) {
    return InvalidArgument("'{}' is not a size (e.g. 512M, 2G)", text);
  }
  std::string unit;
  for (char c : s.substr(n)) unit += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.ends_with("B")) unit.pop_back();
  if (unit.ends_with("I")) unit.pop_back();
  double mult = 0;
  if (unit.empty())
    mult = 1;
  else if (unit == "K")
    mult = 1024.0;
  else if (unit == "M")
    mult = 1024.0 * 1024;
  else if (unit == "G")
    mult = 1024.0 * 1024 * 1024;
  else if (unit == "T")
    mult = 1024.0 * 1024 * 1024 * 1024;
  else
    return InvalidArgument("'{}': unknown size unit (use K, M, G or T)", text);
  double bytes = value * mult;
  if (!std::isfinite(bytes) || bytes >= 1.8e19) return OutOfRange("'{}' is too large", text);
  return static_cast<uint64_t>(std::llround(bytes));
}

}  // namespace mt
