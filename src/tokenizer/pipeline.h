// The text-side stages of a HF tokenizer, built from tokenizer.json: normalizers,
// pre-tokenizers (regex splits through PCRE2 with JIT), and the byte-level alphabet.
#pragma once

#include <boost/json/fwd.hpp>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kvgate::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void Apply(std::string& text) const = 0;
};

// One piece of pre-tokenized text; `first` marks the first piece of the sequence.
struct Piece {
  std::string text;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits every piece further (and may rewrite them). `sequence_start`: pieces[0] begins
  // the input (for "prepend only first" schemes).
  virtual void Apply(std::vector<std::string>& pieces, bool sequence_start) const = 0;
};

// nullptr config (JSON null) -> nullptr object. Unsupported types are errors naming them.
Status MakeNormalizer(const boost::json::value& config, std::unique_ptr<Normalizer>* out);
Status MakePreTokenizer(const boost::json::value& config, std::unique_ptr<PreTokenizer>* out);

// GPT-2's byte <-> printable-char mapping used by byte-level BPE.
std::string BytesToByteLevel(std::string_view bytes);
// Inverse; false if a char is outside the byte-level alphabet.
bool ByteLevelToBytes(std::string_view text, std::string& out);

// tokenizer.json fields: the value when it has the right type, else `fallback`.
std::string StringField(const boost::json::object& o, std::string_view key,
                        std::string fallback = "");
bool BoolField(const boost::json::object& o, std::string_view key, bool fallback);

// Valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
bool IsValidUtf8(std::string_view text);
// `bytes` with each maximal invalid subsequence replaced by U+FFFD, as HF's decoders do
// (Rust's String::from_utf8_lossy).
std::string LossyUtf8(std::string_view bytes);

}  // namespace kvgate::tokenizer
