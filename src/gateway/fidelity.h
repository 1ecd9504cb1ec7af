// The gateway's check of itself, per worker (docs/design.md §14): does the engine count a
// request's prompt as kvgate does, and does it report the cache hits kvgate predicted? A
// worker whose counts keep disagreeing, or whose canary failed, is flagged once (a log line
// saying what to check) and keeps serving: it still works, only its routing is blind.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/slot_table.h"
#include "engines/engines.h"

namespace kvgate::gateway {

struct WorkerFidelity {
  uint64_t requests = 0;  // responses whose prompt token count could be compared
  uint64_t prompt_tokens_mismatch = 0;
  uint64_t predicted_cached_tokens = 0;
  uint64_t reported_cached_tokens = 0;
  uint64_t prompt_tokens = 0;  // the engine's count over those responses (for the hit rate)
  std::string canary;          // "" until one ran: ok, no_events, block_size_mismatch, ...
  std::string flag;            // why the worker is flagged; empty: it is not
};

class Fidelity {
 public:
  // Consecutive disagreeing responses after which a worker is flagged.
  static constexpr uint32_t kFlagAfter = 3;

  // Room for `max_workers` slots; Grow makes them usable.
  explicit Fidelity(size_t max_workers);
  // Makes slots below `workers` usable (a worker joined). Calls must not race each other.
  void Grow(size_t workers);

  // One successful response of `worker`: kvgate's own prompt token count (0: kvgate has
  // none, e.g. without a tokenizer), the cached tokens it predicted, what the engine said.
  void Observe(uint32_t worker, uint64_t own_prompt_tokens, uint64_t predicted_cached_tokens,
               const engines::TokenCounts& reported);
  void SetCanary(uint32_t worker, const std::string& result);

  WorkerFidelity Get(uint32_t worker) const;
  size_t size() const { return workers_.size(); }

 private:
  struct Entry {
    std::atomic<uint64_t> requests{0}, mismatches{0}, predicted{0}, reported{0}, prompt{0};
    std::atomic<uint32_t> mismatch_run{0};
    mutable std::mutex mu;  // guards the strings
    std::string canary, flag;
  };
  void Flag(uint32_t worker, Entry& e, const std::string& reason);

  SlotTable<Entry> workers_;
};

}  // namespace kvgate::gateway
