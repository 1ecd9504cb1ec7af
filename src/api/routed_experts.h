// The one routed-experts object kvgate returns whatever the engine (docs/design.md §6):
// {"data": base64 of C-order little-endian bytes, "dtype", "shape": [rows, layers, top_k],
//  "start"}. Engines' native forms are normalized here; SGLang's base64 int32 string is
// passed through as the very same string.
#pragma once

#include <boost/json/fwd.hpp>
#include <cstdint>
#include <optional>
#include <string>

namespace kvgate::api {

struct ExpertsContext {
  uint32_t layers = 0;  // from config.json (num_hidden_layers) or the worker config; 0: unknown
  uint32_t top_k = 0;   // num_experts_per_tok
  // Token counts of the finished request when the response reported them.
  std::optional<uint64_t> prompt_tokens;
  std::optional<uint64_t> completion_tokens;
  uint64_t start = 0;  // what the engine applied (already read from its response)
};

// Normalizes `native` (a string: SGLang base64 int32 or vLLM base64 .npy; nested lists;
// or an already-normalized object). Returns null and sets `*problem` when it is missing,
// of the wrong type, or its size does not match the shape.
boost::json::value NormalizeRoutedExperts(const boost::json::value& native,
                                          const ExpertsContext& context, std::string* problem);

// Disaggregated serving (docs/design.md §12): the decode worker's rows (`tail`, normalized)
// lack the prompt rows it never computed; they are taken from the prefill worker's
// (`head`, normalized, from the same start). `rows` is how many the whole sequence needs.
// Both must agree in dtype, layers and top_k. Null (and `*problem`) when they cannot make
// the sequence.
boost::json::value StitchRoutedExperts(const boost::json::value& head,
                                       const boost::json::value& tail, uint64_t rows,
                                       std::string* problem);

}  // namespace kvgate::api
