#include "replay/trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/json.hpp>
#include <fstream>
#include <random>

#include "common/splitmix.h"

namespace kvgate::replay {
namespace {

namespace json = boost::json;

bool ToUint(const json::value* v, uint64_t* out) {
  if (v == nullptr) return false;
  if (v->is_int64() && v->as_int64() >= 0) {
    *out = static_cast<uint64_t>(v->as_int64());
    return true;
  }
  if (v->is_uint64()) {
    *out = v->as_uint64();
    return true;
  }
  return false;
}

Status ParseLine(std::string_view line, TraceRequest& r) {
  boost::system::error_code ec;
  json::value v = json::parse(line, ec);
  if (ec) return Status::Error(fmt::format("not JSON ({})", ec.message()));
  const json::object* o = v.if_object();
  if (o == nullptr) return Status::Error("not a JSON object");
  const json::value* ts = o->if_contains("timestamp");
  if (ts == nullptr || !ts->is_number()) return Status::Error("timestamp missing or not a number");
  r.timestamp_ms = ts->to_number<double>();
  uint64_t n;
  if (!ToUint(o->if_contains("input_length"), &n) || n == 0 || n > UINT32_MAX) {
    return Status::Error("input_length missing or not a positive integer");
  }
  r.input_length = static_cast<uint32_t>(n);
  if (!ToUint(o->if_contains("output_length"), &n) || n > UINT32_MAX) {
    return Status::Error("output_length missing or not a non-negative integer");
  }
  r.output_length = static_cast<uint32_t>(n);
  const json::value* ids = o->if_contains("hash_ids");
  if (ids == nullptr || !ids->is_array()) return Status::Error("hash_ids missing or not an array");
  for (const json::value& id : ids->as_array()) {
    if (!ToUint(&id, &n)) return Status::Error("hash_ids must hold non-negative integers");
    r.hash_ids.push_back(n);
  }
  return Status::Ok();
}

}  // namespace

Status ReadMooncakeTrace(const std::string& path, Trace& out) {
  std::ifstream in(path);
  if (!in) return Status::Error(fmt::format("cannot open trace {}", path));
  out.path = path;
  out.requests.clear();
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    TraceRequest r;
    Status s = ParseLine(line, r);
    if (!s.ok()) return Status::Error(fmt::format("{}:{}: {}", path, number, s.message()));
    out.requests.push_back(std::move(r));
  }
  if (out.requests.empty()) return Status::Error(fmt::format("{}: no requests", path));
  std::stable_sort(
      out.requests.begin(), out.requests.end(),
      [](const TraceRequest& a, const TraceRequest& b) { return a.timestamp_ms < b.timestamp_ms; });
  return Status::Ok();
}

std::vector<uint32_t> PromptTokens(const TraceRequest& request, uint32_t trace_block_size) {
  std::vector<uint32_t> tokens;
  tokens.reserve(request.input_length);
  for (uint64_t id : request.hash_ids) {
    for (uint32_t j = 0; j < trace_block_size && tokens.size() < request.input_length; ++j) {
      tokens.push_back(100 + static_cast<uint32_t>(SplitMix64(id * 1'000'003 + j) % 120000));
    }
  }
  // A trace whose ids cover fewer tokens than input_length: pad with request-unique tokens.
  for (uint64_t j = 0; tokens.size() < request.input_length; ++j) {
    const uint64_t unique = static_cast<uint64_t>(request.timestamp_ms * 1000) * 7919 + j;
    tokens.push_back(100 + static_cast<uint32_t>(SplitMix64(~unique) % 120000));
  }
  return tokens;
}

Trace GenerateSyntheticTrace(const SyntheticTraceOptions& o) {
  std::mt19937_64 rng(o.seed);
  auto uniform = [&](uint32_t lo, uint32_t hi) {
    return std::uniform_int_distribution<uint32_t>(lo, hi)(rng);
  };
  uint64_t next_id = 0;
  std::vector<std::vector<uint64_t>> systems(o.system_prompts);
  for (auto& s : systems) {
    for (uint32_t i = uniform(1, o.system_blocks_max); i > 0; --i) s.push_back(next_id++);
  }
  Trace trace;
  trace.path = "synthetic";
  std::exponential_distribution<double> gap(o.arrivals_per_second / 1000.0);
  std::exponential_distribution<double> think(1.0 / o.think_time_ms);
  double session_start = 0;
  while (trace.requests.size() < o.requests) {
    session_start += gap(rng) * o.turns_max / 2;  // sessions arrive; turns fill the rate
    std::vector<uint64_t> ids = systems[uniform(0, o.system_prompts - 1)];
    double t = session_start;
    for (uint32_t turn = uniform(1, o.turns_max); turn > 0 && trace.requests.size() < o.requests;
         --turn) {
      for (uint32_t i = uniform(1, o.turn_blocks_max); i > 0; --i) ids.push_back(next_id++);
      TraceRequest r;
      r.timestamp_ms = t;
      r.hash_ids = ids;
      r.input_length = static_cast<uint32_t>(ids.size() - 1) * o.trace_block_size +
                       uniform(1, o.trace_block_size);
      r.output_length = uniform(1, o.output_length_max);
      trace.requests.push_back(std::move(r));
      t += think(rng);
    }
  }
  std::stable_sort(
      trace.requests.begin(), trace.requests.end(),
      [](const TraceRequest& a, const TraceRequest& b) { return a.timestamp_ms < b.timestamp_ms; });
  return trace;
}

}  // namespace kvgate::replay
