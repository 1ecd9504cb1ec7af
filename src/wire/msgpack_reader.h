// A bounds-checked pull reader over msgpack bytes: typed reads at a cursor, and Skip() for
// values the caller does not need. Written by hand because msgpack-cxx's visitor parser
// tops out near 280 MB/s on KV-event payloads (bench/decode_bench), a quarter of what the
// decoder needs; a cursor lets the token-id loop read ids straight into their final storage.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace kvgate::wire {

enum class MsgType : uint8_t {
  kNil,
  kBool,
  kUint,
  kInt,
  kFloat,
  kStr,
  kBin,
  kArray,
  kMap,
  kExt,
  kInvalid
};

class MsgpackReader {
 public:
  explicit MsgpackReader(std::string_view data)
      : p_(reinterpret_cast<const uint8_t*>(data.data())), end_(p_ + data.size()), begin_(p_) {}

  size_t offset() const { return static_cast<size_t>(p_ - begin_); }
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }
  bool at_end() const { return p_ == end_; }
  void Seek(size_t offset) { p_ = begin_ + offset; }

  // Type of the next value, without consuming it. kInvalid at the end or on a reserved byte.
  MsgType Peek() const {
    if (p_ == end_) return MsgType::kInvalid;
    return TypeOf(*p_);
  }
  static MsgType TypeOf(uint8_t b) {
    if (b <= 0x7f || b == 0xcc || b == 0xcd || b == 0xce || b == 0xcf) return MsgType::kUint;
    if (b >= 0xe0 || (b >= 0xd0 && b <= 0xd3)) return MsgType::kInt;
    if (b >= 0x80 && b <= 0x8f) return MsgType::kMap;
    if (b >= 0x90 && b <= 0x9f) return MsgType::kArray;
    if ((b >= 0xa0 && b <= 0xbf) || (b >= 0xd9 && b <= 0xdb)) return MsgType::kStr;
    switch (b) {
      case 0xc0:
        return MsgType::kNil;
      case 0xc2:
      case 0xc3:
        return MsgType::kBool;
      case 0xc4:
      case 0xc5:
      case 0xc6:
        return MsgType::kBin;
      case 0xca:
      case 0xcb:
        return MsgType::kFloat;
      case 0xdc:
      case 0xdd:
        return MsgType::kArray;
      case 0xde:
      case 0xdf:
        return MsgType::kMap;
      case 0xc7:
      case 0xc8:
      case 0xc9:
      case 0xd4:
      case 0xd5:
      case 0xd6:
      case 0xd7:
      case 0xd8:
        return MsgType::kExt;
      default:
        return MsgType::kInvalid;  // 0xc1 (never used)
    }
  }

  // Each Read* returns false, consuming nothing, when the next value has another type or
  // is truncated.
  bool ReadNil() {
    if (p_ == end_ || *p_ != 0xc0) return false;
    ++p_;
    return true;
  }

  // Any integer: non-negative ones as `u` with `negative` false; negative ones as their
  // two's-complement bits with `negative` true.
  bool ReadInteger(uint64_t* u, bool* negative) {
    if (p_ == end_) return false;
    const uint8_t b = *p_;
    if (b <= 0x7f) {
      *u = b;
      *negative = false;
      ++p_;
      return true;
    }
    if (b >= 0xe0) {
      *u = static_cast<uint64_t>(static_cast<int64_t>(static_cast<int8_t>(b)));
      *negative = true;
      ++p_;
      return true;
    }
    size_t width;
    bool is_signed;
    switch (b) {
      case 0xcc:
        width = 1, is_signed = false;
        break;
      case 0xcd:
        width = 2, is_signed = false;
        break;
      case 0xce:
        width = 4, is_signed = false;
        break;
      case 0xcf:
        width = 8, is_signed = false;
        break;
      case 0xd0:
        width = 1, is_signed = true;
        break;
      case 0xd1:
        width = 2, is_signed = true;
        break;
      case 0xd2:
        width = 4, is_signed = true;
        break;
      case 0xd3:
        width = 8, is_signed = true;
        break;
      default:
        return false;
    }
    if (remaining() < 1 + width) return false;
    uint64_t v = BigEndian(p_ + 1, width);
    if (is_signed && width < 8 && (v >> (8 * width - 1))) v |= ~uint64_t{0} << (8 * width);
    *u = v;
    *negative = is_signed && static_cast<int64_t>(v) < 0;
    p_ += 1 + width;
    return true;
  }

  bool ReadNumber(double* d) {
    if (p_ == end_) return false;
    if (*p_ == 0xca && remaining() >= 5) {
      const uint32_t bits = static_cast<uint32_t>(BigEndian(p_ + 1, 4));
      float f;
      std::memcpy(&f, &bits, 4);
      *d = f;
      p_ += 5;
      return true;
    }
    if (*p_ == 0xcb && remaining() >= 9) {
      const uint64_t bits = BigEndian(p_ + 1, 8);
      std::memcpy(d, &bits, 8);
      p_ += 9;
      return true;
    }
    uint64_t u;
    bool negative = false;
    if (!ReadInteger(&u, &negative)) return false;
    *d = negative ? static_cast<double>(static_cast<int64_t>(u)) : static_cast<double>(u);
    return true;
  }

  bool ReadStr(std::string_view* s) { return ReadBytes(MsgType::kStr, s); }
  bool ReadBin(std::string_view* s) { return ReadBytes(MsgType::kBin, s); }

  bool ReadArrayHeader(uint32_t* n) { return ReadContainer(0x90, 0xdc, n); }
  bool ReadMapHeader(uint32_t* n) { return ReadContainer(0x80, 0xde, n); }

  // Skips one whole value, however deeply nested, without recursion.
  bool Skip() {
    uint64_t pending = 1;
    while (pending > 0) {
      if (p_ == end_) return false;
      const uint8_t b = *p_;
      --pending;
      uint32_t n;
      if (ReadArrayHeader(&n)) {
        pending += n;
        continue;
      }
      if (ReadMapHeader(&n)) {
        pending += uint64_t{n} * 2;
        continue;
      }
      const size_t size = ScalarSize(b);
      if (size == 0 || size > remaining()) return false;
      p_ += size;
    }
    return true;
  }

  // Unchecked access for hot loops that checked `remaining()` themselves.
  const uint8_t* cursor() const { return p_; }
  void Advance(size_t n) { p_ += n; }

  static uint64_t BigEndian(const uint8_t* p, size_t width) {
    uint64_t v = 0;
    for (size_t i = 0; i < width; ++i) v = (v << 8) | p[i];
    return v;
  }

 private:
  bool ReadBytes(MsgType type, std::string_view* s) {
    if (p_ == end_ || TypeOf(*p_) != type) return false;
    const uint8_t b = *p_;
    size_t header, length;
    if (b >= 0xa0 && b <= 0xbf) {
      header = 1;
      length = b & 0x1f;
    } else {
      const size_t width = (b == 0xd9 || b == 0xc4) ? 1 : (b == 0xda || b == 0xc5) ? 2 : 4;
      if (remaining() < 1 + width) return false;
      header = 1 + width;
      length = BigEndian(p_ + 1, width);
    }
    if (remaining() - header < length) return false;
    *s = std::string_view(reinterpret_cast<const char*>(p_ + header), length);
    p_ += header + length;
    return true;
  }

  bool ReadContainer(uint8_t fix_base, uint8_t wide16, uint32_t* n) {
    if (p_ == end_) return false;
    const uint8_t b = *p_;
    if (b >= fix_base && b <= fix_base + 0x0f) {
      *n = b & 0x0f;
      ++p_;
      return true;
    }
    if (b != wide16 && b != wide16 + 1) return false;
    const size_t width = b == wide16 ? 2 : 4;
    if (remaining() < 1 + width) return false;
    *n = static_cast<uint32_t>(BigEndian(p_ + 1, width));
    p_ += 1 + width;
    return true;
  }

  // Total size of a non-container value starting with `b` (0 if unknown or truncated
  // header; the caller checks the size against what remains).
  size_t ScalarSize(uint8_t b) const {
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) return 1;
    if (b >= 0xa0 && b <= 0xbf) return 1 + (b & 0x1f);
    auto sized = [&](size_t width, size_t extra) -> size_t {
      if (remaining() < 1 + width) return 0;
      return 1 + width + extra + BigEndian(p_ + 1, width);
    };
    switch (b) {
      case 0xcc:
      case 0xd0:
        return 2;
      case 0xcd:
      case 0xd1:
        return 3;
      case 0xce:
      case 0xd2:
      case 0xca:
        return 5;
      case 0xcf:
      case 0xd3:
      case 0xcb:
        return 9;
      case 0xd4:
        return 3;
      case 0xd5:
        return 4;
      case 0xd6:
        return 6;
      case 0xd7:
        return 10;
      case 0xd8:
        return 18;
      case 0xc4:
      case 0xd9:
        return sized(1, 0);
      case 0xc5:
      case 0xda:
        return sized(2, 0);
      case 0xc6:
      case 0xdb:
        return sized(4, 0);
      case 0xc7:
        return sized(1, 1);
      case 0xc8:
        return sized(2, 1);
      case 0xc9:
        return sized(4, 1);
      default:
        return 0;
    }
  }

  const uint8_t* p_;
  const uint8_t* end_;
  const uint8_t* begin_;
};

}  // namespace kvgate::wire
