// Request traces for replay: the Mooncake JSONL format (docs/design.md §9), a synthetic trace
// generator for when no file is given, and the mapping from hash ids to prompt tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace kvgate::replay {

struct TraceRequest {
  double timestamp_ms = 0;
  uint32_t input_length = 0;
  uint32_t output_length = 0;
  std::vector<uint64_t> hash_ids;  // one per trace block; equal ids = equal content
};

struct Trace {
  std::string path;  // "synthetic" when generated
  std::vector<TraceRequest> requests;
};

// Reads a Mooncake JSONL file. A malformed line is an error naming its line number.
Status ReadMooncakeTrace(const std::string& path, Trace& out);

struct SyntheticTraceOptions {
  uint32_t requests = 2000;
  uint32_t system_prompts = 8;       // shared prefixes
  uint32_t system_blocks_max = 12;   // trace blocks per system prompt (1..max)
  uint32_t turns_max = 6;            // turns per multi-turn session (1..max)
  uint32_t turn_blocks_max = 3;      // new trace blocks each turn adds (1..max)
  double arrivals_per_second = 4.0;  // Poisson
  double think_time_ms = 8000;       // mean gap between a session's turns
  uint32_t output_length_max = 256;
  uint32_t trace_block_size = 512;
  uint64_t seed = 0;
};
Trace GenerateSyntheticTrace(const SyntheticTraceOptions& options);

// The prompt of a request: each hash id stands for `trace_block_size` tokens derived from
// the id alone; the last block is cut to make `input_length` tokens.
std::vector<uint32_t> PromptTokens(const TraceRequest& request, uint32_t trace_block_size);

}  // namespace kvgate::replay
