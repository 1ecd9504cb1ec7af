#include "replay/simulator.h"

#include <chrono>
#include <list>
#include <memory>
#include <queue>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "events/stream_state.h"
#include "kv/block_hash.h"
#include "kv/prefix_index.h"
#include "wire/decode.h"

namespace kvgate::replay {
namespace {

// One worker's event stream into the index: the live path minus the socket.
class EventPipe : public events::StreamActions {
 public:
  EventPipe(kv::PrefixIndex& index, uint32_t worker)
      : index_(index), worker_(worker), state_(*this, /*replay_available=*/false) {}

  void Publish(const std::string& payload) { state_.OnLive(next_seq_++, payload); }

  void Apply(uint64_t, std::string_view payload) override {
    if (!wire::DecodeEventBatch(payload, batch_).ok()) return;
    index_.ApplyBatch({worker_, 0}, batch_, stats_);
  }
  void Restart() override { index_.RemoveWorker(worker_); }
  void RequestReplay(uint64_t) override {}

 private:
  kv::PrefixIndex& index_;
  uint32_t worker_;
  events::StreamState state_;
  uint64_t next_seq_ = 0;
  wire::DecodedBatch batch_;
  kv::ApplyStats stats_;
};

struct SimEvent {
  enum Kind : uint8_t { kArrival, kStepDone, kLoadDelta, kTransferDone };
  double t;
  uint64_t order;  // FIFO among equal times, for determinism
  Kind kind;
  uint32_t index;  // request (arrival, transfer done), worker (step done) or delta
  bool operator>(const SimEvent& o) const { return t != o.t ? t > o.t : order > o.order; }
};

// A replica's load change on its way to the other replicas.
struct LoadDelta {
  uint32_t from;  // the replica that made it
  routing::LoadChange change;
};

// Collects one replica's own load changes (what LoadSync would publish).
class DeltaCollector : public routing::LocalLoadListener {
 public:
  DeltaCollector(uint32_t replica, std::vector<LoadDelta>& out) : replica_(replica), out_(out) {}
  void OnLocalChange(const routing::LoadChange& change) override {
    out_.push_back({replica_, change});
  }

 private:
  const uint32_t replica_;
  std::vector<LoadDelta>& out_;
};

}  // namespace

PolicyRun RunOffline(const Trace& trace, routing::Policy policy, const ReplayOptions& options,
                     const std::function<void(size_t, size_t)>& progress) {
  const auto wall_start = std::chrono::steady_clock::now();
  const uint32_t bs = options.engine.block_size;
  kv::PrefixIndex index(bs);
  routing::RouterConfig rc;
  rc.policy = policy;
  rc.block_size = bs;
  rc.kv = options.kv_weights;
  rc.seed = options.seed;
  rc.approx.capacity_blocks = options.engine.num_blocks;
  const uint32_t replicas = std::max<uint32_t>(1, options.replicas);
  std::vector<LoadDelta> deltas;  // published, delivered by kLoadDelta events
  std::vector<std::unique_ptr<routing::Router>> routers;
  std::vector<std::unique_ptr<DeltaCollector>> collectors;
  for (uint32_t r = 0; r < replicas; ++r) {
    rc.request_origin = static_cast<uint16_t>(r + 1);
    rc.seed = options.seed + r;
    routers.push_back(std::make_unique<routing::Router>(rc, &index));
    if (replicas > 1 && options.sync) {
      collectors.push_back(std::make_unique<DeltaCollector>(r, deltas));
      routers.back()->loads().SetLocalListener(collectors.back().get());
    }
  }

  // Workers [0, workers) serve whole requests or decode; the prefill workers follow.
  const uint32_t total = options.workers + options.prefill_workers;
  auto is_prefill = [&](uint32_t w) { return w >= options.workers; };
  std::vector<std::unique_ptr<mocker::Engine>> engines;
  std::vector<std::unique_ptr<EventPipe>> pipes;
  std::vector<mocker::StepResult> pending(total);
  std::vector<bool> busy(total, false);
  for (uint32_t w = 0; w < total; ++w) {
    engines.push_back(std::make_unique<mocker::Engine>(options.engine));
    pipes.push_back(std::make_unique<EventPipe>(index, w));
    for (auto& router : routers) router->AddWorker({w, 0}, is_prefill(w));
  }

  PolicyRun run;
  run.policy = policy;
  run.requests.resize(trace.requests.size());
  std::vector<routing::RequestId> route_ids(trace.requests.size(), 0);
  // Which replica routed each request (round-robin by arrival): it hears how it goes.
  auto router_of = [&](uint32_t request) -> routing::Router& {
    return *routers[request % replicas];
  };
  std::vector<double> last_token(trace.requests.size(), 0);
  // Requests with a prefill phase: its route, their decode worker, the prompt until it goes
  // there.
  struct Prefilled {
    routing::RequestId id = 0;
    uint32_t decode_worker = 0;
    std::vector<uint32_t> tokens;
  };
  absl::flat_hash_map<uint32_t, Prefilled> prefilled;

  std::priority_queue<SimEvent, std::vector<SimEvent>, std::greater<>> queue;
  uint64_t order = 0;
  for (uint32_t i = 0; i < trace.requests.size(); ++i) {
    queue.push({trace.requests[i].timestamp_ms / options.speed, order++, SimEvent::kArrival, i});
  }

  auto start_step = [&](uint32_t w, double now) {
    pending[w] = engines[w]->Step();
    ++run.steps;
    const mocker::StepResult& r = pending[w];
    if (r.prefill_tokens == 0 && r.decode_tokens == 0 && r.outputs.empty()) {
      busy[w] = false;  // nothing could be scheduled; the next arrival wakes the engine
      return;
    }
    busy[w] = true;
    queue.push({now + r.duration_ms, order++, SimEvent::kStepDone, w});
  };

  std::vector<uint64_t> local;
  size_t arrived = 0;
  const size_t progress_every = std::max<size_t>(1, trace.requests.size() / 100);
  // Deltas published while handling an event leave for the other replicas after the delay.
  size_t deltas_sent = 0;
  auto send_deltas = [&](double now) {
    for (; deltas_sent < deltas.size(); ++deltas_sent) {
      queue.push({now + options.sync_delay_ms, order++, SimEvent::kLoadDelta,
                  static_cast<uint32_t>(deltas_sent)});
    }
  };
  auto deliver = [&](const LoadDelta& d) {
    for (uint32_t r = 0; r < replicas; ++r) {
      if (r != d.from) routers[r]->loads().Apply(d.change);
    }
  };
  while (!queue.empty()) {
    const SimEvent ev = queue.top();
    queue.pop();
    if (ev.kind == SimEvent::kLoadDelta) {
      deliver(deltas[ev.index]);
      continue;
    }
    if (ev.kind == SimEvent::kTransferDone) {
      // The prompt's KV is on its decode worker: it decodes from there.
      Prefilled& p = prefilled.at(ev.index);
      const uint32_t w = p.decode_worker;
      const auto blocks = static_cast<uint32_t>((p.tokens.size() - 1) / bs);
      engines[w]->Submit({ev.index, std::move(p.tokens), trace.requests[ev.index].output_length, "",
                          "", 0, blocks});
      if (!busy[w]) start_step(w, ev.t);
      continue;
    }
    if (ev.kind == SimEvent::kArrival) {
      const TraceRequest& tr = trace.requests[ev.index];
      RequestMetrics& m = run.requests[ev.index];
      std::vector<uint32_t> tokens = PromptTokens(tr, options.trace_block_size);
      m.arrival_ms = ev.t;
      m.prompt_tokens = static_cast<uint32_t>(tokens.size());
      local.clear();
      kv::AppendLocalBlockHashes(tokens, bs, kv::kDefaultSeed, false, local);
      routing::RouteRequest route;
      route.local_hashes = local;
      route.prompt_tokens = m.prompt_tokens;
      routing::Router& router = router_of(ev.index);
      auto decision = router.Route(route);
      if (progress && ++arrived % progress_every == 0) progress(arrived, trace.requests.size());
      if (!decision) {
        m.rejected = true;
        continue;
      }
      uint32_t w = decision->worker.worker;
      m.worker = w;
      m.predicted_blocks = decision->cached_blocks;
      route_ids[ev.index] = decision->id;
      const uint64_t held =
          std::min<uint64_t>(uint64_t{decision->cached_blocks} * bs, tokens.size());
      if (options.prefill_workers > 0 && tokens.size() - held > options.min_prefill_tokens) {
        route.prefill_phase = true;
        if (auto p = router.Route(route)) {
          // The prefill phase first: one token on a prefill worker, then the KV moves.
          m.predicted_blocks = p->cached_blocks;
          w = p->worker.worker;
          prefilled[ev.index] = {p->id, decision->worker.worker, tokens};
        }
      }
      const uint32_t max_tokens = is_prefill(w) ? 1 : tr.output_length;
      if (!engines[w]->Submit({ev.index, std::move(tokens), max_tokens, "", "", 0, 0})) {
        m.rejected = true;
        router.OnFailed(decision->id);
        send_deltas(ev.t);
        continue;
      }
      if (!busy[w]) start_step(w, ev.t);
      send_deltas(ev.t);
      continue;
    }
    const uint32_t w = ev.index;
    mocker::StepResult& r = pending[w];
    for (const mocker::StepOutput& o : r.outputs) {
      RequestMetrics& m = run.requests[o.request_id];
      const auto request = static_cast<uint32_t>(o.request_id);
      if (is_prefill(w)) {
        // Prefill done (its one token is not the client's): the KV moves to the decode
        // worker, which does not prefill it.
        Prefilled& p = prefilled.at(request);
        m.cached_tokens = o.cached_tokens;  // what a cache saved is counted where it was
        router_of(request).OnFinished(p.id);
        router_of(request).OnFirstToken(route_ids[request]);
        const auto blocks = static_cast<uint32_t>((p.tokens.size() - 1) / bs);
        queue.push(
            {ev.t + mocker::TransferMs(options.transfer, blocks, bs, options.engine.timing.speedup),
             order++, SimEvent::kTransferDone, request});
        continue;
      }
      if (o.first) {
        m.first_token_ms = ev.t;
        if (!prefilled.contains(request)) m.cached_tokens = o.cached_tokens;
        router_of(o.request_id).OnFirstToken(route_ids[o.request_id]);
      } else {
        m.itl_ms.push_back(static_cast<float>(ev.t - last_token[o.request_id]));
      }
      last_token[o.request_id] = ev.t;
      ++m.output_tokens;
      if (o.finished) {
        m.finish_ms = ev.t;
        router_of(o.request_id).OnFinished(route_ids[o.request_id]);
        prefilled.erase(request);
      }
    }
    if (!r.events.empty()) {
      pipes[w]->Publish(wire::EncodeEventBatch(ev.t / 1000, 0, r.events, options.event_format));
      ++run.event_batches;
    }
    if (engines[w]->HasWork()) {
      start_step(w, ev.t);
    } else {
      busy[w] = false;
    }
    send_deltas(ev.t);
  }
  if (progress) progress(trace.requests.size(), trace.requests.size());
  run.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return run;
}

double IdealReuse(const Trace& trace, uint32_t block_size, uint32_t trace_block_size) {
  return BoundReuse(trace, block_size, trace_block_size, 0);
}

double BoundReuse(const Trace& trace, uint32_t block_size, uint32_t trace_block_size,
                  uint64_t capacity_blocks) {
  // An LRU of sequence hashes, most recent first; capacity 0: nothing is ever evicted.
  std::list<uint64_t> lru;
  absl::flat_hash_map<uint64_t, std::list<uint64_t>::iterator> cached;
  uint64_t hits = 0, total = 0;
  std::vector<uint64_t> local, seq;
  for (const TraceRequest& r : trace.requests) {
    const std::vector<uint32_t> tokens = PromptTokens(r, trace_block_size);
    local.clear();
    seq.clear();
    kv::AppendLocalBlockHashes(tokens, block_size, kv::kDefaultSeed, false, local);
    kv::SequenceHashes(local, seq);
    const size_t limit = (tokens.size() - 1) / block_size;
    size_t hit = 0;
    while (hit < limit && hit < seq.size() && cached.contains(seq[hit])) ++hit;
    hits += hit * block_size;
    total += tokens.size();
    // Touched last block first, so a prefix outlives its tails (engines free in that order).
    for (auto h = seq.rbegin(); h != seq.rend(); ++h) {
      if (auto it = cached.find(*h); it != cached.end()) {
        lru.splice(lru.begin(), lru, it->second);
      } else {
        cached.emplace(*h, lru.insert(lru.begin(), *h));
      }
    }
    while (capacity_blocks > 0 && lru.size() > capacity_blocks) {
      cached.erase(lru.back());
      lru.pop_back();
    }
  }
  return total == 0 ? 0 : static_cast<double>(hits) / static_cast<double>(total);
}

}  // namespace kvgate::replay
