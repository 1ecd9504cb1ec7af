#include "metrics/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace kvgate::metrics {
namespace {

std::string EscapeLabel(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// `{a="x",b="y"}` plus an optional extra label (a histogram's `le`).
std::string Labels(const std::vector<std::string>& names, const LabelValues& values,
                   const std::string& extra = {}) {
  if (names.empty() && extra.empty()) return {};
  std::string out = "{";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) out += ',';
    out += fmt::format("{}=\"{}\"", names[i], EscapeLabel(i < values.size() ? values[i] : ""));
  }
  if (!extra.empty()) {
    if (!names.empty()) out += ',';
    out += extra;
  }
  return out + '}';
}

std::string Number(double v) { return fmt::format("{}", v); }

}  // namespace

CounterFamily::CounterFamily(std::string name, std::string help, std::vector<std::string> labels,
                             bool gauge)
    : name_(std::move(name)), help_(std::move(help)), labels_(std::move(labels)), gauge_(gauge) {}

void CounterFamily::Add(const LabelValues& labels, double delta) {
  std::lock_guard lock(mu_);
  values_[labels] += delta;
}

void CounterFamily::Set(const LabelValues& labels, double value) {
  std::lock_guard lock(mu_);
  values_[labels] = value;
}

void CounterFamily::Render(std::string& out) const {
  std::lock_guard lock(mu_);
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name_, help_, name_,
                     gauge_ ? "gauge" : "counter");
  for (const auto& [labels, value] : values_) {
    out += fmt::format("{}{} {}\n", name_, Labels(labels_, labels), Number(value));
  }
}

HistogramFamily::HistogramFamily(std::string name, std::string help,
                                 std::vector<std::string> labels, std::vector<double> bounds)
    : name_(std::move(name)),
      help_(std::move(help)),
      labels_(std::move(labels)),
      bounds_(std::move(bounds)) {}

void HistogramFamily::Observe(const LabelValues& labels, double value) {
  std::lock_guard lock(mu_);
  Series& s = series_[labels];
  if (s.buckets.empty()) s.buckets.resize(bounds_.size());
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  if (i < bounds_.size()) ++s.buckets[i];
  ++s.count;
  s.sum += value;
}

void HistogramFamily::Render(std::string& out) const {
  std::lock_guard lock(mu_);
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name_, help_, name_);
  for (const auto& [labels, s] : series_) {
    uint64_t cumulative = 0;
    for (size_t i = 0; i < bounds_.size(); ++i) {
      cumulative += s.buckets[i];
      out += fmt::format("{}_bucket{} {}\n", name_,
                         Labels(labels_, labels, fmt::format("le=\"{}\"", Number(bounds_[i]))),
                         cumulative);
    }
    out += fmt::format("{}_bucket{} {}\n", name_, Labels(labels_, labels, "le=\"+Inf\""), s.count);
    out += fmt::format("{}_sum{} {}\n", name_, Labels(labels_, labels), Number(s.sum));
    out += fmt::format("{}_count{} {}\n", name_, Labels(labels_, labels), s.count);
  }
}

std::vector<double> LatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
}

}  // namespace kvgate::metrics
