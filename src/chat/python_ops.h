// Python's semantics, as Jinja2 templates see them through their values: str methods per
// code point (strip, split, case mapping), type names in error messages, iteration,
// ordering and slicing; and the small vocabulary the renderer and its builtins share
// (keyword arguments, render errors).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/heap.h"
#include "chat/value.h"

namespace kvgate::chat {

// Keyword arguments of a call; names are the template's.
using Kwargs = std::vector<std::pair<std::string_view, Value>>;

// A render fails with this; its message is Jinja2's (or Python's) for the same mistake.
struct RenderError {
  std::string message;
};
[[noreturn]] void Fail(std::string message);

// Whether `s` is the literal `lit`, with a compile-time length (a few instructions).
template <size_t N>
bool Is(std::string_view s, const char (&lit)[N]) {
  return s.size() == N - 1 && std::memcmp(s.data(), lit, N - 1) == 0;
}

// ---------- str, per code point ----------
inline size_t CodePointLength(unsigned char lead) {
  if (lead >= 0xF0) return 4;
  if (lead >= 0xE0) return 3;
  if (lead >= 0xC0) return 2;
  return 1;
}
std::vector<std::string> CodePoints(std::string_view s);
int32_t Decode(std::string_view code_point);
bool PyIsSpace(int32_t c);
// str.strip / lstrip / rstrip: whitespace by default, else any code point of `chars`.
// The result views `s`.
std::string_view Strip(std::string_view s, const Value* chars, bool left, bool right);
std::string MapCase(std::string_view s, bool upper);  // str.upper / str.lower
// str.split / rsplit; the parts view `s`.
List Split(std::string_view s, const Value* sep, int64_t maxsplit, bool from_right);
std::string Replace(std::string_view s, std::string_view from, std::string_view to, int64_t count);
std::string Capitalize(std::string_view s);
std::string Title(std::string_view s);  // str.title: after any uncased character
// str.center / ljust / rjust(width, fill) and zfill(width) (kZero: '0's after the sign):
// `s` padded with `fill` to `width` code points; as it is when already that wide.
enum class Justify { kCenter, kLeft, kRight, kZero };
std::string JustifyText(std::string_view s, int64_t width, std::string_view fill, Justify how);
std::string JinjaTitle(std::string_view s);  // the title filter: after whitespace - ( { [ <
// Python's `format % args`, or `format % mapping` when `mapping` (a dict) is given.
std::string PercentFormat(std::string_view format, const List& args, const Value* mapping);
// JSON text with every non-ASCII character escaped as backslash-u XXXX (ensure_ascii).
std::string EscapeNonAscii(std::string_view json);

// ---------- values ----------
std::string KindName(const Value& v);  // Python's type name: "str", "dict", "NoneType"...
// How Jinja2's errors name a value's type: "None", else "dict object", "str object"...
std::string ObjectTypeRepr(const Value& v);
List Iterate(const Value& v);                 // list items, dict keys, string characters
int Compare(const Value& a, const Value& b);  // <0, 0, >0; Python's TypeError otherwise
inline int64_t NormalizeIndex(int64_t i, size_t size) {
  return i < 0 ? i + static_cast<int64_t>(size) : i;
}
// `item in container`.
bool Contains(const Value& container, const Value& item);
// The characters of str(v), living as long as the heap.
std::string_view TextOf(Heap& heap, const Value& v);

// ---------- arguments ----------
const Value* Kwarg(Kwargs& kwargs, std::string_view name);
// Positional-or-keyword argument `index`/`name`; null when absent.
const Value* Arg(List& args, Kwargs& kwargs, size_t index, std::string_view name);

}  // namespace kvgate::chat
