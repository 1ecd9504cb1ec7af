// Encode: split out added tokens, normalize and pre-tokenize the rest, run BPE per piece,
// then the post-processor's template. Decode: ids to tokens, then the decoder chain.
#include "tokenizer/tokenizer.h"

#include <fmt/format.h>

#include <atomic>
#include <boost/json.hpp>
#include <fstream>
#include <sstream>

#include "tokenizer/bpe.h"
#include "tokenizer/bytes.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/word_cache.h"

namespace kvgate::tokenizer {
namespace {

namespace json = boost::json;

struct AddedToken {
  std::string content;
  uint32_t id;
  bool special, lstrip, rstrip, single_word, normalized;
};

// Template items: a fixed special token id, or the input sequence.
struct TemplateItem {
  bool sequence;
  std::vector<uint32_t> ids;
};

enum class DecoderKind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace };
struct DecoderStep {
  DecoderKind kind;
  std::string pattern, content;  // Replace; Strip: content = char to strip
  size_t start = 0, stop = 0;    // Strip
  bool prepend = true;           // Metaspace: strip the leading space it added
};

bool IsWordChar(unsigned char c) { return std::isalnum(c) || c == '_' || c >= 0x80; }
bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

}  // namespace

struct Tokenizer::Impl {
  // Names this tokenizer to the per-thread word caches (an address could be reused).
  const uint64_t serial = [] {
    static std::atomic<uint64_t> next{1};
    return next.fetch_add(1, std::memory_order_relaxed);
  }();
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<Bpe> model;
  std::vector<AddedToken> added;
  std::vector<std::vector<size_t>> added_by_first_byte = std::vector<std::vector<size_t>>(256);
  absl::flat_hash_map<uint32_t, size_t> added_by_id;
  std::vector<TemplateItem> single_template;
  bool has_template = false;
  size_t longest_added = 0;  // bytes of the longest added token
  std::vector<DecoderStep> decoders;

  Status LoadPostProcessor(const json::value& v) {
    if (v.is_null()) return Status::Ok();
    const json::object& o = v.as_object();
    const std::string type = StringField(o, "type");
    if (type == "ByteLevel") return Status::Ok();  // offsets only; ids unchanged
    if (type == "Sequence") {
      const json::value* list = o.if_contains("processors");
      if (list && list->is_array()) {
        for (const json::value& p : list->as_array()) {
          if (Status s = LoadPostProcessor(p); !s.ok()) return s;
        }
      }
      return Status::Ok();
    }
    if (type != "TemplateProcessing") {
      return Status::Error(fmt::format("unsupported post_processor '{}'", type));
    }
    absl::flat_hash_map<std::string, std::vector<uint32_t>> specials;
    if (const json::value* st = o.if_contains("special_tokens"); st && st->is_object()) {
      for (const auto& [name, spec] : st->as_object()) {
        std::vector<uint32_t> ids;
        if (const json::value* list = spec.as_object().if_contains("ids");
            list && list->is_array()) {
          for (const json::value& id : list->as_array())
            ids.push_back(static_cast<uint32_t>(id.to_number<int64_t>()));
        }
        specials[std::string(name)] = std::move(ids);
      }
    }
    has_template = true;
    single_template.clear();
    for (const json::value& item : o.at("single").as_array()) {
      const json::object& io = item.as_object();
      if (io.contains("Sequence")) {
        single_template.push_back({true, {}});
      } else if (const json::value* sp = io.if_contains("SpecialToken")) {
        const std::string id = StringField(sp->as_object(), "id");
        auto it = specials.find(id);
        if (it == specials.end()) {
          return Status::Error(fmt::format("template token '{}' has no ids", id));
        }
        single_template.push_back({false, it->second});
      }
    }
    return Status::Ok();
  }

  Status LoadDecoder(const json::value& v) {
    if (v.is_null()) return Status::Ok();
    const json::object& o = v.as_object();
    const std::string type = StringField(o, "type");
    if (type == "Sequence") {
      for (const json::value& d : o.at("decoders").as_array()) {
        if (Status s = LoadDecoder(d); !s.ok()) return s;
      }
    } else if (type == "ByteLevel") {
      decoders.push_back({DecoderKind::kByteLevel, {}, {}});
    } else if (type == "Replace") {
      const json::object& p = o.at("pattern").as_object();
      if (!p.contains("String")) return Status::Error("Replace decoder with a regex pattern");
      decoders.push_back(
          {DecoderKind::kReplace, StringField(p, "String"), StringField(o, "content")});
    } else if (type == "ByteFallback") {
      decoders.push_back({DecoderKind::kByteFallback, {}, {}});
    } else if (type == "Fuse") {
      decoders.push_back({DecoderKind::kFuse, {}, {}});
    } else if (type == "Strip") {
      DecoderStep s{DecoderKind::kStrip, {}, StringField(o, "content")};
      s.start = static_cast<size_t>(o.at("start").to_number<int64_t>());
      s.stop = static_cast<size_t>(o.at("stop").to_number<int64_t>());
      decoders.push_back(s);
    } else if (type == "Metaspace") {
      DecoderStep s{DecoderKind::kMetaspace, StringField(o, "replacement"), " "};
      if (s.pattern.empty()) s.pattern = "\xE2\x96\x81";
      const std::string scheme = StringField(o, "prepend_scheme");
      s.prepend = scheme.empty() ? BoolField(o, "add_prefix_space", true) : scheme != "never";
      decoders.push_back(s);
    } else {
      return Status::Error(fmt::format("unsupported decoder '{}'", type));
    }
    return Status::Ok();
  }

  // Splits `text` into (segment, added-token index or -1), leftmost-longest added token first.
  // Segments of `text` from byte `from` on: (text, -1) or ("", added token index), with the
  // offsets where each begins (an added token: where its match begins) and ends (past the
  // whitespace it strips).
  struct Segment {
    std::string text;
    int added;
    size_t begin, end;
  };
  void SplitAdded(std::string_view text, size_t from, std::vector<Segment>& out) const {
    size_t segment_start = from;
    for (size_t i = from; i < text.size();) {
      int found = -1;
      size_t found_len = 0;
      for (size_t idx : added_by_first_byte[static_cast<unsigned char>(text[i])]) {
        const AddedToken& t = added[idx];
        if (t.content.size() <= found_len || text.compare(i, t.content.size(), t.content) != 0) {
          continue;
        }
        if (t.single_word) {
          const size_t end = i + t.content.size();
          if ((i > 0 && IsWordChar(text[i - 1])) || (end < text.size() && IsWordChar(text[end]))) {
            continue;
          }
        }
        found = static_cast<int>(idx);
        found_len = t.content.size();
      }
      if (found < 0) {
        ++i;
        continue;
      }
      const AddedToken& t = added[found];
      size_t before_end = i, after = i + found_len;
      if (t.lstrip) {
        while (before_end > segment_start && IsSpace(text[before_end - 1])) --before_end;
      }
      if (t.rstrip) {
        while (after < text.size() && IsSpace(text[after])) ++after;
      }
      if (before_end > segment_start) {
        out.push_back({std::string(text.substr(segment_start, before_end - segment_start)), -1,
                       segment_start, before_end});
      }
      out.push_back({std::string(), found, i, after});
      segment_start = i = after;
    }
    if (segment_start < text.size()) {
      out.push_back({std::string(text.substr(segment_start)), -1, segment_start, text.size()});
    }
  }

  // Appends the ids of text[from:] (`from`: 0 or a resume point), and the resume points
  // past `from` when `points` is given.
  void EncodeText(std::string_view text, std::vector<uint32_t>& ids, size_t from = 0,
                  std::vector<Tokenizer::ResumePoint>* points = nullptr) const {
    std::vector<Segment> segments;
    SplitAdded(text, from, segments);
    std::vector<std::string> pieces;
    std::vector<std::pair<uint32_t, uint32_t>> spans;
    bool first = from == 0;
    for (auto& [segment, added_index, begin, end] : segments) {
      if (added_index >= 0) {
        ids.push_back(added[added_index].id);
        if (points) {
          // Matches tried before this one read at most the longest added token (and a
          // whole-word one the byte after it); stripped whitespace ends at `end`.
          const size_t agree = std::max(begin + longest_added + 1, end + 1);
          points->push_back({static_cast<uint32_t>(end), static_cast<uint32_t>(ids.size()),
                             static_cast<uint32_t>(agree)});
        }
        first = false;
        continue;
      }
      if (normalizer) normalizer->Apply(segment);
      const bool sequence_start = std::exchange(first, false);
      spans.clear();
      bool byte_level = false;
      if (pre_tokenizer && pre_tokenizer->Cut(segment, spans, &byte_level)) {
        EncodeSpans(segment, spans, byte_level, ids);
        continue;
      }
      pieces.clear();
      pieces.push_back(std::move(segment));
      if (pre_tokenizer) pre_tokenizer->Apply(pieces, sequence_start);
      for (const std::string& p : pieces) model->EncodeWord(p, ids);
    }
  }

  // The pieces a cutting pre-tokenizer found (PreTokenizer::Cut), through this thread's
  // word cache; only unknown words are copied, mapped and merged.
  void EncodeSpans(std::string_view text, const std::vector<std::pair<uint32_t, uint32_t>>& spans,
                   bool byte_level, std::vector<uint32_t>& ids) const {
    WordCache& cache = WordCache::ForThread(serial);
    std::string word;
    for (auto [begin, end] : spans) {
      const std::string_view raw = text.substr(begin, end - begin);
      if (cache.Append(raw, ids)) continue;
      word = byte_level ? BytesToByteLevel(raw) : std::string(raw);
      const size_t before = ids.size();
      model->EncodeWord(word, ids);
      cache.Insert(raw, std::span<const uint32_t>(ids).subspan(before));
    }
  }

  std::string DecodeTokens(std::vector<std::string> tokens) const {
    for (const DecoderStep& d : decoders) {
      switch (d.kind) {
        case DecoderKind::kByteLevel: {
          std::string bytes;
          for (const std::string& t : tokens) {
            if (!ByteLevelToBytes(t, bytes)) bytes += t;
          }
          tokens.assign(1, LossyUtf8(bytes));
          break;
        }
        case DecoderKind::kReplace:
          for (std::string& t : tokens) {
            std::string out;
            size_t last = 0;
            for (size_t pos = t.find(d.pattern); !d.pattern.empty() && pos != std::string::npos;
                 pos = t.find(d.pattern, last)) {
              out.append(t, last, pos - last);
              out += d.content;
              last = pos + d.pattern.size();
            }
            out.append(t, last, std::string::npos);
            t.swap(out);
          }
          break;
        case DecoderKind::kByteFallback: {
          std::vector<std::string> out;
          std::string pending;
          for (std::string& t : tokens) {
            if (t.size() == 6 && t.starts_with("<0x") && t.back() == '>') {
              pending += static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16));
              continue;
            }
            if (!pending.empty()) {
              out.push_back(IsValidUtf8(pending) ? pending : std::string("\xEF\xBF\xBD"));
              pending.clear();
            }
            out.push_back(std::move(t));
          }
          if (!pending.empty()) {
            out.push_back(IsValidUtf8(pending) ? pending : std::string("\xEF\xBF\xBD"));
          }
          tokens.swap(out);
          break;
        }
        case DecoderKind::kFuse: {
          std::string all;
          for (const std::string& t : tokens) all += t;
          tokens.assign(1, std::move(all));
          break;
        }
        case DecoderKind::kStrip:
          for (std::string& t : tokens) {
            size_t b = 0, e = t.size();
            for (size_t n = 0;
                 n < d.start && b < e && t.compare(b, d.content.size(), d.content) == 0; ++n) {
              b += d.content.size();
            }
            for (size_t n = 0; n < d.stop && e > b && e >= d.content.size() &&
                               t.compare(e - d.content.size(), d.content.size(), d.content) == 0;
                 ++n) {
              e -= d.content.size();
            }
            t = t.substr(b, e - b);
          }
          break;
        case DecoderKind::kMetaspace:
          for (size_t i = 0; i < tokens.size(); ++i) {
            std::string& t = tokens[i];
            std::string out;
            size_t last = 0;
            for (size_t pos = t.find(d.pattern); pos != std::string::npos;
                 pos = t.find(d.pattern, last)) {
              out.append(t, last, pos - last);
              out += ' ';
              last = pos + d.pattern.size();
            }
            out.append(t, last, std::string::npos);
            if (i == 0 && d.prepend && out.starts_with(' ')) out.erase(0, 1);
            t.swap(out);
          }
          break;
      }
    }
    std::string text;
    for (const std::string& t : tokens) text += t;
    return text;
  }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

Status Tokenizer::Load(const std::string& path, std::unique_ptr<Tokenizer>* out) {
  std::ifstream in(path);
  if (!in) return Status::Error(fmt::format("cannot open {}", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  boost::system::error_code ec;
  json::value root = json::parse(buffer.str(), ec);
  if (ec || !root.is_object()) return Status::Error(fmt::format("{}: not a JSON object", path));
  const json::object& o = root.as_object();
  auto impl = std::make_unique<Impl>();
  auto fail = [&](const Status& s) {
    return Status::Error(fmt::format("{}: {}", path, s.message()));
  };
  try {
    if (Status s = MakeNormalizer(o.contains("normalizer") ? o.at("normalizer") : json::value(),
                                  &impl->normalizer);
        !s.ok())
      return fail(s);
    if (Status s =
            MakePreTokenizer(o.contains("pre_tokenizer") ? o.at("pre_tokenizer") : json::value(),
                             &impl->pre_tokenizer);
        !s.ok())
      return fail(s);

    const json::object& model = o.at("model").as_object();
    if (StringField(model, "type") != "BPE" &&
        !(StringField(model, "type").empty() && model.contains("merges"))) {
      return fail(Status::Error(fmt::format("unsupported model '{}'", StringField(model, "type"))));
    }
    StringMap<uint32_t> vocab;
    for (const auto& [token, id] : model.at("vocab").as_object()) {
      vocab.emplace(std::string(token), static_cast<uint32_t>(id.to_number<int64_t>()));
    }
    std::vector<std::pair<std::string, std::string>> merges;
    for (const json::value& m : model.at("merges").as_array()) {
      if (m.is_string()) {
        const std::string_view s = m.as_string();
        const size_t space = s.find(' ', 1);
        if (space == std::string_view::npos) return fail(Status::Error("bad merge"));
        merges.emplace_back(std::string(s.substr(0, space)), std::string(s.substr(space + 1)));
      } else {
        const json::array& pair = m.as_array();
        merges.emplace_back(std::string(pair.at(0).as_string()),
                            std::string(pair.at(1).as_string()));
      }
    }
    Bpe::Options options;
    options.byte_fallback = BoolField(model, "byte_fallback", false);
    options.ignore_merges = BoolField(model, "ignore_merges", false);
    options.continuing_subword_prefix = StringField(model, "continuing_subword_prefix");
    options.end_of_word_suffix = StringField(model, "end_of_word_suffix");
    if (const std::string unk = StringField(model, "unk_token"); !unk.empty()) {
      auto it = vocab.find(unk);
      if (it != vocab.end()) options.unk = it->second;
    }
    if (model.contains("dropout") && !model.at("dropout").is_null()) {
      return fail(Status::Error("BPE dropout is not supported"));
    }
    impl->model = std::make_unique<Bpe>(std::move(vocab), std::move(merges), options);
    if (!impl->model->load_error().empty()) return fail(Status::Error(impl->model->load_error()));

    if (const json::value* list = o.if_contains("added_tokens"); list && list->is_array()) {
      for (const json::value& v : list->as_array()) {
        const json::object& t = v.as_object();
        AddedToken a{StringField(t, "content"),
                     static_cast<uint32_t>(t.at("id").to_number<int64_t>()),
                     BoolField(t, "special", false),
                     BoolField(t, "lstrip", false),
                     BoolField(t, "rstrip", false),
                     BoolField(t, "single_word", false),
                     BoolField(t, "normalized", false)};
        if (a.content.empty()) continue;
        impl->added_by_id[a.id] = impl->added.size();
        impl->longest_added = std::max(impl->longest_added, a.content.size());
        impl->added_by_first_byte[static_cast<unsigned char>(a.content[0])].push_back(
            impl->added.size());
        impl->added.push_back(std::move(a));
      }
    }
    if (Status s = impl->LoadPostProcessor(o.contains("post_processor") ? o.at("post_processor")
                                                                        : json::value());
        !s.ok())
      return fail(s);
    if (Status s = impl->LoadDecoder(o.contains("decoder") ? o.at("decoder") : json::value());
        !s.ok())
      return fail(s);
  } catch (const std::exception& e) {
    return fail(Status::Error(fmt::format("malformed tokenizer.json ({})", e.what())));
  }
  out->reset(new Tokenizer(std::move(impl)));
  return Status::Ok();
}

Status Tokenizer::Encode(std::string_view text, bool add_special_tokens,
                         std::vector<uint32_t>* ids) const {
  ids->clear();
  if (!IsValidUtf8(text)) return Status::Error("input is not valid UTF-8");
  impl_->EncodeText(text, *ids);
  if (add_special_tokens) AddSpecialTokens(ids);
  return Status::Ok();
}

void Tokenizer::AddSpecialTokens(std::vector<uint32_t>* ids) const {
  if (!impl_->has_template) return;
  const std::vector<uint32_t> text_ids = std::move(*ids);
  ids->clear();
  for (const TemplateItem& item : impl_->single_template) {
    const std::vector<uint32_t>& part = item.sequence ? text_ids : item.ids;
    ids->insert(ids->end(), part.begin(), part.end());
  }
}

void Tokenizer::EncodeFrom(std::string_view text, size_t from, std::vector<uint32_t>* ids,
                           std::vector<ResumePoint>* points) const {
  impl_->EncodeText(text, *ids, from, points);
}

std::string Tokenizer::Decode(std::span<const uint32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (uint32_t id : ids) {
    auto added = impl_->added_by_id.find(id);
    if (added != impl_->added_by_id.end()) {
      const AddedToken& t = impl_->added[added->second];
      if (skip_special_tokens && t.special) continue;
      tokens.push_back(t.content);
      continue;
    }
    if (const std::string* t = impl_->model->Token(id)) tokens.push_back(*t);
  }
  return impl_->DecodeTokens(std::move(tokens));
}

std::optional<uint32_t> Tokenizer::TokenId(std::string_view token) const {
  for (const AddedToken& t : impl_->added) {
    if (t.content == token) return t.id;
  }
  return impl_->model->Id(token);
}

size_t Tokenizer::vocab_size() const { return impl_->model->size() + impl_->added.size(); }

}  // namespace kvgate::tokenizer
