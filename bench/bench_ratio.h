// Runs the registered benchmarks and, afterwards, prints each benchmark's throughput as a
// ratio to a reference benchmark of the same run.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace kvgate::bench {

// Prints as the console reporter does and keeps, per run name, the time per iteration (in
// the benchmark's unit; the median with repetitions) and the counters.
class CapturingReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.run_type == Run::RT_Iteration || r.aggregate_name == "median") {
        Captured& c = runs_[r.run_name.str()];
        c.time = r.GetAdjustedRealTime();
        for (const auto& [key, counter] : r.counters) c.counters[key] = counter.value;
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }
  // By exact run name, or else the first run whose name contains `name`; 0 if none.
  double ns(const std::string& name) const { return Find(name) ? Find(name)->time : 0; }
  double counter(const std::string& name, const std::string& key) const {
    const Captured* c = Find(name);
    if (c == nullptr) return 0;
    auto it = c->counters.find(key);
    return it == c->counters.end() ? 0 : it->second;
  }

 private:
  struct Captured {
    double time = 0;
    std::map<std::string, double> counters;
  };
  const Captured* Find(const std::string& name) const {
    auto it = runs_.find(name);
    if (it != runs_.end()) return &it->second;
    for (const auto& [run, c] : runs_) {
      if (run.find(name) != std::string::npos) return &c;
    }
    return nullptr;
  }
  std::map<std::string, Captured> runs_;
};

// `pairs`: (benchmark, reference); prints how many times slower the benchmark is.
inline int RunWithRatios(int argc, char** argv,
                         const std::vector<std::pair<std::string, std::string>>& pairs,
                         const char* what) {
  // Shared machines are noisy: default to the median of 9 repetitions, interleaved so that
  // drift hits a benchmark and its reference alike.
  std::vector<char*> args(argv, argv + argc);
  std::string repetitions = "--benchmark_repetitions=9";
  std::string aggregates = "--benchmark_report_aggregates_only=true";
  std::string interleave = "--benchmark_enable_random_interleaving=true";
  bool has_repetitions = false;
  for (char* a : args) has_repetitions |= std::string(a).starts_with("--benchmark_repetitions");
  if (!has_repetitions) {
    args.push_back(repetitions.data());
    args.push_back(aggregates.data());
    args.push_back(interleave.data());
  }
  argc = static_cast<int>(args.size());
  argv = args.data();
  benchmark::Initialize(&argc, argv);
  CapturingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  for (const auto& [name, reference] : pairs) {
    const double a = reporter.ns(name), b = reporter.ns(reference);
    if (a > 0 && b > 0) std::printf("ratio %s / %s = %.3f (%s)\n", name.c_str(),
                                    reference.c_str(), a / b, what);
  }
  benchmark::Shutdown();
  return 0;
}

// Runs a reference implementation's command and returns the first line it prints (empty if
// it could not run): references measure themselves and print their result.
inline std::string ReferenceOutput(const std::string& command) {
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return "";
  char line[512] = {0};
  const bool ok = std::fgets(line, sizeof line, p) != nullptr;
  pclose(p);
  return ok ? std::string(line) : std::string();
}

}  // namespace kvgate::bench
