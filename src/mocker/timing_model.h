// How long a simulated engine step takes (docs/design.md §8): a quadratic in the step's new
// prompt tokens for prefill, a quadratic in KV-cache usage for decode, all divided by the
// speedup.
#pragma once

#include <algorithm>
#include <cstdint>

namespace kvgate::mocker {

struct TimingModel {
  double speedup = 1.0;

  static double PrefillMs(uint64_t new_prompt_tokens) {
    const double t = static_cast<double>(new_prompt_tokens);
    return 4.209989e-07 * t * t + 1.518344e-02 * t + 16.50142;
  }
  // `usage`: used / total KV blocks.
  static double DecodeMs(double usage) {
    return std::max(1.0, -25.74 * usage * usage + 54.01 * usage + 5.74);
  }
  // A step with `prefill_tokens` new prompt tokens and (if `decoding`) a decode batch.
  double StepMs(uint64_t prefill_tokens, bool decoding, double usage) const {
    double ms = 0;
    if (prefill_tokens > 0) ms += PrefillMs(prefill_tokens);
    if (decoding) ms += DecodeMs(usage);
    return ms / speedup;
  }
};

}  // namespace kvgate::mocker
