// UTF-8 helpers and GPT-2's byte <-> unicode map used by byte-level BPE vocabularies.
// All functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace mt::utf8 {

inline constexpr char32_t kReplacement = 0xFFFD;

// Length in bytes of the UTF-8 sequence starting at text[pos], or 0 when the bytes there
// are not a valid, shortest-form sequence of a scalar value (no surrogates, <= U+10FFFF).
// `pos` must be < text.size().
size_t ValidSequenceLength(std::string_view text, size_t pos);

// Decodes the valid sequence of `len` bytes (from ValidSequenceLength) at text[pos].
char32_t DecodeAt(std::string_view text, size_t pos, size_t len);

// Appends the UTF-8 encoding of `cp` (must be a scalar value).
void Append(std::string& out, char32_t cp);
std::string Encode(char32_t cp);

// True when every byte of `text` belongs to a valid UTF-8 sequence.
bool IsValid(std::string_view text);

// Length of the longest prefix of `text` that ends on a complete UTF-8 sequence boundary
// (a trailing incomplete-but-so-far-valid sequence of up to 3 bytes is excluded). Invalid
// bytes count as complete: they can never be completed by later bytes.
size_t CompletePrefixLength(std::string_view text);

// Unicode NFC (utf8proc) of each maximal valid UTF-8 run of `text`; invalid bytes are
// copied unchanged. ASCII text is returned as is.
std::string Nfc(std::string_view text);

// GPT-2's reversible map from bytes to printable code points: the bytes '!'..'~',
// 0xA1..0xAC and 0xAE..0xFF map to themselves; the other 68 bytes, in ascending order,
// map to U+0100, U+0101, ... (so ' ' -> U+0120 'Ġ', '\n' -> U+010A 'Ċ').
char32_t ByteToUnicode(uint8_t byte);
// The inverse; -1 for a code point that is not in the map.
int UnicodeToByte(char32_t cp);

// Maps raw bytes to their byte-level token text (UTF-8 of ByteToUnicode of each byte).
std::string BytesToByteLevel(std::string_view bytes);
// Maps byte-level token text back to raw bytes. Returns false when `text` is not valid
// UTF-8 or holds a code point outside the map (the text is then not a byte-level token).
bool ByteLevelToBytes(std::string_view text, std::string& out);

}  // namespace mt::utf8
