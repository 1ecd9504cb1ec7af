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

class CapturingReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      // Time per iteration in ns (lower is better); with repetitions, the median.
      if (r.run_type == Run::RT_Iteration || r.aggregate_name == "median") {
        per_iteration_ns_[r.run_name.str()] = r.GetAdjustedRealTime();
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }
  double ns(const std::string& name) const {
    auto it = per_iteration_ns_.find(name);
    return it == per_iteration_ns_.end() ? 0 : it->second;
  }

 private:
  std::map<std::string, double> per_iteration_ns_;
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
