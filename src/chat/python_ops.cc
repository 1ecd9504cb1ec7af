#include "chat/python_ops.h"

#include <fmt/format.h>
#include <utf8proc.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace kvgate::chat {

void Fail(std::string message) { throw RenderError{std::move(message)}; }

std::vector<std::string> CodePoints(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const size_t n = CodePointLength(static_cast<unsigned char>(s[i]));
    out.emplace_back(s.substr(i, n));
    i += n;
  }
  return out;
}

int32_t Decode(std::string_view cp) {
  utf8proc_int32_t c = -1;
  utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(cp.data()),
                   static_cast<utf8proc_ssize_t>(cp.size()), &c);
  return c;
}

bool PyIsSpace(int32_t c) {
  if (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F) || c == 0x85) return true;
  if (c < 0x80) return false;
  const auto cat = utf8proc_category(c);
  return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

std::string_view Strip(std::string_view s, const Value* chars, bool left, bool right) {
  const bool custom = chars && chars->is_string();
  auto strip_it = [&](std::string_view cp) {
    if (custom) {
      for (size_t i = 0; i < chars->text.size();) {
        const size_t n = CodePointLength(static_cast<unsigned char>(chars->text[i]));
        if (chars->text.compare(i, n, cp) == 0) return true;
        i += n;
      }
      return false;
    }
    return PyIsSpace(Decode(cp));
  };
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e) {
      const size_t n = std::min(CodePointLength(static_cast<unsigned char>(s[b])), e - b);
      if (!strip_it(s.substr(b, n))) break;
      b += n;
    }
  }
  if (right) {
    while (e > b) {
      size_t start = e - 1;
      while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      if (!strip_it(s.substr(start, e - start))) break;
      e = start;
    }
  }
  return s.substr(b, e - b);
}

std::string MapCase(std::string_view s, bool upper) {
  std::string out;
  for (const std::string& cp : CodePoints(s)) {
    const int32_t c = Decode(cp);
    utf8proc_uint8_t buf[4];
    const auto n = utf8proc_encode_char(upper ? utf8proc_toupper(c) : utf8proc_tolower(c), buf);
    out.append(reinterpret_cast<char*>(buf), static_cast<size_t>(n));
  }
  return out;
}

List Split(std::string_view s, const Value* sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string_view> parts;
  if (sep == nullptr || sep->is_none() || !sep->defined()) {
    // Whitespace split: runs collapse, ends are ignored; past `maxsplit` splits the rest is
    // one part, as it stands in `s` (its inner and outer whitespace kept).
    std::vector<std::pair<size_t, size_t>> words;  // [begin, end) in bytes
    bool in_word = false;
    for (size_t i = 0; i < s.size();) {
      const size_t n = std::min(CodePointLength(static_cast<unsigned char>(s[i])), s.size() - i);
      const bool space = PyIsSpace(Decode(s.substr(i, n)));
      if (space && in_word) words.back().second = i, in_word = false;
      if (!space && !in_word) words.emplace_back(i, s.size()), in_word = true;
      i += n;
    }
    const size_t count = words.size();
    const size_t split = maxsplit < 0 ? count : std::min(count, static_cast<size_t>(maxsplit));
    if (split >= count) {
      for (const auto& [b, e] : words) parts.push_back(s.substr(b, e - b));
    } else if (!from_right) {
      for (size_t w = 0; w < split; ++w)
        parts.push_back(s.substr(words[w].first, words[w].second - words[w].first));
      parts.push_back(s.substr(words[split].first));
    } else {
      parts.push_back(s.substr(0, words[count - split - 1].second));
      for (size_t w = count - split; w < count; ++w)
        parts.push_back(s.substr(words[w].first, words[w].second - words[w].first));
    }
  } else {
    const std::string_view d = sep->text;
    if (d.empty()) Fail("empty separator");
    if (!from_right) {
      size_t start = 0;
      int64_t n = 0;
      for (size_t pos = s.find(d); pos != std::string_view::npos && (maxsplit < 0 || n < maxsplit);
           pos = s.find(d, start), ++n) {
        parts.push_back(s.substr(start, pos - start));
        start = pos + d.size();
      }
      parts.push_back(s.substr(start));
    } else {
      size_t end = s.size();
      int64_t n = 0;
      while (maxsplit < 0 || n < maxsplit) {
        if (end < d.size()) break;
        const size_t pos = s.rfind(d, end - d.size());
        if (pos == std::string_view::npos) break;
        parts.push_back(s.substr(pos + d.size(), end - pos - d.size()));
        end = pos;
        ++n;
      }
      parts.push_back(s.substr(0, end));
      std::reverse(parts.begin(), parts.end());
    }
  }
  List out;
  out.reserve(parts.size());
  for (std::string_view p : parts) out.push_back(Value::StringView(p));
  return out;
}

std::string JustifyText(std::string_view s, int64_t width, std::string_view fill, Justify how) {
  const int64_t length = static_cast<int64_t>(CodePoints(s).size());
  if (width <= length) return std::string(s);
  const int64_t total = width - length;
  auto repeat = [&](int64_t n) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += fill;
    return out;
  };
  switch (how) {
    case Justify::kCenter: {
      // Python puts the odd character left when the width is odd as well.
      const int64_t left = total / 2 + (total & width & 1);
      return repeat(left) + std::string(s) + repeat(total - left);
    }
    case Justify::kLeft:
      return std::string(s) + repeat(total);
    case Justify::kRight:
      return repeat(total) + std::string(s);
    case Justify::kZero: {
      const size_t sign = !s.empty() && (s[0] == '+' || s[0] == '-') ? 1 : 0;
      return std::string(s.substr(0, sign)) + repeat(total) + std::string(s.substr(sign));
    }
  }
  return std::string(s);
}

std::string JinjaTitle(std::string_view s) {
  std::string out;
  bool word_start = true;
  for (const std::string& cp : CodePoints(s)) {
    const int32_t c = Decode(cp);
    out += MapCase(cp, word_start);
    word_start = PyIsSpace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
  }
  return out;
}

namespace {

// One conversion of PercentFormat: %[flags][width][.precision]<type> applied to `v`.
struct PercentSpec {
  bool left = false, plus = false, space = false, alternate = false, zero = false;
  int width = 0, precision = -1;
  char type = 's';
};

std::string Pad(std::string body, const PercentSpec& spec, bool numeric) {
  const size_t length = CodePoints(body).size();
  if (spec.width <= 0 || length >= static_cast<size_t>(spec.width)) return body;
  const size_t fill = static_cast<size_t>(spec.width) - length;
  if (spec.left) return body + std::string(fill, ' ');
  if (spec.zero && numeric) {
    // Zeros go after the sign and the 0x/0o prefix.
    size_t at = body.find_first_not_of("+- ");
    if (at == std::string::npos) at = 0;
    if (spec.alternate && body.size() > at + 1 && body[at] == '0' && std::isalpha(body[at + 1]))
      at += 2;
    return body.insert(at, fill, '0');
  }
  return std::string(fill, ' ') + body;
}

std::string FormatOne(const PercentSpec& spec, const Value& v) {
  const char t = spec.type;
  if (t == 's' || t == 'r' || t == 'a') {
    std::string text = t == 's' ? v.Str() : v.Repr();
    if (spec.precision >= 0) {
      const auto cps = CodePoints(text);
      if (cps.size() > static_cast<size_t>(spec.precision)) {
        text.clear();
        for (int i = 0; i < spec.precision; ++i) text += cps[i];
      }
    }
    return Pad(text, spec, false);
  }
  const bool is_int = v.kind == Value::Kind::kInt || v.kind == Value::Kind::kBool;
  const int64_t as_int = v.kind == Value::Kind::kBool ? v.boolean : v.integer;
  std::string sign_flags = std::string(spec.plus ? "+" : "") + (spec.space ? " " : "");
  if (t == 'c') {
    if (v.is_string() && CodePoints(v.text).size() == 1)
      return Pad(std::string(v.text), spec, false);
    if (!is_int) Fail("%c requires int or char");
    std::string out;
    const int32_t c = static_cast<int32_t>(as_int);
    utf8proc_uint8_t buf[4];
    out.append(reinterpret_cast<char*>(buf), static_cast<size_t>(utf8proc_encode_char(c, buf)));
    return Pad(out, spec, false);
  }
  if (t == 'd' || t == 'i' || t == 'u' || t == 'x' || t == 'X' || t == 'o') {
    const bool decimal = t == 'd' || t == 'i' || t == 'u';
    int64_t n;
    if (is_int) {
      n = as_int;
    } else if (decimal && v.kind == Value::Kind::kFloat) {
      n = static_cast<int64_t>(v.number);
    } else {
      Fail(fmt::format("%{} format: {} is required, not {}", t,
                       decimal ? "a real number" : "an integer", KindName(v)));
    }
    std::string digits;
    const uint64_t magnitude = n < 0 ? -static_cast<uint64_t>(n) : static_cast<uint64_t>(n);
    if (decimal) digits = fmt::format("{}", magnitude);
    if (t == 'x') digits = fmt::format("{:x}", magnitude);
    if (t == 'X') digits = fmt::format("{:X}", magnitude);
    if (t == 'o') digits = fmt::format("{:o}", magnitude);
    if (spec.precision > static_cast<int>(digits.size())) {
      digits.insert(0, static_cast<size_t>(spec.precision) - digits.size(), '0');
    }
    if (spec.alternate && !decimal) digits.insert(0, t == 'o' ? "0o" : t == 'x' ? "0x" : "0X");
    const std::string sign = n < 0 ? "-" : spec.plus ? "+" : spec.space ? " " : "";
    return Pad(sign + digits, spec, true);
  }
  if (t == 'f' || t == 'F' || t == 'e' || t == 'E' || t == 'g' || t == 'G') {
    if (!v.is_number() && v.kind != Value::Kind::kBool) {
      Fail(fmt::format("must be real number, not {}", KindName(v)));
    }
    const double d = v.kind == Value::Kind::kBool ? v.boolean : v.AsDouble();
    const std::string c_spec = "%" + sign_flags + (spec.alternate ? "#" : "") + "." +
                               std::to_string(spec.precision < 0 ? 6 : spec.precision) + t;
    char buf[512];
    const int n = std::snprintf(buf, sizeof buf, c_spec.c_str(), d);
    return Pad(std::string(buf, static_cast<size_t>(std::clamp(n, 0, 511))), spec,
               std::isfinite(d));
  }
  Fail(fmt::format("unsupported format character '{}' (0x{:x})", t, static_cast<unsigned char>(t)));
}

}  // namespace

std::string PercentFormat(std::string_view format, const List& args, const Value* mapping) {
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (++i == format.size()) Fail("incomplete format");
    const Value* value = nullptr;
    if (format[i] == '(') {
      const size_t close = format.find(')', i);
      if (close == std::string_view::npos) Fail("incomplete format key");
      if (mapping == nullptr) Fail("format requires a mapping");
      const std::string_view key = format.substr(i + 1, close - i - 1);
      const Dict& d = *mapping->dict();
      auto it = std::find_if(d.begin(), d.end(), [&](const auto& kv) { return kv.first == key; });
      if (it == d.end()) Fail(Value::StringView(key).Repr());  // Python: KeyError(key)
      value = &it->second;
      i = close + 1;
    }
    PercentSpec spec;
    for (; i < format.size() && std::strchr("-+ #0", format[i]); ++i) {
      spec.left |= format[i] == '-';
      spec.plus |= format[i] == '+';
      spec.space |= format[i] == ' ';
      spec.alternate |= format[i] == '#';
      spec.zero |= format[i] == '0';
    }
    auto number = [&](int& field) {
      if (i < format.size() && format[i] == '*') {
        if (next >= args.size()) Fail("not enough arguments for format string");
        field = static_cast<int>(args[next++].integer);
        ++i;
        return;
      }
      for (field = 0; i < format.size() && std::isdigit(static_cast<unsigned char>(format[i]));
           ++i) {
        field = std::min(field * 10 + (format[i] - '0'), 100000);
      }
    };
    number(spec.width);
    if (spec.width < 0) spec.left = true, spec.width = -spec.width;
    if (i < format.size() && format[i] == '.') {
      ++i;
      number(spec.precision);
    }
    while (i < format.size() && std::strchr("hlL", format[i])) ++i;
    if (i == format.size()) Fail("incomplete format");
    spec.type = format[i];
    if (spec.type == '%') {
      out += '%';
      continue;
    }
    if (value == nullptr) {
      if (mapping != nullptr) {
        value = mapping;  // (Python: a dict right of % is the one argument)
      } else {
        if (next >= args.size()) Fail("not enough arguments for format string");
        value = &args[next++];
      }
    }
    out += FormatOne(spec, *value);
  }
  if (mapping == nullptr && next < args.size()) {
    Fail("not all arguments converted during string formatting");
  }
  return out;
}

std::string EscapeNonAscii(std::string_view json) {
  std::string out;
  for (size_t i = 0; i < json.size();) {
    const unsigned char lead = static_cast<unsigned char>(json[i]);
    if (lead < 0x80) {
      out += json[i++];
      continue;
    }
    const size_t n = std::min(CodePointLength(lead), json.size() - i);
    int32_t c = Decode(json.substr(i, n));
    i += n;
    if (c >= 0x10000) {
      c -= 0x10000;
      out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (c >> 10), 0xDC00 + (c & 0x3FF));
    } else {
      out += fmt::format("\\u{:04x}", c);
    }
  }
  return out;
}

std::string ObjectTypeRepr(const Value& v) {
  return v.is_none() ? "None" : KindName(v) + " object";
}

std::string KindName(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return "list";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kCallable:
      return "function";
  }
  return "object";
}

List Iterate(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kList:
      return *v.list();
    case Value::Kind::kDict: {
      List keys;
      for (const auto& [k, x] : *v.dict()) keys.push_back(Value::StringView(k));
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      for (size_t i = 0; i < v.text.size();) {
        const size_t n =
            std::min(CodePointLength(static_cast<unsigned char>(v.text[i])), v.text.size() - i);
        chars.push_back(Value::StringView(v.text.substr(i, n)));
        i += n;
      }
      return chars;
    }
    case Value::Kind::kUndefined:
      return {};
    default:
      Fail(fmt::format("'{}' object is not iterable", KindName(v)));
  }
}

int Compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    return a.AsDouble() < b.AsDouble() ? -1 : a.AsDouble() > b.AsDouble() ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) return a.text < b.text ? -1 : a.text > b.text ? 1 : 0;
  if (a.kind == Value::Kind::kBool || b.kind == Value::Kind::kBool) {
    const double x = a.kind == Value::Kind::kBool ? a.boolean : a.AsDouble();
    const double y = b.kind == Value::Kind::kBool ? b.boolean : b.AsDouble();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  Fail(fmt::format("'<' not supported between instances of '{}' and '{}'", KindName(a),
                   KindName(b)));
}

const Value* Kwarg(Kwargs& kwargs, std::string_view name) {
  for (auto& [k, v] : kwargs) {
    if (k == name) return &v;
  }
  return nullptr;
}

const Value* Arg(List& args, Kwargs& kwargs, size_t index, std::string_view name) {
  if (index < args.size()) return &args[index];
  return Kwarg(kwargs, name);
}

std::string Replace(std::string_view s, std::string_view from, std::string_view to, int64_t count) {
  if (from.empty()) return std::string(s);
  std::string out;
  size_t last = 0;
  int64_t n = 0;
  for (size_t pos = s.find(from); pos != std::string::npos && (count < 0 || n < count);
       pos = s.find(from, last), ++n) {
    out.append(s, last, pos - last);
    out += to;
    last = pos + from.size();
  }
  out.append(s, last, std::string::npos);
  return out;
}

std::string Capitalize(std::string_view s) {
  const auto cps = CodePoints(s);
  if (cps.empty()) return std::string(s);
  std::string out = MapCase(cps[0], true);
  for (size_t i = 1; i < cps.size(); ++i) out += MapCase(cps[i], false);
  return out;
}

std::string Title(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (const std::string& cp : CodePoints(s)) {
    const int32_t c = Decode(cp);
    const auto cat = utf8proc_category(c);
    const bool cased =
        cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
    out += MapCase(cp, !prev_cased);
    prev_cased = cased;
  }
  return out;
}

bool Contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case Value::Kind::kString:
      return item.is_string() && container.text.find(item.text) != std::string::npos;
    case Value::Kind::kList:
      return std::any_of(container.list()->begin(), container.list()->end(),
                         [&](const Value& v) { return Equal(v, item); });
    case Value::Kind::kDict:
      return container.Get(item.Str()).defined();
    case Value::Kind::kUndefined:
      return false;
    default:
      Fail(fmt::format("argument of type '{}' is not iterable", KindName(container)));
  }
}

std::string_view TextOf(Heap& heap, const Value& v) {
  return v.is_string() ? v.text : heap.MakeString(v.Str()).text;
}

}  // namespace kvgate::chat
