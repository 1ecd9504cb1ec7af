// The gateway's own counters and histograms; gauges that mirror other components' state
// (load, health, KV event streams, index size) are read when /metrics is scraped.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "metrics/metrics.h"

namespace kvgate::cluster {
class LoadSync;
}
namespace kvgate::discovery {
class EtcdDiscovery;
}
namespace kvgate::events {
class Subscriber;
}
namespace kvgate::tokenizer {
class PrefixCache;
}
namespace kvgate::kv {
class PrefixIndex;
}
namespace kvgate::routing {
class Router;
}

namespace kvgate::gateway {

class Fidelity;
class Tenants;
class WaitQueue;
class WorkerPool;
using metrics::CounterFamily;
using metrics::HistogramFamily;
using metrics::LabelValues;
using metrics::LatencyBuckets;

struct GatewayMetrics {
  CounterFamily requests{
      "kvgate_requests_total", "Client requests by route and HTTP status.", {"route", "status"}};
  HistogramFamily request_seconds{"kvgate_request_duration_seconds",
                                  "Time from request received to response complete.",
                                  {"route"},
                                  LatencyBuckets()};
  HistogramFamily ttft_seconds{"kvgate_time_to_first_token_seconds",
                               "Time from request received to the first response byte.",
                               {"route"},
                               LatencyBuckets()};
  CounterFamily routed{"kvgate_routing_decisions_total", "Requests routed, by worker.", {"worker"}};
  CounterFamily predicted_blocks{"kvgate_predicted_overlap_blocks_total",
                                 "Cached prefix blocks the router predicted, by worker.",
                                 {"worker"}};
  CounterFamily prompt_blocks{
      "kvgate_routed_prompt_blocks_total", "Full prompt blocks of routed requests.", {}};
  CounterFamily retries{"kvgate_upstream_retries_total",
                        "Requests retried on another worker before any byte reached the client.",
                        {}};
  CounterFamily upstream_errors{"kvgate_upstream_errors_total",
                                "Failed upstream attempts (connect, timeout, 5xx, cut short).",
                                {"worker"}};
  CounterFamily prompt_fallback{
      "kvgate_prompt_fallback_total",
      "Requests routed without their prompt (the chat template failed), passed on unchanged.",
      {"reason"}};
  CounterFamily discovery_refused{"kvgate_discovery_refused_total",
                                  "Worker records refused (model or block size not the gateway's).",
                                  {"source", "reason"}};
  CounterFamily pd_requests{"kvgate_pd_requests_total",
                            "Requests with prefill and decode workers about, by how they ran.",
                            {"path"}};
  HistogramFamily pd_phase_seconds{"kvgate_pd_phase_seconds",
                                   "Disaggregated requests: time of each phase.",
                                   {"phase"},
                                   LatencyBuckets()};
  HistogramFamily queue_wait_seconds{"kvgate_queue_wait_seconds",
                                     "Time requests waited for a free worker, by tenant.",
                                     {"tenant"},
                                     LatencyBuckets()};
  CounterFamily queue_exits{"kvgate_queue_exits_total",
                            "Requests that left the wait queue without a worker, by reason.",
                            {"tenant", "reason"}};
  CounterFamily experts_invalid{"kvgate_routed_experts_invalid_total",
                                "Responses whose routed experts were missing or malformed.",
                                {}};
};

// The state /metrics mirrors, read when it is scraped.
struct MetricsSources {
  const std::atomic<int64_t>& in_flight;
  const WorkerPool& workers;
  const routing::Router& router;
  const events::Subscriber& subscriber;
  const kv::PrefixIndex& index;
  const Fidelity& fidelity;
  const Tenants& tenants;
  const WaitQueue& queue;
  const cluster::LoadSync* sync;               // null without NATS
  const discovery::EtcdDiscovery* etcd;        // null without etcd
  const tokenizer::PrefixCache* prompt_cache;  // null without a tokenizer or when off
};

// The whole Prometheus text of /metrics.
std::string MetricsText(const GatewayMetrics& metrics, const MetricsSources& sources);

}  // namespace kvgate::gateway
