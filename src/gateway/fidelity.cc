#include "gateway/fidelity.h"

#include <fmt/format.h>

#include "common/log.h"

namespace kvgate::gateway {

Fidelity::Fidelity(size_t max_workers) : workers_(max_workers) {}

void Fidelity::Grow(size_t workers) {
  while (workers_.size() < workers && workers_.Append(std::make_unique<Entry>())) {
  }
}

void Fidelity::Observe(uint32_t worker, uint64_t own_prompt_tokens,
                       uint64_t predicted_cached_tokens, const engines::TokenCounts& reported) {
  if (worker >= workers_.size() || own_prompt_tokens == 0 || !reported.prompt) return;
  Entry& e = workers_[worker];
  ++e.requests;
  e.predicted += predicted_cached_tokens;
  e.prompt += *reported.prompt;
  if (reported.cached) e.reported += *reported.cached;
  if (*reported.prompt == own_prompt_tokens) {
    e.mismatch_run = 0;
    return;
  }
  ++e.mismatches;
  if (++e.mismatch_run == kFlagAfter) {
    Flag(worker, e,
         fmt::format("its prompt token counts differ from the gateway's ({} requests in a row, "
                     "last {} vs {}): check that gateway and engine use the same chat template "
                     "and tokenizer revision (model_dir)",
                     kFlagAfter, *reported.prompt, own_prompt_tokens));
  }
}

void Fidelity::SetCanary(uint32_t worker, const std::string& result) {
  if (worker >= workers_.size()) return;
  Entry& e = workers_[worker];
  {
    std::lock_guard lock(e.mu);
    e.canary = result;
    if (result == "ok" && e.flag.starts_with("canary")) e.flag.clear();  // fixed since
  }
  if (result == "ok") return;
  std::string hint;
  if (result == "no_events") {
    hint =
        "no KV events stored its blocks: check that the engine publishes KV events "
        "(vLLM --kv-events-config, SGLang --kv-events-config) to the worker's kv_events "
        "endpoint";
  } else if (result == "block_size_mismatch") {
    hint =
        "its KV events use another block size: set the gateway's block_size to the "
        "engine's";
  } else if (result == "token_mismatch") {
    hint =
        "it counts or hashes the canary's tokens differently: check the engine's hash "
        "settings (PYTHONHASHSEED, hash algorithm) and that prompts of token ids pass "
        "unchanged";
  } else if (result == "no_cached_tokens_reported") {
    hint =
        "it does not report cached tokens: enable them (vLLM "
        "--enable-prompt-tokens-details) to let the gateway check its predictions";
  } else {
    hint = "check that it serves /v1/completions for the gateway's model";
  }
  Flag(worker, e, fmt::format("canary {}: {}", result, hint));
}

void Fidelity::Flag(uint32_t worker, Entry& e, const std::string& reason) {
  {
    std::lock_guard lock(e.mu);
    if (e.flag == reason) return;
    e.flag = reason;
  }
  Log(LogLevel::kWarn, "worker {} is flagged (it keeps serving; routing to it is blind): {}",
      worker, reason);
}

WorkerFidelity Fidelity::Get(uint32_t worker) const {
  WorkerFidelity out;
  if (worker >= workers_.size()) return out;
  const Entry& e = workers_[worker];
  out.requests = e.requests;
  out.prompt_tokens_mismatch = e.mismatches;
  out.predicted_cached_tokens = e.predicted;
  out.reported_cached_tokens = e.reported;
  out.prompt_tokens = e.prompt;
  std::lock_guard lock(e.mu);
  out.canary = e.canary;
  out.flag = e.flag;
  return out;
}

}  // namespace kvgate::gateway
