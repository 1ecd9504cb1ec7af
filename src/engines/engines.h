// What differs between the engines behind the gateway, in one table (`Traits`): how each
// publishes KV events, how it is asked for routed experts and in which form it returns
// them. Adding an engine is one table entry (plus a wire decoder variant when its events
// look new). Also the response readers every engine shares.
#pragma once

#include <boost/json/value.hpp>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "wire/encode.h"

namespace kvgate::engines {

enum class EngineKind : uint8_t {
  kVllm,
  kVllmLists,  // vLLM returning routed experts as nested JSON lists (older releases)
  kSglang,
  kTrtllm,  // TensorRT-LLM (trtllm-serve)
};

// How an engine's response carries routed experts.
enum class ExpertsForm : uint8_t {
  kNpyBase64,    // vLLM: base64 of .npy bytes in choices[i].routed_experts
  kJsonLists,    // vLLM: [[[e] x top_k] x layers] x rows in choices[i].routed_experts
  kInt32Base64,  // SGLang: base64 int32 bytes in sglext (OpenAI) / meta_info (/generate)
  kNone,         // the engine cannot return them (asking adds nothing; the answer is null)
};

// How an engine runs disaggregated prefill and decode (docs/design.md §12).
enum class Disaggregation : uint8_t {
  kNone,              // it cannot (requests are served whole)
  kKvTransferParams,  // vLLM's NIXL connector: prefill first, its kv_transfer_params to decode
  kBootstrap,         // SGLang: both at once, meeting in a bootstrap room of the prefill worker
};

struct Traits {
  EngineKind kind;
  std::string_view name;           // as in configs and flags
  wire::EventFormat event_format;  // what its KV event publisher sends
  // The request field that skips the first N prompt rows of routed experts, and the same
  // name in the response reports what the engine applied.
  std::string_view experts_start_field;
  ExpertsForm experts_form;
  // Each data-parallel rank publishes on its own ports (the configured ones + rank) rather
  // than all ranks on one socket with data_parallel_rank in each batch.
  bool events_per_rank = false;
  Disaggregation disaggregation = Disaggregation::kNone;
};

const Traits& TraitsOf(EngineKind kind);
std::span<const Traits> AllEngines();
std::optional<EngineKind> ParseEngineKind(std::string_view name);
std::string_view EngineName(EngineKind kind);
// Every engine's name, joined by '|' ("vllm|vllm-lists|..."), for help texts and errors.
std::string_view EngineNames();

// "tcp://host:5557" with its port + `offset` ("tcp://host:5559" for offset 2); an
// endpoint without a numeric port is returned as it is.
std::string OffsetPort(std::string_view endpoint, uint32_t offset);

// Adds to a request body what makes the engine return routed experts, skipping the first
// `start` prompt rows: `return_routed_experts` and the engine's start field.
void AskForRoutedExperts(EngineKind kind, uint64_t start, boost::json::object& body);

// Engine-native routed experts of one choice (its `index`; 0 for the response's own).
struct ChoiceExperts {
  uint32_t choice = 0;
  boost::json::value native;
};

// Engine-native routed experts found in a response object (a JSON body or one SSE chunk)
// are moved into `found` and removed from the response, so the client sees them once,
// normalized, under `nvext`; `start` is set to what the engine reported it applied, and left
// as it was when the engine does not say (OpenAI responses of vLLM and SGLang do not).
// Looks wherever any engine puts them: choices[i] and choices[i].sglext (per choice), sglext
// (SGLang OpenAI) and meta_info (SGLang /generate). Returns whether it found any.
bool TakeRoutedExperts(boost::json::object& response, std::vector<ChoiceExperts>& found,
                       uint64_t* start);

// Prompt, completion and cached prompt token counts a response (or a usage chunk) reports:
// usage.prompt_tokens_details.cached_tokens (vLLM, SGLang's OpenAI API) or
// meta_info.cached_tokens (SGLang /generate).
struct TokenCounts {
  std::optional<uint64_t> prompt;
  std::optional<uint64_t> completion;
  std::optional<uint64_t> cached;
};
void ReadTokenCounts(const boost::json::object& response, TokenCounts* counts);

}  // namespace kvgate::engines
