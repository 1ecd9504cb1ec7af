// Log probabilities the mocker reports for tokens: deterministic stand-ins (a function of the
// token and its position) in the shapes vLLM returns for completions and chat, so clients'
// and the gateway's handling of `logprobs`, `top_logprobs` and `echo` can be exercised.
#pragma once

#include <boost/json/object.hpp>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

namespace kvgate::mocker {

// The text of one token, as the response shows it.
using TokenTextFn = std::function<std::string(uint32_t)>;

// A token's log probability at `position` of the sequence: in [-4, 0).
double TokenLogprob(uint32_t token, size_t position);

// Completions' `logprobs` for `tokens`, at sequence positions `first_position`...: tokens,
// token_logprobs (null for the sequence's very first token, as with echo), top_logprobs
// (`top` alternatives each, the token itself first) and text_offset from `text_offset`.
boost::json::object CompletionLogprobs(std::span<const uint32_t> tokens, size_t first_position,
                                       uint32_t top, size_t text_offset, const TokenTextFn& text);

// Chat's `logprobs`: {"content": [{token, logprob, bytes, top_logprobs: [...]}]}.
boost::json::object ChatLogprobs(std::span<const uint32_t> tokens, size_t first_position,
                                 uint32_t top, const TokenTextFn& text);

}  // namespace kvgate::mocker
