// The simulated engine's core: continuous batching over a BlockPool with chunked prefill,
// prefix caching and preemption, timed by the TimingModel. It has no clock of its own: the
// caller runs Step() and owns time, so the same core runs in real time (the mocker server)
// and in simulated time (offline replay).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "mocker/block_pool.h"
#include "mocker/timing_model.h"

namespace kvgate::mocker {

struct EngineConfig {
  uint32_t num_blocks = 16384;
  uint32_t block_size = 16;
  uint32_t max_num_seqs = 256;
  uint32_t max_num_batched_tokens = 8192;
  // Publish blocks as an engine running EAGLE speculative decoding does: each block's token
  // window reaches one token into the next block (sent as bigram pairs), so a block is
  // cached only once the token after it is known.
  bool eagle = false;
  TimingModel timing;
};

struct EngineRequest {
  uint64_t id = 0;
  std::vector<uint32_t> prompt;
  uint32_t max_tokens = 16;
  std::string lora_name;   // changes the block hash seed, as the engine's would
  std::string cache_salt;  // so does the request's cache_salt
  uint32_t sample = 0;     // which of a request's `n` samples: each generates its own tokens
  // Disaggregation (docs/design.md §12): leading prompt blocks whose KV a prefill worker
  // computed and sent. They are written into fresh blocks without compute, count as cached
  // and are published as stored, like the real engines' imported KV.
  uint32_t imported_blocks = 0;
};

// What a step produced, visible to clients when the step ends.
struct StepOutput {
  uint64_t request_id;
  uint32_t token;
  bool first;              // the request's first generated token
  bool finished;           // the request's last token
  uint32_t cached_tokens;  // prompt tokens served from the prefix cache (first token only)
};

struct StepResult {
  double duration_ms = 0;
  uint64_t prefill_tokens = 0;
  uint32_t decode_tokens = 0;
  std::vector<StepOutput> outputs;
  std::vector<wire::OutEvent> events;  // KV events of this step (one batch)
};

class Engine {
 public:
  explicit Engine(const EngineConfig& config);
  ~Engine();

  // Queues a request; false if it is empty or could never fit in the pool.
  bool Submit(EngineRequest request);
  bool HasWork() const { return !running_.empty() || !waiting_.empty(); }
  size_t running() const { return running_.size(); }
  size_t waiting() const { return waiting_.size(); }
  const BlockPool& pool() const { return pool_; }

  // Schedules and runs one step; its outputs and events belong to the step's end.
  StepResult Step();
  // Stops request `id` (its client left): its blocks are released, as when it finishes.
  // False when no such request is queued or running.
  bool Abort(uint64_t id);
  // Drops the prefix cache (an engine reset): AllBlocksCleared in the next step's events.
  void ResetCache() { pool_.ClearCache(); }

  // The deterministic token generated at position `index` of a completion.
  static uint32_t GeneratedToken(uint64_t prompt_hash, uint32_t index);

 private:
  struct Sequence;
  bool Admit(Sequence& seq, uint32_t& budget);
  bool EnsureBlocks(Sequence& seq, size_t tokens);
  void CommitFullBlocks(Sequence& seq);
  void Preempt(Sequence& seq);
  void Free(Sequence& seq);

  EngineConfig config_;
  BlockPool pool_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;
};

}  // namespace kvgate::mocker
