// Deterministic MoE routing for the simulated engine (docs/design.md §8), emitted in each
// engine's native form, so tests can check every value.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace kvgate::mocker {

struct MoeShape {
  uint32_t layers = 0;
  uint32_t top_k = 0;
  uint32_t experts = 0;
  bool enabled() const { return layers > 0 && top_k > 0 && experts > 0; }
};

inline uint32_t ExpertFor(uint32_t token_id, uint64_t position, uint32_t layer, uint32_t k,
                          uint32_t experts) {
  return static_cast<uint32_t>((uint64_t{token_id} * 31 + position * 17 + layer * 7 + k * 13) %
                               experts);
}

// Rows for positions [start, tokens.size() - 1): the last sampled token has no row.
// Returns the C-order values as int32 little-endian bytes (SGLang's form, before base64).
std::string ExpertsInt32(std::span<const uint32_t> tokens, uint32_t start, const MoeShape& shape);
// vLLM's form: .npy bytes, dtype uint8 when experts <= 256, else uint16.
std::string ExpertsNpy(std::span<const uint32_t> tokens, uint32_t start, const MoeShape& shape);
// vLLM's list form: [[[e, ...] x top_k] x layers] x rows, as JSON text.
std::string ExpertsJsonLists(std::span<const uint32_t> tokens, uint32_t start,
                             const MoeShape& shape);

}  // namespace kvgate::mocker
