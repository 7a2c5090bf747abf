// API keys for `moetier serve` (--api-key, --api-key-file): a request to any endpoint but
// /health and the chat page must carry "Authorization: Bearer KEY" with one of them.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace mt::server {

// Keys of a key file's text: one per line; leading and trailing whitespace is trimmed,
// blank lines and lines starting with '#' are skipped. Errors (naming `path` and the line):
// a key with a byte outside printable ASCII or a space inside it, a text with no key.
Result<std::vector<std::string>> ParseApiKeys(std::string_view text, const std::string& path);

// ParseApiKeys of the file at `path`; a missing or unreadable file is an error naming it.
Result<std::vector<std::string>> ReadApiKeyFile(const std::string& path);

// Checks one key given on the command line (`flag` names it in the error): not empty,
// printable ASCII, no spaces.
Status CheckApiKey(std::string_view key, std::string_view flag);

// Whether `given` equals one of `keys`. The time taken depends only on the keys' lengths:
// every byte of every key is compared, with no early exit on the first difference or the
// first match, so timing tells a client nothing about how close a guess came.
bool ApiKeyMatches(std::string_view given, std::span<const std::string> keys);

// The token of an Authorization header value "Bearer TOKEN" (the scheme in any case);
// empty when the value has another form.
std::string_view BearerToken(std::string_view authorization);

// Whether `host` (as --host takes it) names only this machine: "localhost", 127.0.0.0/8 or
// ::1. Serving anything else without a key deserves a warning.
bool IsLoopbackHost(std::string_view host);

}  // namespace mt::server
