// Live replay: sends a trace's requests to a running gateway at trace times (scaled by
// `speed`) as streaming completions with token-id prompts, and measures TTFT, ITL and E2E
// from the client side, with the cached tokens the engines report.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "common/status.h"
#include "replay/simulator.h"
#include "replay/trace.h"

namespace kvgate::replay {

struct LiveOptions {
  std::string url;    // the gateway, e.g. http://127.0.0.1:8000
  std::string model;  // empty: the gateway's default model
  uint32_t trace_block_size = 512;
  double speed = 1.0;
  std::chrono::seconds timeout{600};  // for the whole run after the last arrival
};

// The run's requests, in trace order. `label` is "live". Fails only on a bad URL.
Status RunLive(const Trace& trace, const LiveOptions& options, PolicyRun* run,
               const std::function<void(size_t, size_t)>& progress = nullptr);

}  // namespace kvgate::replay
