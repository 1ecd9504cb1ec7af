// The text-side stages of a HF tokenizer, built from tokenizer.json: normalizers,
// pre-tokenizers (regex splits through PCRE2 with JIT), and the byte-level alphabet.
#pragma once

#include <boost/json/fwd.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
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

  // Most BPE tokenizers (GPT-2 style) only cut the text, with a regex, and map each piece's
  // bytes to the byte-level alphabet. Such a pre-tokenizer hands out its pieces as [begin,
  // end) byte ranges of `text`, which lets the caller look a piece up before copying or
  // converting it: it fills `spans` as Apply({text}) would cut, sets `*byte_level` when the
  // pieces are then mapped to the byte-level alphabet, and returns true. Others return false.
  virtual bool Cut(std::string_view /*text*/, std::vector<std::pair<uint32_t, uint32_t>>& /*spans*/,
                   bool* /*byte_level*/) const {
    return false;
  }
  // Whether Apply only maps bytes to the byte-level alphabet, piece by piece.
  virtual bool MapsBytesOnly() const { return false; }
};

// nullptr config (JSON null) -> nullptr object. Unsupported types are errors naming them.
Status MakeNormalizer(const boost::json::value& config, std::unique_ptr<Normalizer>* out);
Status MakePreTokenizer(const boost::json::value& config, std::unique_ptr<PreTokenizer>* out);

// tokenizer.json fields: the value when it has the right type, else `fallback`.
std::string StringField(const boost::json::object& o, std::string_view key,
                        std::string fallback = "");
bool BoolField(const boost::json::object& o, std::string_view key, bool fallback);

}  // namespace kvgate::tokenizer
