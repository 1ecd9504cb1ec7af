// The simulated engine as a server: OpenAI HTTP (/v1/completions, /v1/chat/completions,
// /v1/models), SGLang's /generate, /health, /metrics, KV events on ZMQ with a replay
// ROUTER, routed experts in the native form of the engine it imitates, and faults on demand.
// One engine thread runs the core in real time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "chat/chat_template.h"
#include "common/status.h"
#include "engines/engines.h"
#include "mocker/disaggregation.h"
#include "mocker/engine.h"
#include "mocker/routed_experts.h"
#include "tokenizer/tokenizer.h"
#include "wire/encode.h"

namespace kvgate::mocker {

struct Faults {
  uint64_t crash_after = 0;    // exit the process after N finished requests (standalone only)
  uint64_t hang_every = 0;     // never answer every Nth request
  uint64_t drop_every = 0;     // publish every Nth event batch only to the replay buffer
  uint64_t corrupt_every = 0;  // add an invalid event to every Nth batch
  uint64_t restart_after = 0;  // after N finished requests: clear the cache, seq back to 0
  uint32_t delay_ms = 0;       // hold each request this long before it starts
};

struct MockerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  engines::EngineKind kind = engines::EngineKind::kVllm;  // the engine it imitates
  std::string model = "kvgate-mock";
  EngineConfig engine;
  std::string kv_events;  // ZMQ PUB endpoint; empty: no events
  std::string kv_replay;  // ZMQ ROUTER endpoint; empty: no replay
  wire::EncodeOptions event_format;
  int64_t dp_rank = 0;
  MoeShape moe;
  bool return_routed_experts = false;  // for every request, like vLLM's server flag
  Faults faults;
  TransferConfig transfer;  // its role in disaggregated serving (docs/design.md §12)
  bool allow_crash = true;  // false in-process: a crash fault must not kill the gateway
  // From --model-dir: text prompts are tokenized and chat requests rendered like the engine
  // does; without them, text is its UTF-8 bytes and chat a fixed plain format.
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer;
  std::shared_ptr<const chat::ChatTemplate> chat_template;
};

class MockerServer {
 public:
  explicit MockerServer(MockerOptions options);
  ~MockerServer();
  Status Start();
  uint16_t port() const;
  uint16_t bootstrap_port() const;  // 0: it serves no bootstrap rooms
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvgate::mocker
