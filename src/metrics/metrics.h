// The few Prometheus metric kinds the gateway exports, rendered in the text exposition
// format: labelled counters and gauges, and fixed-bucket histograms. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace kvgate::metrics {

// Label values in declaration order of the family's label names.
using LabelValues = std::vector<std::string>;

class CounterFamily {
 public:
  CounterFamily(std::string name, std::string help, std::vector<std::string> labels,
                bool gauge = false);
  void Add(const LabelValues& labels, double delta = 1);
  void Set(const LabelValues& labels, double value);  // gauges
  void Render(std::string& out) const;

 private:
  const std::string name_, help_;
  const std::vector<std::string> labels_;
  const bool gauge_;
  mutable std::mutex mu_;
  std::map<LabelValues, double> values_;
};

class HistogramFamily {
 public:
  HistogramFamily(std::string name, std::string help, std::vector<std::string> labels,
                  std::vector<double> bounds);
  void Observe(const LabelValues& labels, double value);
  void Render(std::string& out) const;

 private:
  struct Series {
    std::vector<uint64_t> buckets;  // cumulative at render time only
    uint64_t count = 0;
    double sum = 0;
  };
  const std::string name_, help_;
  const std::vector<std::string> labels_;
  const std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::map<LabelValues, Series> series_;
};

// Seconds, from 1 ms to 2 minutes: TTFT and request latency.
std::vector<double> LatencyBuckets();

}  // namespace kvgate::metrics
