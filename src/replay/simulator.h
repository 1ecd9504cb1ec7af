// Offline replay: N simulated engines and the real router in one process, on simulated
// time. The router learns only from the engines' KV events, encoded and decoded through the
// real wire code and ordered by the real stream logic, exactly as on the live path.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "mocker/engine.h"
#include "mocker/transfer.h"
#include "replay/trace.h"
#include "routing/router.h"
#include "wire/encode.h"

namespace kvgate::replay {

struct ReplayOptions {
  uint32_t workers = 8;  // with prefill workers: the decode workers
  // Disaggregated serving (docs/design.md §12): prefill workers besides `workers`, the
  // prefill phase skipped when the decode worker lacks at most `min_prefill_tokens`, and
  // the KV moved between them at `transfer`'s bandwidth.
  uint32_t prefill_workers = 0;
  uint32_t min_prefill_tokens = 512;
  mocker::TransferConfig transfer;
  mocker::EngineConfig engine;  // per worker: blocks, block size, batching, timing
  uint32_t trace_block_size = 512;
  double speed = 1.0;  // arrival times are divided by this
  uint64_t seed = 0;
  wire::EncodeOptions event_format;
  routing::KvWeights kv_weights;
  // Gateway replicas (docs/design.md §11): requests go round-robin to `replicas` routers,
  // each with its own load view; with `sync`, each replica's load changes reach the others
  // `sync_delay_ms` later (as NATS deltas would). They share one index: each replica
  // subscribes to every worker's events, so their indexes are the same.
  uint32_t replicas = 1;
  bool sync = true;
  double sync_delay_ms = 0;
};

struct RequestMetrics {
  double arrival_ms = 0;
  double first_token_ms = -1;
  double finish_ms = -1;
  uint32_t prompt_tokens = 0;
  uint32_t cached_tokens = 0;     // what the engine actually served from its cache
  uint32_t predicted_blocks = 0;  // what the router expected
  uint32_t output_tokens = 0;
  uint32_t worker = 0;
  bool rejected = false;
  std::vector<float> itl_ms;  // gaps between consecutive tokens
};

struct PolicyRun {
  routing::Policy policy = routing::Policy::kKv;
  std::string label;  // names the run instead of the policy (e.g. "live")
  std::vector<RequestMetrics> requests;
  double wall_seconds = 0;
  uint64_t steps = 0;
  uint64_t event_batches = 0;
};

// `progress(done, total)` is called now and then (may be null).
PolicyRun RunOffline(const Trace& trace, routing::Policy policy, const ReplayOptions& options,
                     const std::function<void(size_t, size_t)>& progress = nullptr);

// Fraction of prompt tokens an infinite single cache would serve (whole blocks of
// `block_size`, at most prompt - 1 tokens per request, like the engines).
double IdealReuse(const Trace& trace, uint32_t block_size, uint32_t trace_block_size);
// The same for one pooled LRU cache of `capacity_blocks` (the fleet's total): the reuse no
// router could beat with that much memory (0: unbounded, IdealReuse).
double BoundReuse(const Trace& trace, uint32_t block_size, uint32_t trace_block_size,
                  uint64_t capacity_blocks);

}  // namespace kvgate::replay
