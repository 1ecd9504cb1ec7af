// A HF `tokenizer.json` tokenizer: the same ids as HF `tokenizers` for the byte-level BPE
// family (GPT-2, Llama-3, Qwen, DeepSeek-V3, gpt-oss) and SentencePiece-style BPE with byte
// fallback. Components it does not implement are a load-time error naming them.
// Encode is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kvgate::tokenizer {

class Tokenizer {
 public:
  // Loads `tokenizer.json`; `config_path` (tokenizer_config.json, optional) supplies the
  // bos/eos token names.
  static Status Load(const std::string& path, std::unique_ptr<Tokenizer>* out);
  ~Tokenizer();

  // Fails only on invalid UTF-8.
  Status Encode(std::string_view text, bool add_special_tokens, std::vector<uint32_t>* ids) const;
  // Turns Encode(text, false)'s ids into Encode(text, true)'s: the special tokens the
  // post-processor puts around a text (a BOS, say), if it has any.
  void AddSpecialTokens(std::vector<uint32_t>* ids) const;

  // Where encoding can resume: right after an added token (and any whitespace it strips).
  // Added tokens are split off before anything else, so the ids before such a point do not
  // depend on the text after it, for any text that agrees with this one on its first
  // `agree` bytes: enough for every added-token match tried before the point to read the
  // same bytes (the longest added token from where this one starts), and for the stripped
  // whitespace to have ended the same way (one byte past the point).
  struct ResumePoint {
    uint32_t byte;   // offset into the text
    uint32_t ids;    // ids before it
    uint32_t agree;  // bytes another text must share with this one for the point to hold
  };
  // The ids of `text[from:]` without special tokens added, as Encode(text, false) gives them
  // after `from` (0, or a resume point of a text that agrees with `text` on its `agree`
  // bytes), appended to `ids`; the resume points past `from` are appended to `points` (ids
  // counted from the start of `*ids`). `text[from:]` must be valid UTF-8.
  void EncodeFrom(std::string_view text, size_t from, std::vector<uint32_t>* ids,
                  std::vector<ResumePoint>* points) const;
  std::string Decode(std::span<const uint32_t> ids, bool skip_special_tokens = false) const;

  std::optional<uint32_t> TokenId(std::string_view token) const;
  size_t vocab_size() const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvgate::tokenizer
