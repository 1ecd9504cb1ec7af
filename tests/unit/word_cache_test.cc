// tokenizer/word_cache: per-thread word ids serve only the tokenizer that put them there,
// whatever order tokenizers are used in, on any thread, and past the cache's bounds.
#include "tokenizer/word_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "tokenizer_json.h"

namespace kvgate::tokenizer {
namespace {

// A byte-level BPE tokenizer (the pre-tokenizer that cuts into spans) with `merges`.
std::unique_ptr<Tokenizer> ByteLevelTokenizer(
    const std::vector<std::pair<std::string, std::string>>& merges) {
  namespace json = boost::json;
  const ByteLevelBpe bpe = MakeByteLevelBpe(merges);
  return LoadTokenizerJson(json::object{
      {"version", "1.0"},
      {"added_tokens", json::array{}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", bpe.vocab}, {"merges", bpe.merges}}}});
}

std::vector<uint32_t> Ids(const Tokenizer& t, std::string_view text) {
  std::vector<uint32_t> ids;
  EXPECT_TRUE(t.Encode(text, false, &ids).ok());
  return ids;
}

TEST(WordCache, EachTokenizerGetsItsOwnIdsInAnyOrderOnAnyThread) {
  auto merging = ByteLevelTokenizer({{"a", "b"}, {"Ġ", "ab"}});
  auto plain = ByteLevelTokenizer({});
  const std::string text = "ab ab abc ab";
  const std::vector<uint32_t> m = Ids(*merging, text), p = Ids(*plain, text);
  ASSERT_NE(m, p);
  EXPECT_EQ(p.size(), text.size());  // no merges: a token per byte
  EXPECT_EQ(m.size(), 5u);           // ab, Ġab, Ġab c, Ġab
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const bool use_merging = (i + t) % 2 == 0;
        const std::vector<uint32_t> got = Ids(use_merging ? *merging : *plain, text);
        wrong += got != (use_merging ? m : p);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(Ids(*merging, text), m);
}

TEST(WordCache, StartsOverAtItsBoundAndStaysRight) {
  auto merging = ByteLevelTokenizer({{"a", "b"}, {"Ġ", "ab"}});
  // More distinct words than the cache holds, then a known text again.
  std::string many;
  for (int i = 0; i < 70000; ++i) many += " ab" + std::to_string(i);
  const std::vector<uint32_t> all = Ids(*merging, many);
  EXPECT_GT(all.size(), 70000u);
  EXPECT_EQ(Ids(*merging, "ab ab"), (std::vector<uint32_t>{256, 257}));
  EXPECT_EQ(Ids(*merging, many), all);
}

}  // namespace
}  // namespace kvgate::tokenizer
