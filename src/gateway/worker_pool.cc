#include "gateway/worker_pool.h"

#include "common/log.h"

namespace kvgate::gateway {
namespace {

// A health check: healthy when the worker answers GET /health with 200 in time.
class HealthProbe : public http::ResponseSink {
 public:
  HealthProbe(WorkerPool& pool, uint32_t id) : pool_(pool), id_(id) {}
  void OnHeaders(int status, std::string_view) override { status_ = status; }
  void OnBody(std::string_view) override {}
  void OnDone(const Status& s) override {
    if (s.ok() && status_ == 200) {
      pool_.ReportSuccess(id_, WorkerPool::Check::kProbe);
    } else if (s.code() != StatusCode::kResourceExhausted) {  // ours, not the worker's
      pool_.ReportFailure(id_, WorkerPool::Check::kProbe,
                          s.ok() ? fmt::format("health check status {}", status_) : s.message());
    }
  }

 private:
  WorkerPool& pool_;
  const uint32_t id_;
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

Status WorkerPool::Add(const WorkerConfig& config) {
  auto w = std::make_unique<Worker>();
  w->id = static_cast<uint32_t>(workers_.size());
  w->config = config;
  if (Status s = http::ParseBaseUrl(config.url, &w->endpoint); !s.ok()) return s;
  for (uint32_t rank = 0; rank < config.dp_size; ++rank) router_.AddWorker({w->id, rank});
  Subscribe(*w);
  workers_.push_back(std::move(w));
  health_.push_back(std::make_unique<Health>());
  return Status::Ok();
}

void WorkerPool::Subscribe(const Worker& w) {
  const WorkerConfig& c = w.config;
  if (c.kv_events.empty()) return;
  if (!engines::TraitsOf(c.engine).events_per_rank || c.dp_size == 1) {
    subscriber_.AddWorker({w.id, c.kv_events, c.kv_replay, std::nullopt});
    return;
  }
  // One publisher per rank, on the configured ports + rank.
  for (uint32_t rank = 0; rank < c.dp_size; ++rank) {
    subscriber_.AddWorker({w.id, engines::OffsetPort(c.kv_events, rank),
                           c.kv_replay.empty() ? "" : engines::OffsetPort(c.kv_replay, rank),
                           rank});
  }
}

bool WorkerPool::healthy(uint32_t id) const { return health_[id]->healthy; }

size_t WorkerPool::healthy_count() const {
  size_t n = 0;
  for (const auto& h : health_) n += h->healthy ? 1 : 0;
  return n;
}

void WorkerPool::ReportSuccess(uint32_t id, Check check) {
  Health& h = *health_[id];
  if (check == Check::kInference) {
    h.inference_failures = 0;
    return;
  }
  h.probe_failures = 0;
  h.seen_up = true;
  if (!h.healthy) SetHealthy(id, true);
}

void WorkerPool::ReportFailure(uint32_t id, Check check, std::string_view why) {
  Health& h = *health_[id];
  const uint32_t failures = ++(check == Check::kProbe ? h.probe_failures : h.inference_failures);
  if (failures >= limits_.unhealthy_after && h.healthy) {
    Log(LogLevel::kWarn, "worker {} ({}) is unhealthy after {} failed {}: {}", id,
        workers_[id]->config.url, failures, check == Check::kProbe ? "health checks" : "requests",
        why);
    SetHealthy(id, false);
  }
}

void WorkerPool::SetHealthy(uint32_t id, bool healthy) {
  std::lock_guard lock(transition_mu_);
  if (health_[id]->healthy == healthy) return;
  health_[id]->healthy = healthy;
  const Worker& w = *workers_[id];
  for (uint32_t rank = 0; rank < w.config.dp_size; ++rank) {
    if (healthy) {
      router_.AddWorker({id, rank});
    } else {
      router_.DrainWorker({id, rank});
    }
  }
  if (!w.config.kv_events.empty()) {
    // Down: its blocks leave the index. Back: a fresh stream rebuilds them from events.
    if (healthy) {
      Subscribe(w);
    } else {
      subscriber_.RemoveWorker(id);
    }
  }
  if (healthy) Log(LogLevel::kInfo, "worker {} ({}) is healthy again", id, w.config.url);
}

void WorkerPool::StartHealthChecks() {
  health_thread_ = std::thread([this] { HealthLoop(); });
}

void WorkerPool::HealthLoop() {
  std::unique_lock lock(stop_mu_);
  while (!stop_cv_.wait_for(lock, limits_.health_interval, [this] { return stop_; })) {
    for (const auto& w : workers_) {
      http::ClientRequest probe;
      probe.method = "GET";
      probe.target = "/health";
      probe.timeouts.connect = limits_.connect_timeout;
      probe.timeouts.first_byte = limits_.health_interval;
      probe.timeouts.idle = limits_.health_interval;
      client_.Fetch(w->endpoint, std::move(probe), std::make_shared<HealthProbe>(*this, w->id));
    }
  }
}

}  // namespace kvgate::gateway
