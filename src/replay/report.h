// Turns replay runs into the report of docs/design.md §10: per-policy reuse and latency
// percentiles as JSON, a terminal table, and SVG plots.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "replay/simulator.h"

namespace kvgate::replay {

struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0;
};

struct PolicySummary {
  std::string policy;
  size_t requests = 0;  // completed
  size_t rejected = 0;
  double reuse = 0;            // cached prompt tokens / prompt tokens
  double predicted_reuse = 0;  // what the router predicted (kv, approx)
  Percentiles ttft_ms, itl_ms, e2e_ms;
  double throughput_rps = 0;
  std::vector<size_t> requests_per_worker;
  double wall_seconds = 0;
  std::vector<double> ttft_sorted;  // for plots
  // Set by a capacity search (`replay --capacity`), which reports the run at capacity_speed.
  double capacity_speed = 0;          // the highest speed found to meet the SLO; 0: none
  double capacity_exceeded_at = 0;    // the lowest speed found to miss it above that
  double reuse_at_half_capacity = 0;  // a run at half of capacity_speed
};

PolicySummary Summarize(const PolicyRun& run, uint32_t workers, uint32_t block_size);

struct Report {
  std::string trace_path;
  size_t trace_requests = 0;
  double ideal_reuse = 0;  // one infinite cache
  double bound_reuse = 0;  // one LRU cache of the fleet's total blocks
  // The gateways the runs modelled (docs/design.md §11).
  uint32_t replicas = 1;
  bool sync = true;
  double sync_delay_ms = 0;
  double slo_ttft_p90_ms = 0;  // > 0: each policy's capacity was searched for under this SLO
  routing::KvWeights kv;       // the kv policy's weights, so that runs can be compared
  std::vector<PolicySummary> policies;
};

std::string ReportJson(const Report& report);
std::string ReportTable(const Report& report);
// Writes ttft_cdf.svg, reuse.svg and index.html (the report's table with both plots) into
// `dir` (created if missing).
Status WritePlots(const Report& report, const std::string& dir);

}  // namespace kvgate::replay
