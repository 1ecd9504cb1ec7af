// What differs between engines behind the gateway (vLLM, SGLang): how to ask one for
// routed experts, and where its responses carry them.
#pragma once

#include <boost/json/fwd.hpp>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kvgate::engines {

enum class EngineKind : uint8_t { kVllm, kSglang };
std::optional<EngineKind> ParseEngineKind(std::string_view name);
std::string_view EngineName(EngineKind kind);

// Adds to a request body what makes `kind` return routed experts, skipping the first
// `start` prompt rows: vLLM `return_routed_experts` + `routed_experts_prompt_start`,
// SGLang `return_routed_experts` + `routed_experts_start_len`.
void AskForRoutedExperts(EngineKind kind, uint64_t start, boost::json::object& body);

// Engine-native routed experts found in a response object (a JSON body or one SSE chunk)
// are moved into `holder` and removed from the response, so the client sees them once,
// normalized, under `nvext`; `start` is what the engine reported it applied.
// Looks in choices[i].routed_experts (vLLM), sglext.routed_experts (SGLang OpenAI) and
// meta_info.routed_experts (SGLang /generate).
bool TakeRoutedExperts(boost::json::object& response, boost::json::value& holder, uint64_t* start);

// Prompt and completion token counts a response (or a usage chunk) reports.
struct TokenCounts {
  std::optional<uint64_t> prompt;
  std::optional<uint64_t> completion;
};
void ReadTokenCounts(const boost::json::object& response, TokenCounts* counts);

}  // namespace kvgate::engines
