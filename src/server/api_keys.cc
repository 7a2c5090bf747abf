#include "server/api_keys.h"

#include <arpa/inet.h>

#include "base/file_io.h"

namespace mt::server {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

// Keys travel in an HTTP header as a bearer token: visible ASCII, no spaces.
bool ValidKeyBytes(std::string_view key) {
  for (char c : key) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

// Whether `given` equals `key`, looking at every byte of `key` whatever `given` holds. The
// bytes are read through volatile pointers so that the compiler cannot turn the loop into
// one that stops at the first difference.
bool EqualInConstantTime(std::string_view given, std::string_view key) {
  const volatile unsigned char* k = reinterpret_cast<const unsigned char*>(key.data());
  const volatile unsigned char* g = reinterpret_cast<const unsigned char*>(given.data());
  unsigned diff = given.size() == key.size() ? 0u : 1u;
  for (size_t i = 0; i < key.size(); ++i) {
    const unsigned char gi = i < given.size() ? g[i] : 0;
    diff |= static_cast<unsigned>(gi ^ k[i]);
  }
  return diff == 0;
}

}  // namespace

Result<std::vector<std::string>> ParseApiKeys(std::string_view text, const std::string& path) {
  std::vector<std::string> keys;
  size_t line_no = 0;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    const std::string_view line = Trim(text.substr(0, end));
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    ++line_no;
    if (line.empty() || line.front() == '#') continue;
    if (!ValidKeyBytes(line)) {
      return InvalidArgument(
          "{}:{}: an API key must be printable ASCII without spaces (one key per line)", path,
          line_no);
    }
    keys.emplace_back(line);
  }
  if (keys.empty()) {
    return InvalidArgument("{}: no API key in the file (one key per line; # starts a comment)",
                           path);
  }
  return keys;
}

Result<std::vector<std::string>> ReadApiKeyFile(const std::string& path) {
  Result<std::string> text = ReadWholeFile(path);
  if (!text.ok()) return text.status().WithContext("--api-key-file");
  return ParseApiKeys(text.value(), path);
}

Status CheckApiKey(std::string_view key, std::string_view flag) {
  if (key.empty()) return InvalidArgument("{}: the key is empty", flag);
  if (!ValidKeyBytes(key)) {
    return InvalidArgument("{}: an API key must be printable ASCII without spaces", flag);
  }
  return Status::Ok();
}

bool ApiKeyMatches(std::string_view given, std::span<const std::string> keys) {
  bool match = false;
  for (const std::string& key : keys) match |= EqualInConstantTime(given, key);
  return match;
}

std::string_view BearerToken(std::string_view authorization) {
  constexpr std::string_view kScheme = "bearer ";
  if (authorization.size() < kScheme.size()) return {};
  for (size_t i = 0; i < kScheme.size(); ++i) {
    const char c = authorization[i];
    if ((c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c) != kScheme[i]) return {};
  }
  return Trim(authorization.substr(kScheme.size()));
}

bool IsLoopbackHost(std::string_view host) {
  if (host == "localhost" || host == "::1" || host == "[::1]") return true;
  in_addr v4{};
  const std::string h(host);
  return inet_pton(AF_INET, h.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

}  // namespace mt::server
