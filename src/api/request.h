// An inference request as kvgate reads it, the same for the gateway and the mocker: which
// API, the fields that steer serving (model, streaming, max tokens), what the client asked
// to get back (nvext, routed experts), and the prompt's token ids. Bad input is a
// kInvalidArgument Status whose message the client gets.
#pragma once

#include <boost/json/fwd.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "api/prompt.h"
#include "common/status.h"

namespace kvgate::api {

// What `nvext.extra_fields` (and SGLang's `return_routed_experts`) ask for.
struct ExtraFields {
  bool worker_id = false;
  bool cached_blocks = false;
  bool routed_experts = false;
  bool prefill_worker_id = false;  // disaggregated serving: who ran the prefill phase
  bool any() const { return worker_id || cached_blocks || routed_experts || prefill_worker_id; }
};

struct InferenceRequest {
  Api api = Api::kCompletions;
  std::string model;  // empty when the client named none
  bool stream = false;
  bool include_usage = false;          // stream_options.include_usage
  std::optional<uint32_t> max_tokens;  // max_completion_tokens, max_tokens or max_new_tokens
  uint32_t n = 1;                      // choices (OpenAI APIs)
  std::string cache_salt;
  ExtraFields extra;
  uint64_t routed_experts_start = 0;  // nvext.routed_experts_start
  bool has_nvext = false;             // the body carries kvgate's own `nvext` object
  std::vector<uint32_t> prompt;       // empty only with a prompt_fallback
  // Why `prompt` is not the whole prompt, when the caller accepted that: "template" or
  // "tokenize" (it failed: prompt empty), "media" (the text before the first media part).
  std::string prompt_fallback;
  std::string prompt_error;  // and what the failure said
};

// What to do when the chat template fails on a request whose shape is fine.
enum class PromptFailure {
  kReject,    // an engine: the client's 400
  kFallBack,  // the gateway: the engine decides; route without the prompt (docs/design.md §7)
};

// Reads `body` (the parsed JSON of a request to `api`). Fails on a body that is not an
// object, a field of the wrong type, a prompt that cannot be tokenized, or an empty prompt;
// on a template error too, unless `on_failure` says to fall back.
Status ParseInferenceRequest(Api api, const boost::json::value& body, const PromptModel& model,
                             InferenceRequest* out,
                             PromptFailure on_failure = PromptFailure::kReject);

}  // namespace kvgate::api
