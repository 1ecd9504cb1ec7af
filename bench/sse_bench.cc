// SSE splitting cost per byte when one event is huge (routed experts of a long prompt come
// as one multi-megabyte event, in many reads) against the same bytes as ordinary small
// events, both fed in 16 KiB reads. Linear splitting keeps the ratio near 1; rescanning
// the pending bytes on every read made it grow with the event's size.
#include <string>

#include "api/sse.h"
#include "bench_ratio.h"

namespace {

constexpr size_t kBytes = 8 << 20;
constexpr size_t kRead = 16 << 10;

std::string Stream(size_t event_bytes) {
  std::string stream;
  while (stream.size() < kBytes) {
    stream += "data: ";
    stream.append(event_bytes, 'x');
    stream += "\n\n";
  }
  return stream;
}

void Split(benchmark::State& state, size_t event_bytes) {
  const std::string stream = Stream(event_bytes);
  size_t events = 0;
  for (auto _ : state) {
    kvgate::api::SseSplitter splitter;
    for (size_t i = 0; i < stream.size(); i += kRead) {
      splitter.Feed(std::string_view(stream).substr(i, kRead),
                    [&](std::string_view e) { events += e.size() > 0; });
    }
  }
  benchmark::DoNotOptimize(events);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * stream.size()));
}

BENCHMARK_CAPTURE(Split, one_8MiB_event, kBytes)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(Split, small_events, 200)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  return kvgate::bench::RunWithRatios(argc, argv, {{"Split/one_8MiB_event", "Split/small_events"}},
                                      "time for the same bytes: one huge event vs small ones");
}
