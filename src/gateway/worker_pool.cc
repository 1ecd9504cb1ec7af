#include "gateway/worker_pool.h"

#include "common/log.h"

namespace kvgate::gateway {
namespace {

// A health check: healthy when the worker answers GET /health with 200 in time.
class HealthProbe : public http::ResponseSink {
 public:
  HealthProbe(WorkerPool& pool, uint32_t slot) : pool_(pool), slot_(slot) {}
  void OnHeaders(int status, std::string_view) override { status_ = status; }
  void OnBody(std::string_view) override {}
  void OnDone(const Status& s) override {
    if (s.ok() && status_ == 200) {
      pool_.ReportSuccess(slot_, WorkerPool::Check::kProbe);
    } else if (s.code() != StatusCode::kResourceExhausted) {  // ours, not the worker's
      pool_.ReportFailure(slot_, WorkerPool::Check::kProbe,
                          s.ok() ? fmt::format("health check status {}", status_) : s.message());
    }
  }

 private:
  WorkerPool& pool_;
  const uint32_t slot_;
  int status_ = 0;
};

}  // namespace

WorkerPool::WorkerPool(routing::Router& router, events::Subscriber& subscriber,
                       http::Client& client, const LimitsConfig& limits)
    : router_(router), subscriber_(subscriber), client_(client), limits_(limits) {}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (health_thread_.joinable()) health_thread_.join();
}

Status WorkerPool::Add(const WorkerConfig& config, WorkerSource source, bool routable_at_once,
                       uint32_t* slot) {
  auto s = std::make_unique<Slot>();
  s->worker.config = config;
  s->worker.source = source;
  if (Status st = http::ParseBaseUrl(config.url, &s->worker.endpoint); !st.ok()) return st;
  std::lock_guard members(members_mu_);
  if (ids_.contains(config.id)) {
    return {StatusCode::kAlreadyExists, fmt::format("a worker with id '{}' exists", config.id)};
  }
  s->worker.slot = static_cast<uint32_t>(slots_.size());
  Slot* added = s.get();
  if (!slots_.Append(std::move(s))) {
    return {StatusCode::kResourceExhausted,
            fmt::format("{} workers joined this gateway's life: restart it", kMaxSlots)};
  }
  ids_[config.id] = added->worker.slot;
  *slot = added->worker.slot;
  std::lock_guard transition(transition_mu_);
  Subscribe(*added);
  if (routable_at_once) {
    added->healthy = true;
    for (uint32_t rank = 0; rank < config.dp_size; ++rank) {
      router_.AddWorker({*slot, rank}, config.role == discovery::WorkerRole::kPrefill);
    }
  }
  return Status::Ok();
}

Status WorkerPool::Remove(std::string_view id) {
  std::lock_guard members(members_mu_);
  auto it = ids_.find(id);
  if (it == ids_.end()) return Status::NotFound(fmt::format("no worker '{}'", id));
  Slot& s = slots_[it->second];
  ids_.erase(it);
  std::lock_guard transition(transition_mu_);
  s.present = false;
  s.healthy = false;
  for (uint32_t rank = 0; rank < s.worker.config.dp_size; ++rank) {
    router_.DrainWorker({s.worker.slot, rank});
  }
  Unsubscribe(s);
  Log(LogLevel::kInfo, "worker {} ({}) left", s.worker.config.id, s.worker.config.url);
  return Status::Ok();
}

std::optional<uint32_t> WorkerPool::Find(std::string_view id) const {
  std::lock_guard lock(members_mu_);
  auto it = ids_.find(id);
  return it == ids_.end() ? std::nullopt : std::optional<uint32_t>(it->second);
}

void WorkerPool::Subscribe(Slot& s) {
  const Worker& w = s.worker;
  const WorkerConfig& c = w.config;
  if (c.kv_events.empty()) return;
  s.subscribed = true;
  if (!engines::TraitsOf(c.engine).events_per_rank || c.dp_size == 1) {
    subscriber_.AddWorker({w.slot, c.kv_events, c.kv_replay, std::nullopt});
    return;
  }
  // One publisher per rank, on the configured ports + rank.
  for (uint32_t rank = 0; rank < c.dp_size; ++rank) {
    subscriber_.AddWorker({w.slot, engines::OffsetPort(c.kv_events, rank),
                           c.kv_replay.empty() ? "" : engines::OffsetPort(c.kv_replay, rank),
                           rank});
  }
}

void WorkerPool::Unsubscribe(Slot& s) {
  if (s.subscribed.exchange(false)) subscriber_.RemoveWorker(s.worker.slot);
}

size_t WorkerPool::healthy_count() const {
  size_t n = 0;
  for (size_t i = 0; i < slots_.size(); ++i) n += slots_[i].healthy ? 1 : 0;
  return n;
}

size_t WorkerPool::count(WorkerSource source) const {
  size_t n = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    n += slots_[i].present && slots_[i].worker.source == source ? 1 : 0;
  }
  return n;
}

void WorkerPool::ReportSuccess(uint32_t slot, Check check) {
  Slot& s = slots_[slot];
  if (check == Check::kInference) {
    s.inference_failures = 0;
    return;
  }
  s.probe_failures = 0;
  s.seen_up = true;
  if (!s.healthy) SetHealthy(s, true);
}

void WorkerPool::ReportFailure(uint32_t slot, Check check, std::string_view why) {
  Slot& s = slots_[slot];
  const uint32_t failures = ++(check == Check::kProbe ? s.probe_failures : s.inference_failures);
  if (failures >= limits_.unhealthy_after && s.healthy) {
    Log(LogLevel::kWarn, "worker {} ({}) is unhealthy after {} failed {}: {}", s.worker.config.id,
        s.worker.config.url, failures, check == Check::kProbe ? "health checks" : "requests", why);
    SetHealthy(s, false);
  }
}

void WorkerPool::SetHealthy(Slot& s, bool healthy) {
  std::lock_guard lock(transition_mu_);
  if (s.healthy == healthy || !s.present) return;
  const Worker& w = s.worker;
  if (healthy) {
    // Down: a fresh stream rebuilds its blocks. Joining: routed once the replay of what it
    // already holds is in (the next passing check looks again).
    if (!s.subscribed) Subscribe(s);
    if (!w.config.kv_events.empty() && !subscriber_.CaughtUp(w.slot)) return;
  } else {
    Unsubscribe(s);  // its blocks leave the index
  }
  s.healthy = healthy;
  for (uint32_t rank = 0; rank < w.config.dp_size; ++rank) {
    if (healthy) {
      router_.AddWorker({w.slot, rank}, w.config.role == discovery::WorkerRole::kPrefill);
    } else {
      router_.DrainWorker({w.slot, rank});
    }
  }
  if (healthy) Log(LogLevel::kInfo, "worker {} ({}) is in routing", w.config.id, w.config.url);
}

void WorkerPool::StartHealthChecks() {
  health_thread_ = std::thread([this] { HealthLoop(); });
}

void WorkerPool::HealthLoop() {
  std::unique_lock lock(stop_mu_);
  while (!stop_cv_.wait_for(lock, limits_.health_interval, [this] { return stop_; })) {
    for (uint32_t slot = 0; slot < slots_.size(); ++slot) {
      if (!slots_[slot].present) continue;
      http::ClientRequest probe;
      probe.method = "GET";
      probe.target = "/health";
      probe.timeouts.connect = limits_.connect_timeout;
      probe.timeouts.first_byte = limits_.health_interval;
      probe.timeouts.idle = limits_.health_interval;
      client_.Fetch(worker(slot).endpoint, std::move(probe),
                    std::make_shared<HealthProbe>(*this, slot));
    }
  }
}

}  // namespace kvgate::gateway
