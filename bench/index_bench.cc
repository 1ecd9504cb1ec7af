// Prefix index: applying stored blocks into an index of ~1M blocks over 64 workers, match
// latency percentiles for 128-block prompts (alone and with a writer applying events
// concurrently), and memory per (block, worker) entry.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "bench_ratio.h"
#include "kv/block_hash.h"
#include "kv/prefix_index.h"
#include "wire/decode.h"
#include "wire/encode.h"

namespace {

using namespace kvgate;

constexpr uint32_t kBs = 16;
constexpr int kWorkers = 64;
constexpr int kChains = 8192;  // x 128 blocks = 1,048,576 distinct blocks
constexpr int kChainBlocks = 128;
constexpr int kBlocksPerEvent = 4;
constexpr int kEventsPerBatch = 32;

struct Corpus {
  std::vector<std::vector<uint32_t>> chain_tokens;
  // Pre-decoded batches (the index's input), each for one worker.
  std::vector<std::pair<kv::WorkerKey, wire::DecodedBatch>> batches;
  size_t blocks = 0;
};

const Corpus& GetCorpus() {
  static const Corpus corpus = [] {
    Corpus c;
    std::mt19937_64 rng(1);
    c.chain_tokens.resize(kChains);
    std::vector<wire::OutEvent> events;
    uint64_t engine_hash = 1;
    auto flush = [&](uint32_t worker) {
      if (events.empty()) return;
      wire::DecodedBatch b;
      (void)wire::DecodeEventBatch(wire::EncodeEventBatch(0, 0, events, {}), b);
      c.batches.emplace_back(kv::WorkerKey{worker, 0}, std::move(b));
      events.clear();
    };
    for (int ch = 0; ch < kChains; ++ch) {
      auto& tokens = c.chain_tokens[ch];
      for (int t = 0; t < kChainBlocks * static_cast<int>(kBs); ++t)
        tokens.push_back(rng() % 151936);
      // Every chain on one worker; every fourth also on a second one.
      for (int copy = 0; copy < (ch % 4 == 0 ? 2 : 1); ++copy) {
        const uint32_t worker = (ch + copy) % kWorkers;
        std::optional<uint64_t> parent;
        for (int b0 = 0; b0 < kChainBlocks; b0 += kBlocksPerEvent) {
          wire::StoredBlocks s;
          for (int b = 0; b < kBlocksPerEvent; ++b) s.block_hashes.push_back(engine_hash++);
          s.parent_hash = parent;
          parent = s.block_hashes.back();
          s.token_ids.assign(tokens.begin() + b0 * kBs,
                             tokens.begin() + (b0 + kBlocksPerEvent) * kBs);
          s.block_size = kBs;
          events.push_back(std::move(s));
          c.blocks += kBlocksPerEvent;
          if (events.size() == kEventsPerBatch) flush(worker);
        }
        flush(worker);
      }
    }
    return c;
  }();
  return corpus;
}

// Building the whole index from empty (table growth included), and its memory.
void BuildIndex(benchmark::State& state) {
  const Corpus& c = GetCorpus();
  for (auto _ : state) {
    kv::PrefixIndex index(kBs);
    kv::ApplyStats stats;
    for (const auto& [worker, batch] : c.batches) index.ApplyBatch(worker, batch, stats);
    if (stats.stored_blocks != c.blocks) state.SkipWithError("not every block was stored");
    state.PauseTiming();
    const kv::IndexStats s = index.Stats();
    state.counters["nodes"] = s.nodes;
    state.counters["entries"] = s.entries;
    state.counters["bytes_per_entry"] = static_cast<double>(s.approx_bytes) / s.entries;
    state.ResumeTiming();
  }
  state.counters["blocks/s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * c.blocks), benchmark::Counter::kIsRate);
}

kv::PrefixIndex& FullIndex();

// Steady state: stores into the full index (1M blocks, 64 workers); each iteration applies
// 256 batches (32K blocks) for a fresh worker, then (untimed) clears it again.
void ApplyStored(benchmark::State& state) {
  const Corpus& c = GetCorpus();
  kv::PrefixIndex& index = FullIndex();
  size_t next = 0;
  uint64_t blocks = 0;
  for (auto _ : state) {
    kv::ApplyStats stats;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 256; ++i) {
      index.ApplyBatch({2000, 0}, c.batches[next++ % c.batches.size()].second, stats);
    }
    const auto t1 = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    blocks += stats.stored_blocks;
    index.ClearWorker({2000, 0});
  }
  state.counters["blocks/s"] =
      benchmark::Counter(static_cast<double>(blocks), benchmark::Counter::kIsRate);
}

kv::PrefixIndex& FullIndex() {
  static kv::PrefixIndex* index = [] {
    auto* idx = new kv::PrefixIndex(kBs);
    kv::ApplyStats stats;
    for (const auto& [worker, batch] : GetCorpus().batches) idx->ApplyBatch(worker, batch, stats);
    return idx;
  }();
  return *index;
}

// Every benchmark prompt is a whole stored chain: some worker must hold all of it.
bool MatchesWholeChain(const std::vector<kv::Overlap>& out) {
  return std::any_of(out.begin(), out.end(),
                     [](const kv::Overlap& o) { return o.total() == kChainBlocks; });
}

void MatchLatency(benchmark::State& state) {
  const bool with_writer = state.range(0) != 0;
  const Corpus& c = GetCorpus();
  kv::PrefixIndex& index = FullIndex();
  std::vector<std::vector<uint64_t>> prompts;
  std::mt19937_64 rng(2);
  for (int i = 0; i < 1024; ++i) {
    std::vector<uint64_t> local;
    kv::AppendLocalBlockHashes(c.chain_tokens[rng() % kChains], kBs, kv::kDefaultSeed, false,
                               local);
    prompts.push_back(std::move(local));
  }
  // The writer churns a worker of its own: it stores a batch (128 blocks), then removes
  // those blocks again, event by event, as an engine evicting would; so the index stays the
  // same size. Arg 1: flat out; arg 2: paced at 1M blocks/s (far above a fleet's real rate).
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> written{0};
  std::thread writer;
  if (with_writer) {
    writer = std::thread([&, paced = state.range(0) == 2] {
      std::vector<wire::DecodedBatch> removals;
      for (size_t i = 0; i < c.batches.size(); i += 64) {
        std::vector<wire::OutEvent> events;
        for (const wire::Event& e : c.batches[i].second.events) {
          auto h = c.batches[i].second.BlockHashes(e);
          events.push_back(wire::RemovedBlocks{{h.begin(), h.end()}, wire::Tier::kDevice, {}});
        }
        wire::DecodedBatch b;
        (void)wire::DecodeEventBatch(wire::EncodeEventBatch(0, 0, events, {}), b);
        removals.push_back(std::move(b));
      }
      kv::ApplyStats stats;
      auto next = std::chrono::steady_clock::now();
      while (!stop) {
        for (size_t i = 0, r = 0; i < c.batches.size() && !stop; i += 64, ++r) {
          index.ApplyBatch({1000, 0}, c.batches[i].second, stats);
          index.ApplyBatch({1000, 0}, removals[r], stats);
          written += 2 * kEventsPerBatch * kBlocksPerEvent;
          if (paced) {
            next += std::chrono::nanoseconds(2 * kEventsPerBatch * kBlocksPerEvent * 1000);
            std::this_thread::sleep_until(next);
          }
        }
      }
    });
  }
  std::vector<double> ns;
  std::vector<kv::Overlap> out;
  size_t i = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    index.Match(prompts[i++ % prompts.size()], out);
    const auto t1 = std::chrono::steady_clock::now();
    ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
    if (!MatchesWholeChain(out)) {
      state.SkipWithError("a prompt did not match its whole chain");
      break;
    }
  }
  stop = true;
  if (writer.joinable()) writer.join();
  std::sort(ns.begin(), ns.end());
  state.counters["p50_us"] = ns[ns.size() / 2] / 1000;
  state.counters["p99_us"] = ns[ns.size() * 99 / 100] / 1000;
  state.counters["max_us"] = ns.back() / 1000;
  if (with_writer)
    state.counters["writer_blocks/s"] =
        benchmark::Counter(static_cast<double>(written.load()), benchmark::Counter::kIsRate);
}

// The same prompt over and over: its nodes stay in cache, so this is the compute part.
void MatchCacheHot(benchmark::State& state) {
  const Corpus& c = GetCorpus();
  kv::PrefixIndex& index = FullIndex();
  std::vector<uint64_t> local;
  kv::AppendLocalBlockHashes(c.chain_tokens[0], kBs, kv::kDefaultSeed, false, local);
  std::vector<kv::Overlap> out;
  for (auto _ : state) {
    index.Match(local, out);
    benchmark::DoNotOptimize(out.data());
  }
  if (!MatchesWholeChain(out)) state.SkipWithError("the prompt did not match its whole chain");
}

BENCHMARK(BuildIndex)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(ApplyStored)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(20);
BENCHMARK(MatchLatency)->Arg(0)->Arg(1)->Arg(2)->Iterations(200000)->Unit(benchmark::kMicrosecond);
BENCHMARK(MatchCacheHot)->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) { return kvgate::bench::RunWithRatios(argc, argv, {}, ""); }
