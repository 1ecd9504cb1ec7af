// EventBatch decode throughput on realistic batches (32 stored events x 4 blocks x 16
// tokens), next to XXH3-64 over the same bytes: a ceiling for any single pass over them.
#include <xxhash.h>

#include <random>

#include "bench_ratio.h"
#include "wire/decode.h"
#include "wire/encode.h"

namespace {

using namespace kvgate::wire;

std::string MakePayload(EventFormat format, HashFormat hashes, double wide_fraction) {
  std::mt19937_64 rng(42);
  std::bernoulli_distribution wide(wide_fraction);
  std::vector<OutEvent> events;
  for (int e = 0; e < 32; ++e) {
    StoredBlocks s;
    for (int b = 0; b < 4; ++b) s.block_hashes.push_back(rng());
    s.parent_hash = rng();
    for (int t = 0; t < 64; ++t) {
      s.token_ids.push_back(wide(rng) ? (uint64_t{1} << 62) + rng() % 1000 : rng() % 151936);
    }
    s.block_size = 16;
    events.push_back(std::move(s));
  }
  return EncodeEventBatch(1.0, 0, events, {format, hashes});
}

void Decode(benchmark::State& state, EventFormat format, HashFormat hashes, double wide) {
  const std::string payload = MakePayload(format, hashes, wide);
  DecodedBatch batch;
  for (auto _ : state) {
    if (!DecodeEventBatch(payload, batch).ok()) state.SkipWithError("decode failed");
    benchmark::DoNotOptimize(batch.tokens.data());
  }
  state.SetBytesProcessed(state.iterations() * payload.size());
  state.counters["blocks/s"] =
      benchmark::Counter(state.iterations() * 128.0, benchmark::Counter::kIsRate);
  state.counters["payload_bytes"] = payload.size();
}

void Xxh3(benchmark::State& state, EventFormat format, HashFormat hashes) {
  const std::string payload = MakePayload(format, hashes, 0);
  for (auto _ : state) benchmark::DoNotOptimize(XXH3_64bits(payload.data(), payload.size()));
  state.SetBytesProcessed(state.iterations() * payload.size());
}

BENCHMARK_CAPTURE(Decode, vllm_map_int, EventFormat::kVllmMap, HashFormat::kInt, 0.0);
BENCHMARK_CAPTURE(Decode, vllm_map_int_wide1pct, EventFormat::kVllmMap, HashFormat::kInt, 0.01);
BENCHMARK_CAPTURE(Decode, vllm_positional_bytes, EventFormat::kVllmPositional, HashFormat::kBytes,
                  0.0);
BENCHMARK_CAPTURE(Decode, sglang_int, EventFormat::kSglang, HashFormat::kInt, 0.0);
BENCHMARK_CAPTURE(Xxh3, vllm_map_int, EventFormat::kVllmMap, HashFormat::kInt);
// Fixed iteration counts, for instruction counting under callgrind (timing on a shared
// machine is too noisy to resolve a few percent):
//   valgrind --tool=callgrind --toggle-collect='kvgate::wire::DecodeEventBatch*'
//     build/bench/decode_bench --benchmark_filter=fixed_plain --benchmark_repetitions=1
BENCHMARK_CAPTURE(Decode, fixed_plain, EventFormat::kVllmMap, HashFormat::kInt, 0.0)
    ->Iterations(200);
BENCHMARK_CAPTURE(Decode, fixed_wide1pct, EventFormat::kVllmMap, HashFormat::kInt, 0.01)
    ->Iterations(200);

}  // namespace

int main(int argc, char** argv) {
  return kvgate::bench::RunWithRatios(argc, argv,
                                      {{"Decode/vllm_map_int", "Xxh3/vllm_map_int"},
                                       {"Decode/vllm_map_int_wide1pct", "Decode/vllm_map_int"}},
                                      "time per payload; 1.0 = same speed");
}
