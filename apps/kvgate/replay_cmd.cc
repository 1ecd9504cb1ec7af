// `kvgate replay`: replays a request trace against simulated workers under each routing
// policy and reports prefix reuse and latency (docs/design.md §9, §10).
#include <fmt/format.h>
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <sstream>

#include "commands.h"
#include "replay/capacity.h"
#include "replay/live.h"
#include "replay/report.h"
#include "replay/simulator.h"

namespace kvgate::app {
namespace {

struct ReplayFlags {
  std::string trace;
  uint32_t synthetic_requests = 2000;
  uint32_t workers = 8;
  std::string policies = "kv,round_robin,random,least_loaded,approx";
  uint32_t num_blocks = 16384;
  uint32_t block_size = 16;
  uint32_t trace_block_size = 512;
  double speed = 1.0;
  uint64_t seed = 0;
  std::string out;
  std::string plot;
  std::string url;
  std::string model;
  routing::KvWeights kv;
  uint32_t replicas = 1;
  uint32_t prefill_workers = 0, decode_workers = 0;
  double transfer_gbps = 100;
  std::string sync = "on";
  double sync_delay_ms = 0;
  bool capacity = false;
  double slo_ttft_p90_ms = 2000;
};

int Replay(const ReplayFlags& f) {
  if (f.capacity && !f.url.empty()) {
    std::cerr << "kvgate replay: --capacity is for offline replays (no --url)\n";
    return 2;
  }
  std::vector<routing::Policy> policies;
  std::stringstream list(f.policies);
  for (std::string name; std::getline(list, name, ',');) {
    auto p = routing::ParsePolicy(name);
    if (!p) {
      std::cerr << "kvgate replay: unknown policy '" << name << "'\n";
      return 2;
    }
    policies.push_back(*p);
  }
  replay::Trace trace;
  if (f.trace.empty()) {
    replay::SyntheticTraceOptions o;
    o.seed = f.seed;
    o.requests = f.synthetic_requests;
    o.trace_block_size = f.trace_block_size;
    trace = replay::GenerateSyntheticTrace(o);
  } else if (Status s = replay::ReadMooncakeTrace(f.trace, trace); !s.ok()) {
    std::cerr << "kvgate replay: " << s.message() << '\n';
    return 1;
  }

  replay::ReplayOptions options;
  options.workers = f.workers;
  options.engine.num_blocks = f.num_blocks;
  options.engine.block_size = f.block_size;
  options.trace_block_size = f.trace_block_size;
  options.speed = f.speed;
  options.seed = f.seed;
  options.kv_weights = f.kv;
  if (f.sync != "on" && f.sync != "off") {
    std::cerr << "kvgate replay: --sync must be on or off\n";
    return 2;
  }
  if (f.replicas == 0) {
    std::cerr << "kvgate replay: --replicas must be positive\n";
    return 2;
  }
  options.replicas = f.replicas;
  if ((f.prefill_workers > 0) != (f.decode_workers > 0)) {
    std::cerr << "kvgate replay: --prefill-workers and --decode-workers go together\n";
    return 2;
  }
  if (f.prefill_workers > 0) {
    options.workers = f.decode_workers;
    options.prefill_workers = f.prefill_workers;
  }
  options.transfer.gbps = f.transfer_gbps;
  options.sync = f.sync == "on";
  options.sync_delay_ms = f.sync_delay_ms;

  replay::Report report;
  report.trace_path = trace.path;
  report.trace_requests = trace.requests.size();
  report.replicas = f.replicas;
  report.sync = options.sync;
  report.sync_delay_ms = f.sync_delay_ms;
  report.kv = f.kv;
  report.ideal_reuse = replay::IdealReuse(trace, f.block_size, f.trace_block_size);
  const uint32_t fleet = options.workers + options.prefill_workers;
  report.bound_reuse =
      replay::BoundReuse(trace, f.block_size, f.trace_block_size, uint64_t{fleet} * f.num_blocks);
  const bool tty = isatty(STDERR_FILENO);
  auto progress_for = [tty](std::string_view name) {
    return [tty, name](size_t done, size_t total) {
      if (!tty) return;
      const int width = 40;
      const int filled = static_cast<int>(width * done / std::max<size_t>(1, total));
      std::cerr << '\r' << name << " [" << std::string(filled, '#')
                << std::string(width - filled, ' ') << "] " << done << '/' << total
                << (done == total ? "\n" : "") << std::flush;
    };
  };
  if (!f.url.empty()) {
    // Live: the gateway routes with its own policy; one run, labelled "live".
    replay::LiveOptions live;
    live.url = f.url;
    live.model = f.model;
    live.trace_block_size = f.trace_block_size;
    live.speed = f.speed;
    replay::PolicyRun run;
    if (Status s = replay::RunLive(trace, live, &run, progress_for("live")); !s.ok()) {
      std::cerr << "kvgate replay: " << s.message() << '\n';
      if (run.requests.empty()) return 1;
    }
    uint32_t workers = 1;
    size_t succeeded = 0;
    for (const auto& r : run.requests) {
      workers = std::max(workers, r.worker + 1);
      succeeded += r.rejected ? 0 : 1;
    }
    if (succeeded == 0 && !run.requests.empty()) {
      std::cerr << "kvgate replay: no request succeeded against " << f.url << '\n';
      return 1;
    }
    report.policies.push_back(replay::Summarize(run, workers, f.block_size));
  }
  if (f.capacity) report.slo_ttft_p90_ms = f.slo_ttft_p90_ms;
  for (routing::Policy policy : f.url.empty() ? policies : std::vector<routing::Policy>{}) {
    const std::string name(routing::PolicyName(policy));
    auto run_at = [&](double speed) {
      replay::ReplayOptions o = options;
      o.speed = speed;
      const std::string label = f.capacity ? fmt::format("{} @{:.3g}x", name, speed) : name;
      return replay::Summarize(replay::RunOffline(trace, policy, o, progress_for(label)), fleet,
                               f.block_size);
    };
    if (!f.capacity) {
      report.policies.push_back(run_at(f.speed));
      continue;
    }
    // The last run that met the SLO is the one at capacity (the search only raises it).
    replay::PolicySummary at_capacity, last;
    replay::CapacitySearch search;
    search.start = f.speed;
    const replay::Capacity capacity = replay::FindCapacity(
        [&](double speed) {
          last = run_at(speed);
          const bool met = last.rejected == 0 && last.ttft_ms.p90 <= f.slo_ttft_p90_ms;
          if (met) at_capacity = last;
          return met;
        },
        search);
    replay::PolicySummary& summary =
        report.policies.emplace_back(capacity.speed > 0 ? std::move(at_capacity) : std::move(last));
    summary.capacity_speed = capacity.speed;
    summary.capacity_exceeded_at = capacity.exceeded_at;
    if (capacity.speed > 0) summary.reuse_at_half_capacity = run_at(capacity.speed / 2).reuse;
  }
  std::cout << replay::ReportTable(report);
  if (!f.out.empty()) {
    std::ofstream(f.out) << replay::ReportJson(report) << '\n';
  }
  if (!f.plot.empty()) {
    if (Status s = replay::WritePlots(report, f.plot); !s.ok()) {
      std::cerr << "kvgate replay: " << s.message() << '\n';
      return 1;
    }
  }
  return 0;
}

}  // namespace

void AddReplayCommand(CLI::App& app, int& exit_code) {
  static ReplayFlags f;
  CLI::App* cmd =
      app.add_subcommand("replay", "Replay a request trace and report KV reuse and latency");
  cmd->add_option("--trace", f.trace, "Mooncake JSONL trace (default: a synthetic trace)");
  cmd->add_option("--requests", f.synthetic_requests, "Requests in the synthetic trace")
      ->capture_default_str()
      ->check(CLI::Range(1u, 10000000u));
  cmd->add_option("--workers", f.workers, "Simulated workers")->capture_default_str();
  cmd->add_option("--policy", f.policies, "Comma-separated policies to compare")
      ->capture_default_str();
  cmd->add_option("--num-blocks", f.num_blocks, "KV blocks per worker")->capture_default_str();
  cmd->add_option("--block-size", f.block_size, "Tokens per KV block")
      ->capture_default_str()
      ->check(CLI::Range(1u, 4096u));
  cmd->add_option("--trace-block-size", f.trace_block_size, "Tokens per trace hash id")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  cmd->add_option("--speed", f.speed, "Arrival speed-up (timestamps are divided by it)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seed", f.seed, "Random seed")->capture_default_str();
  cmd->add_option("--out", f.out, "Write the JSON report here");
  cmd->add_option("--plot", f.plot,
                  "Write SVG plots (ttft_cdf.svg, reuse.svg) into this directory");
  cmd->add_option("--url", f.url,
                  "Replay live against a running gateway (e.g. http://127.0.0.1:8000): "
                  "streaming token-id completions at trace times; --policy is the gateway's");
  cmd->add_option("--model", f.model, "Model name for live requests (default: the gateway's)");
  cmd->add_option("--replicas", f.replicas, "Gateway replicas requests are spread over")
      ->capture_default_str();
  cmd->add_option("--prefill-workers", f.prefill_workers,
                  "Disaggregated: prefill workers (with --decode-workers; replaces --workers)");
  cmd->add_option("--decode-workers", f.decode_workers, "Disaggregated: decode workers");
  cmd->add_option("--transfer-gbps", f.transfer_gbps, "KV transfer bandwidth between workers")
      ->capture_default_str();
  cmd->add_option("--sync", f.sync, "Replicas share load (on|off)")->capture_default_str();
  cmd->add_option("--sync-delay-ms", f.sync_delay_ms,
                  "How late a replica's load reaches the others")
      ->capture_default_str();
  cmd->add_flag("--capacity", f.capacity,
                "Per policy, search for the highest --speed (starting from --speed) whose TTFT "
                "p90 meets --slo-ttft-p90-ms; reports capacity_speed and the run there");
  cmd->add_option("--slo-ttft-p90-ms", f.slo_ttft_p90_ms, "The SLO of --capacity")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--prefill-weight", f.kv.prefill_weight, "kv policy: weight of prefill blocks")
      ->capture_default_str();
  cmd->add_option("--decode-weight", f.kv.decode_weight,
                  "kv policy: weight of blocks held by decoding requests")
      ->capture_default_str();
  cmd->add_option("--request-weight", f.kv.request_weight, "kv policy: weight of active requests")
      ->capture_default_str();
  cmd->add_option("--reuse-weight", f.kv.reuse_weight,
                  "kv policy: bonus per cached block beyond the prefill it saves")
      ->capture_default_str();
  cmd->add_option("--temperature", f.kv.temperature, "kv policy: 0 = argmin, > 0 = sample")
      ->capture_default_str();
  cmd->callback([&exit_code] { exit_code = Replay(f); });
}

}  // namespace kvgate::app
