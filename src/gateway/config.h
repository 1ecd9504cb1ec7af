// Everything `kvgate serve` is told: from a YAML file (--config) with flags on top.
// Unknown YAML keys are an error, so a typo cannot silently fall back to a default.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "discovery/worker_record.h"
#include "engines/engines.h"
#include "gateway/tenants.h"
#include "routing/router.h"

namespace kvgate::gateway {

// A worker as the config, the admin API and etcd name it (docs/design.md §11).
using WorkerConfig = discovery::WorkerRecord;

// Simulated engines started in-process (`--mock-workers N`).
struct MockWorkersConfig {
  uint32_t count = 0;
  uint32_t prefill_count = 0;  // prefill workers besides `count` decode ones (§12)
  engines::EngineKind engine = engines::EngineKind::kVllm;
  uint32_t num_blocks = 16384;
  double speedup = 1.0;
  // MoE shape the mock model routes with (also the shape of its routed experts).
  uint32_t moe_experts = 64;
};

struct LimitsConfig {
  size_t max_body_bytes = 32u << 20;
  uint32_t max_in_flight = 4096;  // more concurrent requests get 429
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds first_byte_timeout{300'000};
  std::chrono::milliseconds idle_timeout{300'000};
  std::chrono::milliseconds health_interval{1000};
  uint32_t unhealthy_after = 3;  // consecutive failed health checks or requests
  std::chrono::milliseconds client_header_timeout{30'000};  // slow clients cannot pin a connection
  std::chrono::milliseconds client_idle_timeout{120'000};
  std::chrono::milliseconds shutdown_grace{10'000};
  // A non-streaming response has no first byte before the generation ends: this is its
  // limit instead of first_byte_timeout.
  std::chrono::milliseconds non_streaming_timeout{1'800'000};
  size_t max_response_bytes = size_t{256} << 20;           // a larger non-streaming body: 502
  std::chrono::milliseconds client_write_timeout{60'000};  // a client reading nothing is dropped
  // Bytes queued for one client before the gateway stops reading the engine's response.
  size_t client_buffer_bytes = size_t{4} << 20;
  size_t max_connections = 10'000;
  size_t max_body_bytes_in_flight = size_t{1} << 30;  // request bodies being received, in all
  // Requests with bodies larger than this are templated and tokenized off the event loops.
  size_t offload_prompt_bytes = 64 << 10;
  // Rendered chats' ids are remembered within this many bytes, so that the next turn of a
  // long conversation is tokenized past the last one only (0: off).
  size_t prompt_cache_bytes = size_t{128} << 20;
  // A worker with this many requests, or this many prompt tokens awaiting their first
  // token, is busy; when all are, requests wait in the gateway's queue (0: no limit).
  uint32_t worker_max_requests = 0;
  uint64_t worker_max_prefill_tokens = 0;
  size_t queue_size = 1024;
  std::chrono::milliseconds queue_timeout{30'000};
};

// Fleet mode (docs/design.md §11); all empty: one process, no external service.
struct FleetConfig {
  std::string etcd_url;  // http://host:2379: workers from <etcd_prefix>/workers/
  std::string etcd_prefix = "/kvgate";
  std::string nats_url;                  // nats://host:4222: share load with the other replicas
  std::string cluster_name = "default";  // replicas of one cluster share kvgate.<name>.load
  std::string replica_id = "auto";       // request-id origin 1..65535, or auto (random)
};

// Disaggregated prefill and decode (docs/design.md §12).
struct PdConfig {
  // The prefill phase is skipped when the decode worker holds all but this many prompt
  // tokens.
  uint32_t min_prefill_tokens = 512;
};

struct GatewayConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;
  int threads = 2;  // event-loop threads: each serves clients and talks to engines

  // Served model names (the first is the default); LoRA adapter names also accepted as
  // `model`, and they seed the block hashes.
  std::vector<std::string> models;
  std::vector<std::string> lora_adapters;
  std::string model_dir;    // tokenizer.json, tokenizer_config.json, config.json
  uint32_t moe_layers = 0;  // from config.json when 0
  uint32_t moe_top_k = 0;

  uint32_t block_size = 16;
  std::vector<WorkerConfig> workers;
  MockWorkersConfig mock;
  FleetConfig fleet;
  PdConfig pd;
  routing::RouterConfig routing;
  LimitsConfig limits;
  std::vector<std::string> api_keys;
  std::string api_keys_file;  // one key per line
  // Tenants with keys, priorities and limits (docs/design.md §13); FinishConfig puts the
  // plain api_keys first, as the tenant "default" without limits.
  std::vector<TenantConfig> tenants;
  // Keys for /admin/*. With API keys but no admin keys, the admin API is closed.
  std::vector<std::string> admin_api_keys;
  // Access-Control-Allow-Origin for browsers ("*" as vLLM and SGLang; "" turns CORS off).
  std::string cors_allow_origin = "*";
};

// Reads a YAML config into `config` (fields it does not mention keep their values).
Status LoadConfigFile(const std::string& path, GatewayConfig* config);

// Resolves what depends on several fields: API keys from the file, MoE shape from
// config.json, the default model name. Call after flags were applied.
Status FinishConfig(GatewayConfig* config);

}  // namespace kvgate::gateway
