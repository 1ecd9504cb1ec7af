// tokenizer/prefix_cache: ids through the cache are always Encode's, whatever the texts share;
// memory stays within the budget. A small byte-level tokenizer whose added tokens strip
// whitespace, nest (one is a prefix of another, one begins before another) and want whole words:
// the cases where a resume point is only safe with enough of the text agreeing after it.
#include "tokenizer/prefix_cache.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <random>

#include "tokenizer_json.h"

namespace kvgate::tokenizer {
namespace {

// `post_processor`: none, or a template that puts special tokens around the text.
std::unique_ptr<Tokenizer> SmallTokenizer(bool with_template = false) {
  namespace json = boost::json;
  // A few merges, so that the split of a word matters.
  ByteLevelBpe bpe =
      MakeByteLevelBpe({{"a", "b"}, {"ab", "c"}, {"Ġ", "a"}, {"Ġa", "b"}, {"x", "x"}});
  uint32_t& next = bpe.next_id;
  auto added = [&](const char* content, bool lstrip, bool rstrip, bool single_word) {
    return json::object{{"id", next++},     {"content", content}, {"single_word", single_word},
                        {"lstrip", lstrip}, {"rstrip", rstrip},   {"normalized", false},
                        {"special", true}};
  };
  json::array added_tokens{
      added("<t>", false, true, false),    added("<t><u>", false, false, false),
      added("<s>", true, false, false),    added("WORD", false, false, true),
      added("<end>", false, false, false), added("xx<t>", false, false, false)};
  json::object doc{{"version", "1.0"},
                   {"added_tokens", added_tokens},
                   {"normalizer", nullptr},
                   {"pre_tokenizer",
                    {{"type", "ByteLevel"},
                     {"add_prefix_space", false},
                     {"trim_offsets", true},
                     {"use_regex", true}}},
                   {"post_processor", nullptr},
                   {"decoder", {{"type", "ByteLevel"}}},
                   {"model",
                    {{"type", "BPE"},
                     {"vocab", bpe.vocab},
                     {"merges", bpe.merges},
                     {"dropout", nullptr},
                     {"unk_token", nullptr},
                     {"fuse_unk", false},
                     {"byte_fallback", false}}}};
  if (with_template) {
    auto special = [](const char* id) { return json::object{{"SpecialToken", {{"id", id}}}}; };
    doc["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single",
         json::array{special("<s>"), json::object{{"Sequence", {{"id", "A"}}}}, special("<end>")}},
        {"special_tokens",
         {{"<s>", {{"id", "<s>"}, {"ids", {next - 4}}, {"tokens", {"<s>"}}}},
          {"<end>", {{"id", "<end>"}, {"ids", {next - 2}}, {"tokens", {"<end>"}}}}}}};
  }
  return LoadTokenizerJson(doc);
}

TEST(PrefixCache, GrowingBranchingTextsGetEncodesIdsAndReuseTheirPrefix) {
  std::unique_ptr<Tokenizer> tok = SmallTokenizer();
  ASSERT_TRUE(tok);
  PrefixCache cache(*tok, 1 << 20);
  std::mt19937 rng(11);
  const std::vector<std::string> pieces = {"<t>",   "<t><u>", "<s>",  "WORD", "<end>", "<t",
                                           "abc",   " ab",    "xx",   " ",    "   ",   "\n",
                                           "WORDS", "é",      "東京", "<",    "u>",    ">"};
  auto piece = [&] { return pieces[rng() % pieces.size()]; };
  std::vector<std::string> conversations(4, std::string(5000, 'a'));
  size_t reused = 0, total = 0, checked = 0;
  for (int turn = 0; turn < 3000; ++turn) {
    std::string& c = conversations[rng() % conversations.size()];
    std::string text = c;
    for (int n = 1 + rng() % 4; n > 0; --n) text += piece();
    if (rng() % 3) c = text;  // else a branch: the conversation goes on without it
    std::vector<uint32_t> want, got;
    ASSERT_TRUE(tok->Encode(text, false, &want).ok());
    PrefixCache::Use use;
    ASSERT_TRUE(cache.Encode(text, &got, &use).ok());
    ASSERT_EQ(got, want) << "turn " << turn << ": ..."
                         << text.substr(text.size() > 40 ? text.size() - 40 : 0);
    reused += use.reused_bytes;
    total += text.size();
    ++checked;
  }
  EXPECT_GT(static_cast<double>(reused) / total, 0.8);
  EXPECT_LE(cache.bytes(), size_t{1} << 20);
}

// Text prompts (completions) want the post-processor's special tokens: the cache keeps the
// text's ids, and AddSpecialTokens puts them around, as Encode(text, true) does.
TEST(PrefixCache, SpecialTokensGoAroundTheCachedIdsAsEncodeWithThemPutsThem) {
  std::unique_ptr<Tokenizer> tok = SmallTokenizer(/*with_template=*/true);
  ASSERT_TRUE(tok);
  PrefixCache cache(*tok, 1 << 20);
  std::string text(5000, 'a');
  for (int turn = 0; turn < 20; ++turn) {
    text += turn % 2 ? " ab<t>abc " : "WORD xx<end>\n";
    std::vector<uint32_t> want, plain, got;
    ASSERT_TRUE(tok->Encode(text, true, &want).ok());
    ASSERT_TRUE(tok->Encode(text, false, &plain).ok());
    ASSERT_EQ(want.size(), plain.size() + 2);  // the template adds one token on each side
    PrefixCache::Use use;
    ASSERT_TRUE(cache.Encode(text, &got, &use).ok());
    tok->AddSpecialTokens(&got);
    ASSERT_EQ(got, want) << "turn " << turn;
    // (From the third text on: the first one's only added token ends it, and a resume point
    // needs the byte after it to hold.)
    if (turn >= 2) {
      EXPECT_GT(use.reused_bytes, 5000u) << "turn " << turn;
    }
  }
}

TEST(PrefixCache, StaysWithinItsBudgetAndShortTextsAreNotKept) {
  std::unique_ptr<Tokenizer> tok = SmallTokenizer();
  ASSERT_TRUE(tok);
  PrefixCache cache(*tok, 200'000);
  std::vector<uint32_t> ids;
  ASSERT_TRUE(cache.Encode("short <t> text", &ids).ok());
  EXPECT_EQ(cache.entries(), 0u);
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(cache.Encode(std::to_string(i) + std::string(10'000, 'x') + "<end>", &ids).ok());
    EXPECT_LE(cache.bytes(), 200'000u);
  }
  EXPECT_GT(cache.entries(), 0u);
  EXPECT_FALSE(cache.Encode(std::string(5000, 'a') + "\xff", &ids).ok());  // invalid UTF-8
}

}  // namespace
}  // namespace kvgate::tokenizer
