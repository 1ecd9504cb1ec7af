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

// tokenizer.json fields: the value when it has the right type, else `fallback`.
std::string StringField(const boost::json::object& o, std::string_view key,
                        std::string fallback = "");
bool BoolField(const boost::json::object& o, std::string_view key, bool fallback);

}  // namespace kvgate::tokenizer
