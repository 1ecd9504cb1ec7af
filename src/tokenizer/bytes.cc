#include "tokenizer/bytes.h"

#include <utf8proc.h>

#include <array>
#include <cstdint>
#include <cstring>

namespace kvgate::tokenizer {
namespace {

struct ByteLevelTables {
  // byte -> UTF-8 of its char (code points below 0x200: one or two bytes)
  struct Utf8 {
    char bytes[2];
    uint8_t size;
  };
  std::array<Utf8, 256> to_char{};
  std::array<int, 0x200> to_byte{};  // codepoint -> byte, -1 if none
  ByteLevelTables() {
    to_byte.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const int cp = printable ? b : 256 + extra++;
      utf8proc_uint8_t buf[4];
      const auto n = utf8proc_encode_char(cp, buf);
      to_char[b] = {{static_cast<char>(buf[0]), static_cast<char>(n > 1 ? buf[1] : 0)},
                    static_cast<uint8_t>(n)};
      to_byte[cp] = b;
    }
  }
};
const ByteLevelTables& Tables() {
  static const ByteLevelTables tables;
  return tables;
}

}  // namespace

std::string BytesToByteLevel(std::string_view bytes) {
  const ByteLevelTables& t = Tables();
  std::string out(bytes.size() * 2, '\0');
  char* w = out.data();
  for (unsigned char b : bytes) {
    const ByteLevelTables::Utf8& c = t.to_char[b];
    w[0] = c.bytes[0];
    w[1] = c.bytes[1];
    w += c.size;
  }
  out.resize(static_cast<size_t>(w - out.data()));
  return out;
}

bool ByteLevelToBytes(std::string_view text, std::string& out) {
  const ByteLevelTables& t = Tables();
  utf8proc_int32_t cp;
  std::string bytes;
  for (size_t i = 0; i < text.size();) {
    const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + i),
                                    static_cast<utf8proc_ssize_t>(text.size() - i), &cp);
    if (n <= 0 || cp < 0 || cp >= static_cast<int>(t.to_byte.size()) || t.to_byte[cp] < 0) {
      return false;
    }
    bytes += static_cast<char>(t.to_byte[cp]);
    i += static_cast<size_t>(n);
  }
  out += bytes;
  return true;
}

bool IsValidUtf8(std::string_view text) {
  utf8proc_int32_t cp;
  for (size_t i = 0; i < text.size();) {
    // ASCII, 8 bytes at a time (most text is), then one character through utf8proc.
    uint64_t word;
    while (i + 8 <= text.size() && (std::memcpy(&word, text.data() + i, 8), true) &&
           (word & 0x8080808080808080ull) == 0) {
      i += 8;
    }
    if (i < text.size() && static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    if (i >= text.size()) break;
    const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + i),
                                    static_cast<utf8proc_ssize_t>(text.size() - i), &cp);
    if (n <= 0) return false;
    i += static_cast<size_t>(n);
  }
  return true;
}

std::string LossyUtf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = b[i];
    size_t need = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      need = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      need = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    }
    size_t k = 0;  // continuation bytes that fit
    while (k < need && i + 1 + k < n) {
      const unsigned char d = b[i + 1 + k];
      if (k == 0 ? (d < lo || d > hi) : (d & 0xC0) != 0x80) break;
      ++k;
    }
    if (need > 0 && k == need) {
      out.append(bytes.substr(i, need + 1));
    } else {
      out += "\xEF\xBF\xBD";
    }
    i += need > 0 && k == need ? need + 1 : 1 + k;
  }
  return out;
}

}  // namespace kvgate::tokenizer
