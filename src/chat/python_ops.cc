#include "chat/python_ops.h"

#include <fmt/format.h>
#include <utf8proc.h>

#include <algorithm>

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

List Split(Heap& heap, std::string_view s, const Value* sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string_view> parts;
  if (sep == nullptr || sep->is_none() || !sep->defined()) {
    // Whitespace split: runs collapse, ends are ignored.
    size_t word = 0;
    bool in_word = false;
    for (size_t i = 0; i < s.size();) {
      const size_t n = std::min(CodePointLength(static_cast<unsigned char>(s[i])), s.size() - i);
      const bool space = PyIsSpace(Decode(s.substr(i, n)));
      if (space && in_word) parts.push_back(s.substr(word, i - word)), in_word = false;
      if (!space && !in_word) word = i, in_word = true;
      i += n;
    }
    if (in_word) parts.push_back(s.substr(word));
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) > maxsplit + 1) {
      // Rare in templates; rejoin the tail with single spaces (approximation of Python).
      const size_t joined_from = from_right ? 0 : static_cast<size_t>(maxsplit);
      const size_t joined_to = from_right ? parts.size() - maxsplit : parts.size();
      std::string rest;
      for (size_t i = joined_from; i < joined_to; ++i) {
        if (i > joined_from) rest += ' ';
        rest += parts[i];
      }
      const std::string_view joined = heap.MakeString(rest).text;
      parts.erase(parts.begin() + joined_from, parts.begin() + joined_to);
      parts.insert(parts.begin() + joined_from, joined);
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
