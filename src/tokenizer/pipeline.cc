#include "tokenizer/pipeline.h"

#include <algorithm>

#include "tokenizer/bytes.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <fmt/format.h>
#include <pcre2.h>
#include <utf8proc.h>

#include <array>
#include <boost/json.hpp>

namespace kvgate::tokenizer {
namespace {

namespace json = boost::json;

// ---------- regex ----------
class Regex {
 public:
  static Status Compile(const std::string& pattern, std::unique_ptr<Regex>* out) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                      PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &offset, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof message);
      return Status::Error(fmt::format("regex '{}' does not compile at {}: {}", pattern, offset,
                                       reinterpret_cast<char*>(message)));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if absent
    out->reset(new Regex(code));
    return Status::Ok();
  }
  ~Regex() { pcre2_code_free(code_); }

  // Calls f(start, end) for every non-empty match, left to right.
  template <typename F>
  void ForEachMatch(std::string_view text, F f) const {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
    size_t start = 0;
    while (start <= text.size()) {
      const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(),
                                 start, PCRE2_NO_UTF_CHECK, md, nullptr);
      if (rc < 0) break;
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      if (ov[1] == ov[0]) {  // empty match: step one char
        start = ov[1] + 1;
        while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) {
          ++start;
        }
        continue;
      }
      f(ov[0], ov[1]);
      start = ov[1];
    }
    pcre2_match_data_free(md);
  }

 private:
  explicit Regex(pcre2_code* code) : code_(code) {}
  pcre2_code* code_;
};

// ---------- normalizers ----------
class SequenceNormalizer : public Normalizer {
 public:
  std::vector<std::unique_ptr<Normalizer>> parts;
  void Apply(std::string& text) const override {
    for (const auto& p : parts) p->Apply(text);
  }
};

class UnicodeNormalizer : public Normalizer {
 public:
  // Text whose bytes are all below `first_changing_byte` is already normalized: ASCII for
  // every form, and for NFC everything below U+0300 (lead byte 0xCC), where combining marks
  // begin. Most prompts take this path and skip utf8proc entirely.
  UnicodeNormalizer(int options, unsigned char first_changing_byte)
      : options_(options), first_changing_byte_(first_changing_byte) {}
  void Apply(std::string& text) const override {
    if (std::all_of(text.begin(), text.end(), [this](char c) {
          return static_cast<unsigned char>(c) < first_changing_byte_;
        })) {
      return;
    }
    // Only the runs of non-ASCII characters (with the character before each, which a
    // combining mark may join) go through utf8proc: no ASCII character composes with what
    // precedes it or decomposes, so the text may be cut before any ASCII byte.
    std::string out;
    out.reserve(text.size());
    size_t copied = 0;
    for (size_t i = 0; i < text.size();) {
      if (static_cast<unsigned char>(text[i]) < 0x80) {
        ++i;
        continue;
      }
      size_t end = i;
      bool changes = false;
      while (end < text.size() && static_cast<unsigned char>(text[end]) >= 0x80) {
        changes |= static_cast<unsigned char>(text[end]) >= first_changing_byte_;
        ++end;
      }
      if (changes) {
        const size_t begin = i > copied ? i - 1 : i;  // (the ASCII character before it)
        out.append(text, copied, begin - copied);
        if (!Normalize(std::string_view(text).substr(begin, end - begin), out)) return;
        copied = end;
      }
      i = end;
    }
    if (copied == 0) return;
    out.append(text, copied, std::string::npos);
    text.swap(out);
  }

 private:
  // Appends the normalized `part`; false if utf8proc refused it (the text stays as it is).
  bool Normalize(std::string_view part, std::string& out) const {
    utf8proc_uint8_t* result = nullptr;
    const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(part.data()),
                                static_cast<utf8proc_ssize_t>(part.size()), &result,
                                static_cast<utf8proc_option_t>(options_));
    if (n >= 0) out.append(reinterpret_cast<char*>(result), static_cast<size_t>(n));
    std::free(result);
    return n >= 0;
  }

  int options_;
  unsigned char first_changing_byte_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  void Apply(std::string& text) const override {
    std::string out;
    out.reserve(text.size());
    utf8proc_int32_t cp;
    for (size_t i = 0; i < text.size();) {
      const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + i),
                                      static_cast<utf8proc_ssize_t>(text.size() - i), &cp);
      if (n <= 0) return;
      utf8proc_uint8_t buf[4];
      out.append(reinterpret_cast<char*>(buf), utf8proc_encode_char(utf8proc_tolower(cp), buf));
      i += static_cast<size_t>(n);
    }
    text.swap(out);
  }
};

class ReplaceNormalizer : public Normalizer {
 public:
  std::string literal;
  std::unique_ptr<Regex> regex;
  std::string content;
  void Apply(std::string& text) const override {
    std::string out;
    size_t last = 0;
    auto emit = [&](size_t start, size_t end) {
      out.append(text, last, start - last);
      out += content;
      last = end;
    };
    if (regex) {
      regex->ForEachMatch(text, emit);
    } else if (!literal.empty()) {
      for (size_t pos = text.find(literal); pos != std::string::npos;
           pos = text.find(literal, pos + literal.size())) {
        emit(pos, pos + literal.size());
      }
    }
    out.append(text, last, std::string::npos);
    text.swap(out);
  }
};

class PrependNormalizer : public Normalizer {
 public:
  std::string prepend;
  void Apply(std::string& text) const override {
    if (!text.empty()) text.insert(0, prepend);
  }
};

// Unicode White_Space, as Rust's char::is_whitespace.
bool IsWhiteSpace(int32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

class StripNormalizer : public Normalizer {
 public:
  bool left = true, right = true;
  void Apply(std::string& text) const override {
    std::vector<std::pair<size_t, int32_t>> cps;  // (byte offset, code point)
    for (size_t i = 0; i < text.size();) {
      utf8proc_int32_t cp;
      const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + i),
                                      static_cast<utf8proc_ssize_t>(text.size() - i), &cp);
      if (n <= 0) return;
      cps.emplace_back(i, cp);
      i += static_cast<size_t>(n);
    }
    size_t b = 0, e = cps.size();
    if (left) {
      while (b < e && IsWhiteSpace(cps[b].second)) ++b;
    }
    if (right) {
      while (e > b && IsWhiteSpace(cps[e - 1].second)) --e;
    }
    const size_t from = b < cps.size() ? cps[b].first : text.size();
    const size_t to = e < cps.size() ? cps[e].first : text.size();
    text = text.substr(from, to - from);
  }
};

// ---------- pre-tokenizers ----------
enum class Behavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Splits `text` at the given [start, end) matches according to `behavior`.
void SplitAt(std::string_view text, const std::vector<std::pair<size_t, size_t>>& matches,
             Behavior behavior, bool invert, std::vector<std::string>& out) {
  // Build (span, is_match) runs covering the text.
  std::vector<std::tuple<size_t, size_t, bool>> runs;
  size_t last = 0;
  for (auto [s, e] : matches) {
    if (s > last) runs.emplace_back(last, s, invert);
    runs.emplace_back(s, e, !invert);
    last = e;
  }
  if (last < text.size()) runs.emplace_back(last, text.size(), invert);
  std::string pending_next;  // MergedWithNext: a match waiting for what follows
  for (size_t i = 0; i < runs.size(); ++i) {
    auto [s, e, is_match] = runs[i];
    std::string_view part = text.substr(s, e - s);
    switch (behavior) {
      case Behavior::kIsolated:
        out.emplace_back(part);
        break;
      case Behavior::kRemoved:
        if (!is_match) out.emplace_back(part);
        break;
      case Behavior::kMergedWithPrevious:
        // A delimiter joins the piece before it, unless that piece is a delimiter too.
        if (is_match && i > 0 && !std::get<2>(runs[i - 1])) {
          out.back() += part;
        } else {
          out.emplace_back(part);
        }
        break;
      case Behavior::kMergedWithNext:
        // A delimiter joins the piece after it, unless that piece is a delimiter too.
        if (is_match && i + 1 < runs.size() && !std::get<2>(runs[i + 1])) {
          pending_next = std::string(part);
        } else {
          out.push_back(pending_next + std::string(part));
          pending_next.clear();
        }
        break;
      case Behavior::kContiguous:
        if (is_match && i > 0 && std::get<2>(runs[i - 1])) {
          out.back() += part;
        } else {
          out.emplace_back(part);
        }
        break;
    }
  }
}

// The pieces of an Isolated split: each match, and each run between matches.
void IsolatedSpans(const Regex& regex, std::string_view text,
                   std::vector<std::pair<uint32_t, uint32_t>>& spans) {
  size_t last = 0;
  regex.ForEachMatch(text, [&](size_t s, size_t e) {
    if (s > last) spans.emplace_back(last, s);
    spans.emplace_back(s, e);
    last = e;
  });
  if (last < text.size()) spans.emplace_back(last, text.size());
}

class SplitPreTokenizer : public PreTokenizer {
 public:
  std::unique_ptr<Regex> regex;
  std::string literal;
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;
  void Apply(std::vector<std::string>& pieces, bool) const override {
    std::vector<std::string> out;
    std::vector<std::pair<size_t, size_t>> matches;
    for (const std::string& p : pieces) {
      matches.clear();
      if (regex) {
        regex->ForEachMatch(p, [&](size_t s, size_t e) { matches.emplace_back(s, e); });
      } else if (!literal.empty()) {
        for (size_t pos = p.find(literal); pos != std::string::npos;
             pos = p.find(literal, pos + literal.size())) {
          matches.emplace_back(pos, pos + literal.size());
        }
      }
      SplitAt(p, matches, behavior, invert, out);
    }
    pieces.swap(out);
  }
  bool Cut(std::string_view text, std::vector<std::pair<uint32_t, uint32_t>>& spans,
           bool* byte_level) const override {
    if (!regex || behavior != Behavior::kIsolated || invert) return false;
    IsolatedSpans(*regex, text, spans);
    *byte_level = false;
    return true;
  }
};

constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  bool add_prefix_space = false;
  std::unique_ptr<Regex> regex;  // set when use_regex
  void Apply(std::vector<std::string>& pieces, bool) const override {
    std::vector<std::string> split;
    std::vector<std::pair<size_t, size_t>> matches;
    for (std::string& p : pieces) {
      if (add_prefix_space && !p.starts_with(' ')) p = " " + p;
      if (regex) {
        matches.clear();
        regex->ForEachMatch(p, [&](size_t s, size_t e) { matches.emplace_back(s, e); });
        SplitAt(p, matches, Behavior::kIsolated, false, split);
      } else {
        split.push_back(std::move(p));
      }
    }
    for (std::string& p : split) p = BytesToByteLevel(p);
    pieces.swap(split);
  }
  bool Cut(std::string_view text, std::vector<std::pair<uint32_t, uint32_t>>& spans,
           bool* byte_level) const override {
    if (add_prefix_space) return false;
    if (regex) {
      IsolatedSpans(*regex, text, spans);
    } else if (!text.empty()) {
      spans.emplace_back(0, text.size());
    }
    *byte_level = true;
    return true;
  }
  bool MapsBytesOnly() const override { return !add_prefix_space && !regex; }
};

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  std::string replacement = "\xE2\x96\x81";  // U+2581
  std::string prepend_scheme = "always";
  bool split = true;
  void Apply(std::vector<std::string>& pieces, bool sequence_start) const override {
    std::vector<std::string> out;
    for (size_t i = 0; i < pieces.size(); ++i) {
      std::string p;
      for (char c : pieces[i]) {
        if (c == ' ') {
          p += replacement;
        } else {
          p += c;
        }
      }
      const bool prepend =
          prepend_scheme == "always" || (prepend_scheme == "first" && sequence_start && i == 0);
      if (prepend && !p.starts_with(replacement)) p = replacement + p;
      if (!split) {
        out.push_back(std::move(p));
        continue;
      }
      std::vector<std::pair<size_t, size_t>> matches;
      for (size_t pos = p.find(replacement); pos != std::string::npos;
           pos = p.find(replacement, pos + replacement.size())) {
        matches.emplace_back(pos, pos + replacement.size());
      }
      SplitAt(p, matches, Behavior::kMergedWithNext, false, out);
    }
    pieces.swap(out);
  }
};

// Digits: Unicode numeric characters (Rust's char::is_numeric, i.e. \\p{N}), each alone or
// in runs.
class DigitsPreTokenizer : public PreTokenizer {
 public:
  std::unique_ptr<Regex> regex;
  bool individual = false;
  void Apply(std::vector<std::string>& pieces, bool) const override {
    std::vector<std::string> out;
    std::vector<std::pair<size_t, size_t>> matches;
    for (const std::string& p : pieces) {
      matches.clear();
      regex->ForEachMatch(p, [&](size_t s, size_t e) { matches.emplace_back(s, e); });
      SplitAt(p, matches, individual ? Behavior::kIsolated : Behavior::kContiguous, false, out);
    }
    pieces.swap(out);
  }
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  std::vector<std::unique_ptr<PreTokenizer>> parts;
  void Apply(std::vector<std::string>& pieces, bool sequence_start) const override {
    for (const auto& p : parts) p->Apply(pieces, sequence_start);
  }
  // One part cuts; after it, at most one maps bytes (Split then ByteLevel: Qwen, Llama 3).
  bool Cut(std::string_view text, std::vector<std::pair<uint32_t, uint32_t>>& spans,
           bool* byte_level) const override {
    if (parts.empty() || parts.size() > 2) return false;
    if (parts.size() == 2 && !parts[1]->MapsBytesOnly()) return false;
    if (!parts[0]->Cut(text, spans, byte_level)) return false;
    if (parts.size() == 2) {
      if (*byte_level) return false;  // mapped twice: not this shape
      *byte_level = true;
    }
    return true;
  }
};

}  // namespace

std::string StringField(const json::object& o, std::string_view key, std::string fallback) {
  const json::value* v = o.if_contains(key);
  return v && v->is_string() ? std::string(v->as_string()) : fallback;
}
bool BoolField(const json::object& o, std::string_view key, bool fallback) {
  const json::value* v = o.if_contains(key);
  return v && v->is_bool() ? v->as_bool() : fallback;
}

namespace {

// A Split/Replace "pattern": {"Regex": "..."} or {"String": "..."}.
Status ReadPattern(const json::object& o, std::unique_ptr<Regex>* regex, std::string* literal) {
  const json::value* pattern = o.if_contains("pattern");
  if (pattern == nullptr || !pattern->is_object()) return Status::Error("pattern missing");
  const json::object& p = pattern->as_object();
  if (p.contains("Regex")) return Regex::Compile(StringField(p, "Regex"), regex);
  *literal = StringField(p, "String");
  return Status::Ok();
}

// A split "behavior" (Split, Punctuation); Isolated when absent.
Status ReadBehavior(const json::object& o, Behavior* out) {
  const std::string behavior = StringField(o, "behavior", "Isolated");
  if (behavior == "Isolated") {
    *out = Behavior::kIsolated;
  } else if (behavior == "Removed") {
    *out = Behavior::kRemoved;
  } else if (behavior == "MergedWithPrevious") {
    *out = Behavior::kMergedWithPrevious;
  } else if (behavior == "MergedWithNext") {
    *out = Behavior::kMergedWithNext;
  } else if (behavior == "Contiguous") {
    *out = Behavior::kContiguous;
  } else {
    return Status::Error(fmt::format("unsupported split behavior '{}'", behavior));
  }
  return Status::Ok();
}

}  // namespace

Status MakeNormalizer(const json::value& config, std::unique_ptr<Normalizer>* out) {
  out->reset();
  if (config.is_null()) return Status::Ok();
  if (!config.is_object()) return Status::Error("normalizer is not an object");
  const json::object& o = config.as_object();
  const std::string type = StringField(o, "type");
  if (type == "Sequence") {
    auto seq = std::make_unique<SequenceNormalizer>();
    const json::value* list = o.if_contains("normalizers");
    if (list && list->is_array()) {
      for (const json::value& v : list->as_array()) {
        std::unique_ptr<Normalizer> part;
        if (Status s = MakeNormalizer(v, &part); !s.ok()) return s;
        if (part) seq->parts.push_back(std::move(part));
      }
    }
    *out = std::move(seq);
  } else if (type == "NFC") {
    *out = std::make_unique<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_COMPOSE, 0xCC);
  } else if (type == "NFD") {
    *out = std::make_unique<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE, 0x80);
  } else if (type == "NFKC") {
    *out = std::make_unique<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT,
                                               0x80);
  } else if (type == "NFKD") {
    *out = std::make_unique<UnicodeNormalizer>(
        UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, 0x80);
  } else if (type == "Lowercase") {
    *out = std::make_unique<LowercaseNormalizer>();
  } else if (type == "Replace") {
    auto r = std::make_unique<ReplaceNormalizer>();
    if (Status s = ReadPattern(o, &r->regex, &r->literal); !s.ok()) return s;
    r->content = StringField(o, "content");
    *out = std::move(r);
  } else if (type == "Prepend") {
    auto p = std::make_unique<PrependNormalizer>();
    p->prepend = StringField(o, "prepend");
    *out = std::move(p);
  } else if (type == "Strip") {
    auto s = std::make_unique<StripNormalizer>();
    s->left = BoolField(o, "strip_left", true);
    s->right = BoolField(o, "strip_right", true);
    *out = std::move(s);
  } else {
    return Status::Error(fmt::format("unsupported normalizer '{}'", type));
  }
  return Status::Ok();
}

Status MakePreTokenizer(const json::value& config, std::unique_ptr<PreTokenizer>* out) {
  out->reset();
  if (config.is_null()) return Status::Ok();
  if (!config.is_object()) return Status::Error("pre_tokenizer is not an object");
  const json::object& o = config.as_object();
  const std::string type = StringField(o, "type");
  if (type == "Sequence") {
    auto seq = std::make_unique<SequencePreTokenizer>();
    const json::value* list = o.if_contains("pretokenizers");
    if (list && list->is_array()) {
      for (const json::value& v : list->as_array()) {
        std::unique_ptr<PreTokenizer> part;
        if (Status s = MakePreTokenizer(v, &part); !s.ok()) return s;
        if (part) seq->parts.push_back(std::move(part));
      }
    }
    *out = std::move(seq);
  } else if (type == "Split") {
    auto split = std::make_unique<SplitPreTokenizer>();
    if (Status s = ReadPattern(o, &split->regex, &split->literal); !s.ok()) return s;
    if (Status s = ReadBehavior(o, &split->behavior); !s.ok()) return s;
    split->invert = BoolField(o, "invert", false);
    *out = std::move(split);
  } else if (type == "ByteLevel") {
    auto b = std::make_unique<ByteLevelPreTokenizer>();
    b->add_prefix_space = BoolField(o, "add_prefix_space", true);
    if (BoolField(o, "use_regex", true)) {
      if (Status s = Regex::Compile(kGpt2Pattern, &b->regex); !s.ok()) return s;
    }
    *out = std::move(b);
  } else if (type == "Metaspace") {
    auto m = std::make_unique<MetaspacePreTokenizer>();
    m->replacement = StringField(o, "replacement", m->replacement);
    m->prepend_scheme = StringField(o, "prepend_scheme",
                                    BoolField(o, "add_prefix_space", true) ? "always" : "never");
    m->split = BoolField(o, "split", true);
    *out = std::move(m);
  } else if (type == "Whitespace") {  // \w+|[^\w\s]+, as HF defines it
    auto split = std::make_unique<SplitPreTokenizer>();
    // Rust's \\w: alphabetic, marks, decimal digits, connector punctuation, joiners.
    if (Status s = Regex::Compile("[\\p{L}\\p{Nl}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]+|"
                                  "[^\\p{L}\\p{Nl}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}\\s]+",
                                  &split->regex);
        !s.ok()) {
      return s;
    }
    split->behavior = Behavior::kRemoved;
    split->invert = true;
    *out = std::move(split);
  } else if (type == "WhitespaceSplit") {
    auto split = std::make_unique<SplitPreTokenizer>();
    if (Status s = Regex::Compile("\\s+", &split->regex); !s.ok()) return s;
    split->behavior = Behavior::kRemoved;
    *out = std::move(split);
  } else if (type == "Punctuation") {  // Unicode punctuation and every ASCII punctuation char
    auto split = std::make_unique<SplitPreTokenizer>();
    if (Status s = Regex::Compile("[\\p{P}!-/:-@\\[-`{-~]", &split->regex); !s.ok()) return s;
    if (Status s = ReadBehavior(o, &split->behavior); !s.ok()) return s;
    *out = std::move(split);
  } else if (type == "Digits") {
    auto d = std::make_unique<DigitsPreTokenizer>();
    d->individual = BoolField(o, "individual_digits", false);
    if (Status s = Regex::Compile(d->individual ? "\\p{N}" : "\\p{N}+", &d->regex); !s.ok()) {
      return s;
    }
    *out = std::move(d);
  } else {
    return Status::Error(fmt::format("unsupported pre_tokenizer '{}'", type));
  }
  return Status::Ok();
}

}  // namespace kvgate::tokenizer
