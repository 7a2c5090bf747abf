// Human-readable sizes, and parsing of size arguments like "2G" or "512MiB".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace mt {

// "17.12 GiB", "512.0 KiB", "37 B": binary units, 2 decimals above 1 GiB.
std::string HumanBytes(uint64_t bytes);

// Parses "123", "4K", "1.5G", "512MiB", "2GB" (K/M/G/T with optional "i" and "B", all
// binary multiples as llama.cpp's --split-max-size does). Errors name the text.
Result<uint64_t> ParseBytes(std::string_view text);

}  // namespace mt
