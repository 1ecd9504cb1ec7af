// Small tokenizers for unit tests, built as tokenizer.json documents: a byte-level BPE
// vocabulary with chosen merges, and loading a document through Tokenizer::Load.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/bytes.h"
#include "tokenizer/tokenizer.h"

namespace kvgate::tokenizer {

// One token per byte (ids 0-255, in the byte-level alphabet), then one per merge.
struct ByteLevelBpe {
  boost::json::object vocab;
  boost::json::array merges;
  uint32_t next_id = 0;  // the first id not taken
};

inline ByteLevelBpe MakeByteLevelBpe(
    const std::vector<std::pair<std::string, std::string>>& merges) {
  ByteLevelBpe bpe;
  for (int b = 0; b < 256; ++b) {
    bpe.vocab[BytesToByteLevel(std::string(1, static_cast<char>(b)))] = b;
  }
  bpe.next_id = 256;
  for (const auto& [l, r] : merges) {
    bpe.merges.push_back(boost::json::string(l + " " + r));
    bpe.vocab[l + r] = bpe.next_id++;
  }
  return bpe;
}

// Tokenizer::Load reads a file: the document goes through a temporary one.
inline std::unique_ptr<Tokenizer> LoadTokenizerJson(const boost::json::object& doc) {
  char path[] = "/tmp/kvgate_tokenizer_XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << boost::json::serialize(doc);
  std::unique_ptr<Tokenizer> tok;
  const Status s = Tokenizer::Load(path, &tok);
  std::remove(path);
  EXPECT_TRUE(s.ok()) << s.message();
  return tok;
}

}  // namespace kvgate::tokenizer
