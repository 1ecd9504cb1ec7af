#include "replay/report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "common/html_escape.h"

namespace kvgate::replay {
namespace {

namespace json = boost::json;

// Nearest-rank percentile of sorted values.
double At(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(q * sorted.size()));
  return sorted[std::min(sorted.size() - 1, rank == 0 ? 0 : rank - 1)];
}

Percentiles Of(std::vector<double>& values) {
  std::sort(values.begin(), values.end());
  return {At(values, 0.50), At(values, 0.90), At(values, 0.99)};
}

json::object PercentilesJson(const Percentiles& p) {
  return {{"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}};
}

}  // namespace

PolicySummary Summarize(const PolicyRun& run, uint32_t workers, uint32_t block_size) {
  PolicySummary s;
  s.policy = run.label.empty() ? std::string(routing::PolicyName(run.policy)) : run.label;
  s.requests_per_worker.assign(workers, 0);
  s.wall_seconds = run.wall_seconds;
  std::vector<double> ttft, itl, e2e;
  uint64_t prompt = 0, cached = 0, predicted = 0;
  double first_arrival = 1e300, last_finish = 0;
  for (const RequestMetrics& m : run.requests) {
    if (m.rejected || m.finish_ms < 0) {
      ++s.rejected;
      continue;
    }
    ++s.requests;
    ++s.requests_per_worker[m.worker];
    prompt += m.prompt_tokens;
    cached += m.cached_tokens;
    // Engines serve at most prompt - 1 tokens from cache, in whole blocks.
    const uint64_t servable = (m.prompt_tokens - 1) / block_size * block_size;
    predicted += std::min<uint64_t>(uint64_t{m.predicted_blocks} * block_size, servable);
    ttft.push_back(m.first_token_ms - m.arrival_ms);
    e2e.push_back(m.finish_ms - m.arrival_ms);
    itl.insert(itl.end(), m.itl_ms.begin(), m.itl_ms.end());
    first_arrival = std::min(first_arrival, m.arrival_ms);
    last_finish = std::max(last_finish, m.finish_ms);
  }
  s.reuse = prompt == 0 ? 0 : static_cast<double>(cached) / prompt;
  s.predicted_reuse = prompt == 0 ? 0 : static_cast<double>(predicted) / prompt;
  s.ttft_ms = Of(ttft);
  s.ttft_sorted = ttft;
  s.itl_ms = Of(itl);
  s.e2e_ms = Of(e2e);
  const double span_s = (last_finish - first_arrival) / 1000;
  s.throughput_rps = span_s > 0 ? s.requests / span_s : 0;
  return s;
}

std::string ReportJson(const Report& report) {
  json::array policies;
  for (const PolicySummary& p : report.policies) {
    json::array per_worker(p.requests_per_worker.begin(), p.requests_per_worker.end());
    json::object& entry =
        policies
            .emplace_back(json::object{{"policy", p.policy},
                                       {"requests", p.requests},
                                       {"rejected", p.rejected},
                                       {"reuse", p.reuse},
                                       {"predicted_reuse", p.predicted_reuse},
                                       {"ttft_ms", PercentilesJson(p.ttft_ms)},
                                       {"itl_ms", PercentilesJson(p.itl_ms)},
                                       {"e2e_ms", PercentilesJson(p.e2e_ms)},
                                       {"throughput_rps", p.throughput_rps},
                                       {"requests_per_worker", std::move(per_worker)},
                                       {"wall_seconds", p.wall_seconds}})
            .as_object();
    if (report.slo_ttft_p90_ms > 0) {
      entry["capacity_speed"] = p.capacity_speed;
      entry["capacity_exceeded_at"] = p.capacity_exceeded_at;
      entry["reuse_at_half_capacity"] = p.reuse_at_half_capacity;
    }
  }
  json::object out{{"trace", json::object{{"path", report.trace_path},
                                          {"requests", report.trace_requests},
                                          {"ideal_reuse", report.ideal_reuse},
                                          {"bound_reuse", report.bound_reuse}}},
                   {"gateways", json::object{{"replicas", report.replicas},
                                             {"sync", report.sync},
                                             {"sync_delay_ms", report.sync_delay_ms}}},
                   {"kv_policy", json::object{{"prefill_weight", report.kv.prefill_weight},
                                              {"decode_weight", report.kv.decode_weight},
                                              {"request_weight", report.kv.request_weight},
                                              {"reuse_weight", report.kv.reuse_weight},
                                              {"temperature", report.kv.temperature}}},
                   {"policies", std::move(policies)}};
  if (report.slo_ttft_p90_ms > 0) {
    out["capacity"] = json::object{{"slo_ttft_p90_ms", report.slo_ttft_p90_ms}};
  }
  return json::serialize(out);
}

std::string ReportTable(const Report& report) {
  std::string out = fmt::format(
      "trace {} ({} requests), ideal reuse {:.1f}% (infinite cache), bound {:.1f}% (one LRU "
      "cache of the fleet's blocks)\n\n",
      report.trace_path, report.trace_requests, 100 * report.ideal_reuse, 100 * report.bound_reuse);
  out += fmt::format("{:<13} {:>6} {:>7} {:>8} {:>9} {:>9} {:>9} {:>8} {:>8} {:>9} {:>7} {}\n",
                     "policy", "reqs", "reuse", "of bound", "ttft p50", "ttft p90", "ttft p99",
                     "itl p50", "itl p99", "e2e p50", "req/s", "worker min-max");
  for (const PolicySummary& p : report.policies) {
    const auto [lo, hi] =
        std::minmax_element(p.requests_per_worker.begin(), p.requests_per_worker.end());
    out += fmt::format(
        "{:<13} {:>6} {:>6.1f}% {:>7.1f}% {:>7.0f}ms {:>7.0f}ms {:>7.0f}ms {:>6.1f}ms {:>6.1f}ms "
        "{:>7.0f}ms {:>7.2f} {:>5}-{}\n",
        p.policy, p.requests, 100 * p.reuse,
        report.bound_reuse > 0 ? 100 * p.reuse / report.bound_reuse : 0, p.ttft_ms.p50,
        p.ttft_ms.p90, p.ttft_ms.p99, p.itl_ms.p50, p.itl_ms.p99, p.e2e_ms.p50, p.throughput_rps,
        lo == p.requests_per_worker.end() ? 0 : *lo, hi == p.requests_per_worker.end() ? 0 : *hi);
  }
  if (report.slo_ttft_p90_ms > 0) {
    // The rows above are each policy's run at its capacity.
    double round_robin = 0;
    for (const PolicySummary& p : report.policies) {
      if (p.policy == "round_robin") round_robin = p.capacity_speed;
    }
    out += fmt::format(
        "\ncapacity: the highest --speed with TTFT p90 <= {:.0f} ms (rows above: "
        "each policy at its capacity)\n",
        report.slo_ttft_p90_ms);
    for (const PolicySummary& p : report.policies) {
      out += fmt::format("{:<13} {:>8.3f}x speed", p.policy, p.capacity_speed);
      if (round_robin > 0)
        out += fmt::format(" {:>6.2f}x round_robin", p.capacity_speed / round_robin);
      out += fmt::format(
          "   reuse at half of it {:.1f}% ({:.1f}% of bound)\n", 100 * p.reuse_at_half_capacity,
          report.bound_reuse > 0 ? 100 * p.reuse_at_half_capacity / report.bound_reuse : 0);
    }
  }
  return out;
}

namespace {

// One page gathering the report: the trace, the table of ReportTable and both plots.
std::string ReportHtml(const Report& report) {
  std::string html = fmt::format(
      "<!doctype html>\n<html lang='en'><head><meta charset='utf-8'><title>kvgate replay: "
      "{0}</title>\n<style>body{{font:14px system-ui,sans-serif;margin:24px;color:#1d2330}}"
      "table{{border-collapse:collapse;margin:12px 0}}th,td{{padding:4px 10px;border-bottom:"
      "1px solid #e3e6ec;text-align:right}}th:first-child,td:first-child{{text-align:left}}"
      "img{{margin:8px 16px 0 0;border:1px solid #e3e6ec}}</style></head><body>\n"
      "<h1>kvgate replay</h1>\n<p>Trace <code>{0}</code>: {1} requests. Reuse if one cache "
      "held everything: {2:.1f}%; one LRU cache of the fleet's blocks: {3:.1f}%. Gateways: "
      "{4}{5}.</p>\n<table><tr><th>policy</th><th>requests</th><th>rejected</th>"
      "<th>reuse</th><th>predicted reuse</th><th>TTFT p50</th><th>p90</th><th>p99</th>"
      "<th>ITL p50</th><th>p90</th><th>end-to-end p90</th><th>req/s</th>"
      "<th>requests per worker</th></tr>\n",
      HtmlEscaped(report.trace_path), report.trace_requests, 100 * report.ideal_reuse,
      100 * report.bound_reuse, report.replicas,
      report.replicas > 1 ? fmt::format(" (load sync {}, {} ms late)", report.sync ? "on" : "off",
                                        report.sync_delay_ms)
                          : "");
  for (const PolicySummary& p : report.policies) {
    html += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.1f}%</td><td>{:.1f}%</td><td>{:.1f} ms</td>"
        "<td>{:.1f} ms</td><td>{:.1f} ms</td><td>{:.1f} ms</td><td>{:.1f} ms</td>"
        "<td>{:.1f} ms</td><td>{:.2f}</td><td>{}</td></tr>\n",
        HtmlEscaped(p.policy), p.requests, p.rejected, 100 * p.reuse, 100 * p.predicted_reuse,
        p.ttft_ms.p50, p.ttft_ms.p90, p.ttft_ms.p99, p.itl_ms.p50, p.itl_ms.p90, p.e2e_ms.p90,
        p.throughput_rps, fmt::join(p.requests_per_worker, " "));
  }
  html +=
      "</table>\n<img src='ttft_cdf.svg' alt='TTFT CDF per policy'>"
      "<img src='reuse.svg' alt='Prefix reuse per policy'>\n</body></html>\n";
  return html;
}

}  // namespace

Status WritePlots(const Report& report, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Error(fmt::format("cannot create {}: {}", dir, ec.message()));
  static constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd"};
  const double w = 640, h = 400, left = 60, right = 150, top = 30, bottom = 50;

  // TTFT CDF, log-scaled time axis.
  double max_ttft = 1;
  for (const auto& p : report.policies) {
    if (!p.ttft_sorted.empty()) max_ttft = std::max(max_ttft, p.ttft_sorted.back());
  }
  const double lo = 1, hi = std::log10(max_ttft * 1.2);
  auto x = [&](double ms) {
    return left + (std::log10(std::max(ms, lo)) - 0) / hi * (w - left - right);
  };
  auto y = [&](double q) { return top + (1 - q) * (h - top - bottom); };
  std::string svg = fmt::format(
      "<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' font-family='sans-serif' "
      "font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n"
      "<text x='{}' y='18'>TTFT CDF per policy (ms, log scale)</text>\n",
      w, h, left);
  svg += fmt::format("<line x1='{}' y1='{}' x2='{}' y2='{}' stroke='black'/>\n", left, y(0),
                     w - right, y(0));
  svg += fmt::format("<line x1='{}' y1='{}' x2='{}' y2='{}' stroke='black'/>\n", left, y(0), left,
                     y(1));
  for (double decade = 1; decade <= max_ttft * 1.2; decade *= 10) {
    svg += fmt::format("<text x='{:.1f}' y='{}' text-anchor='middle'>{}</text>\n", x(decade),
                       y(0) + 16, decade);
  }
  for (double q : {0.0, 0.5, 0.9, 1.0}) {
    svg +=
        fmt::format("<text x='{}' y='{:.1f}' text-anchor='end'>{}</text>\n", left - 4, y(q) + 4, q);
  }
  for (size_t i = 0; i < report.policies.size(); ++i) {
    const auto& v = report.policies[i].ttft_sorted;
    std::string points;
    const size_t step = std::max<size_t>(1, v.size() / 400);
    for (size_t j = 0; j < v.size(); j += step) {
      points += fmt::format("{:.1f},{:.1f} ", x(v[j]), y(static_cast<double>(j + 1) / v.size()));
    }
    if (!v.empty()) points += fmt::format("{:.1f},{:.1f}", x(v.back()), y(1));
    const char* color = kColors[i % std::size(kColors)];
    svg += fmt::format("<polyline fill='none' stroke='{}' stroke-width='2' points='{}'/>\n", color,
                       points);
    svg += fmt::format("<text x='{}' y='{}' fill='{}'>{}</text>\n", w - right + 10,
                       top + 20 + 18 * i, color, report.policies[i].policy);
  }
  svg += "</svg>\n";
  std::ofstream(std::filesystem::path(dir) / "ttft_cdf.svg") << svg;

  // Reuse per policy, against the ideal.
  const double bar_w = (w - left - right) / std::max<size_t>(1, report.policies.size()) * 0.7;
  std::string bars = fmt::format(
      "<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' font-family='sans-serif' "
      "font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n"
      "<text x='{}' y='18'>Prefix reuse per policy (dashed: ideal {:.1f}%)</text>\n",
      w, h, left, 100 * report.ideal_reuse);
  for (size_t i = 0; i < report.policies.size(); ++i) {
    const double reuse = report.policies[i].reuse;
    const double bx = left + i * (w - left - right) / report.policies.size();
    bars += fmt::format(
        "<rect x='{:.1f}' y='{:.1f}' width='{:.1f}' height='{:.1f}' fill='{}'/>\n"
        "<text x='{:.1f}' y='{:.1f}' text-anchor='middle'>{:.1f}%</text>\n"
        "<text x='{:.1f}' y='{}' text-anchor='middle'>{}</text>\n",
        bx, y(reuse), bar_w, y(0) - y(reuse), kColors[i % std::size(kColors)], bx + bar_w / 2,
        y(reuse) - 4, 100 * reuse, bx + bar_w / 2, y(0) + 16, report.policies[i].policy);
  }
  bars += fmt::format(
      "<line x1='{}' y1='{:.1f}' x2='{}' y2='{:.1f}' stroke='black' stroke-dasharray='6 4'/>\n",
      left, y(report.ideal_reuse), w - right, y(report.ideal_reuse));
  bars += "</svg>\n";
  std::ofstream(std::filesystem::path(dir) / "reuse.svg") << bars;
  std::ofstream(std::filesystem::path(dir) / "index.html") << ReportHtml(report);
  return Status::Ok();
}

}  // namespace kvgate::replay
