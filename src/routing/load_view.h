// Active load per worker: prefill tokens until a request's first token, decode blocks and
// the request itself until it finishes; and the prompts in flight (routing/
// in_flight_prefixes.h). Fed by this gateway's routing decisions and, from outside the
// router, by others' (peer gateway replicas) under their own request ids. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "kv/prefix_index.h"
#include "routing/in_flight_prefixes.h"

namespace kvgate::routing {

// Unique across processes: the top 16 bits name the process that made it (its origin),
// the rest count that process's requests.
using RequestId = uint64_t;
inline constexpr int kRequestOriginShift = 48;
inline RequestId MakeRequestId(uint16_t origin, uint64_t sequence) {
  return (uint64_t{origin} << kRequestOriginShift) |
         (sequence & ((1ull << kRequestOriginShift) - 1));
}
inline uint16_t RequestOrigin(RequestId id) {
  return static_cast<uint16_t>(id >> kRequestOriginShift);
}

struct WorkerLoad {
  uint64_t prefill_tokens = 0;
  uint64_t decode_blocks = 0;
  uint32_t requests = 0;
};

// One change to one request's load: what a replica tells its peers, and what they apply.
struct LoadChange {
  enum class Kind : uint8_t { kRouted, kFirstToken, kFinished };
  Kind kind = Kind::kRouted;
  RequestId id = 0;
  // kRouted: where, and what it adds there (OnRouted's terms).
  kv::WorkerKey worker{};
  uint32_t prefill_tokens = 0;
  uint32_t decode_blocks = 0;
  PrefixMarks prefix;  // its prompt, for the kv policy's in-flight credit (may be empty)
};

// Told of this process's own load changes, to share them with peer replicas. Called after
// the view changed, outside its lock, on the thread that changed it.
class LocalLoadListener {
 public:
  virtual ~LocalLoadListener() = default;
  virtual void OnLocalChange(const LoadChange& change) = 0;
};

class LoadView {
 public:
  // `local_origin`: the origin of this process's request ids; requests of other origins
  // count as peers'.
  explicit LoadView(uint16_t local_origin = 0) : local_origin_(local_origin) {}

  // Before any load arrives; null: none. Not owned.
  void SetLocalListener(LocalLoadListener* listener) { listener_ = listener; }

  void OnRouted(RequestId id, kv::WorkerKey worker, uint32_t prefill_tokens, uint32_t decode_blocks,
                PrefixMarks prefix = {});
  void OnFirstToken(RequestId id);
  void OnFinished(RequestId id);  // also for failed and cancelled requests
  // One of the three above, as a peer's change arrives.
  void Apply(const LoadChange& change);
  // Forgets a worker's load and its in-flight requests.
  void RemoveWorker(kv::WorkerKey worker);
  // Forgets everything requests of `origin` contributed (a peer that went silent).
  void RemoveOrigin(uint16_t origin);

  // The workers that requests in flight (everyone's) will have cached a prefix of
  // `sequence_hashes` on, and its length in blocks (InFlightPrefixes::Match).
  void MatchInFlight(std::span<const uint64_t> sequence_hashes,
                     std::vector<std::pair<kv::WorkerKey, uint32_t>>& out) const {
    prompts_.Match(sequence_hashes, out);
  }
  // Everyone's load on `worker`.
  WorkerLoad Load(kv::WorkerKey worker) const;
  // The part of it from this process's requests, and from other origins'.
  WorkerLoad LocalLoad(kv::WorkerKey worker) const;
  WorkerLoad PeersLoad(kv::WorkerKey worker) const;
  size_t InFlight() const;
  uint16_t local_origin() const { return local_origin_; }

 private:
  struct InFlightRequest {
    kv::WorkerKey worker;
    uint32_t prefill_tokens;  // 0 once the first token arrived
    uint32_t decode_blocks;
  };
  using Loads = absl::flat_hash_map<kv::WorkerKey, WorkerLoad>;
  Loads& LoadsOf(RequestId id) { return IsLocal(id) ? local_ : peers_; }
  void Forget(RequestId id, const InFlightRequest& r);

  bool IsLocal(RequestId id) const { return RequestOrigin(id) == local_origin_; }
  // Tells the listener of a change to a local request (after the lock is released).
  void Notify(const LoadChange& change) {
    LocalLoadListener* l = listener_.load(std::memory_order_acquire);
    if (l && IsLocal(change.id)) l->OnLocalChange(change);
  }

  const uint16_t local_origin_;
  std::atomic<LocalLoadListener*> listener_{nullptr};
  mutable std::mutex mu_;
  absl::flat_hash_map<RequestId, InFlightRequest> requests_;
  Loads local_, peers_;
  InFlightPrefixes prompts_;  // (its own lock)
};

}  // namespace kvgate::routing
