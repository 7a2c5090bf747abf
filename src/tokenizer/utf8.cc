#include "tokenizer/utf8.h"

#include <utf8proc.h>

#include <array>
#include <cstdlib>

namespace mt::utf8 {

size_t ValidSequenceLength(std::string_view text, size_t pos) {
  const auto b = [&](size_t i) { return static_cast<uint8_t>(text[pos + i]); };
  const size_t left = text.size() - pos;
  const uint8_t b0 = b(0);
  if (b0 < 0x80) return 1;
  size_t len;
  char32_t min;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2;
    min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3;
    min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4;
    min = 0x10000;
  } else {
    return 0;
  }
  if (left < len) return 0;
  for (size_t i = 1; i < len; ++i) {
    if ((b(i) & 0xC0) != 0x80) return 0;
  }
  const char32_t cp = DecodeAt(text, pos, len);
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

char32_t DecodeAt(std::string_view text, size_t pos, size_t len) {
  const auto b = [&](size_t i) {
    return static_cast<char32_t>(static_cast<uint8_t>(text[pos + i]));
  };
  switch (len) {
    case 1:
      return b(0);
    case 2:
      return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3:
      return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default:
      return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

void Append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string Encode(char32_t cp) {
  std::string s;
  Append(s, cp);
  return s;
}

bool IsValid(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    const size_t len = ValidSequenceLength(text, pos);
    if (len == 0) return false;
    pos += len;
  }
  return true;
}

size_t CompletePrefixLength(std::string_view text) {
  // Look back at most 3 bytes for the start of a sequence that is still incomplete.
  const size_t n = text.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const uint8_t c = static_cast<uint8_t>(text[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = 0;
    if ((c & 0xE0) == 0xC0) {
      need = 2;
    } else if ((c & 0xF0) == 0xE0) {
      need = 3;
    } else if ((c & 0xF8) == 0xF0) {
      need = 4;
    }
    if (need > back) {
      // Incomplete; hold it back only if the bytes so far could still become valid.
      std::string probe(text.substr(n - back));
      // Complete it with the smallest continuation bytes and check validity of the prefix
      // form by testing both extremes of the next continuation byte.
      for (uint8_t fill : {uint8_t{0x80}, uint8_t{0xBF}}) {
        std::string t = probe;
        while (t.size() < need) t.push_back(static_cast<char>(fill));
        if (ValidSequenceLength(t, 0) == need) return n - back;
      }
    }
    return n;
  }
  return n;
}

std::string Nfc(std::string_view text) {
  bool ascii = true;
  for (char c : text) ascii = ascii && static_cast<uint8_t>(c) < 0x80;
  if (ascii) return std::string(text);  // ASCII is always NFC
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = pos;
    while (end < text.size()) {
      const size_t len = utf8::ValidSequenceLength(text, end);
      if (len == 0) break;
      end += len;
    }
    if (end > pos) {
      utf8proc_uint8_t* normalized = nullptr;
      const utf8proc_ssize_t n = utf8proc_map(
          reinterpret_cast<const utf8proc_uint8_t*>(text.data() + pos), end - pos, &normalized,
          static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
      if (n >= 0) {
        out.append(reinterpret_cast<const char*>(normalized), n);
      } else {
        out.append(text.substr(pos, end - pos));  // cannot happen for valid UTF-8
      }
      std::free(normalized);
      pos = end;
    }
    if (pos < text.size() && utf8::ValidSequenceLength(text, pos) == 0) out.push_back(text[pos++]);
  }
  return out;
}

namespace {

struct ByteMaps {
  std::array<char32_t, 256> to_unicode{};
  std::array<int16_t, 512> to_byte{};  // code points below 0x200 only
  ByteMaps() {
    to_byte.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      to_unicode[b] = printable ? static_cast<char32_t>(b) : next++;
      to_byte[to_unicode[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteMaps& Maps() {
  static const ByteMaps maps;
  return maps;
}

}  // namespace

char32_t ByteToUnicode(uint8_t byte) { return Maps().to_unicode[byte]; }

int UnicodeToByte(char32_t cp) { return cp < 512 ? Maps().to_byte[cp] : -1; }

std::string BytesToByteLevel(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) Append(out, ByteToUnicode(static_cast<uint8_t>(c)));
  return out;
}

bool ByteLevelToBytes(std::string_view text, std::string& out) {
  for (size_t pos = 0; pos < text.size();) {
    const size_t len = ValidSequenceLength(text, pos);
    if (len == 0) return false;
    const int b = UnicodeToByte(DecodeAt(text, pos, len));
    if (b < 0) return false;
    out.push_back(static_cast<char>(b));
    pos += len;
  }
  return true;
}

}  // namespace mt::utf8
