// Simulated engines started inside another process (`kvgate serve --mock-workers N`): each
// a MockerServer on a free loopback port with its KV events on ipc endpoints (no ports to
// find, nothing outside the machine can connect). The caller routes to `members()`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "api/prompt.h"
#include "common/status.h"
#include "engines/engines.h"
#include "mocker/disaggregation.h"
#include "mocker/routed_experts.h"

namespace kvgate::mocker {

class MockerServer;

struct FleetOptions {
  uint32_t count = 0;
  // Disaggregated serving: this many prefill workers besides `count` decode workers (none:
  // `count` workers serving whole requests).
  uint32_t prefill_count = 0;
  engines::EngineKind engine = engines::EngineKind::kVllm;
  std::string model = "kvgate-mock";
  uint32_t block_size = 16;
  uint32_t num_blocks = 16384;
  double speedup = 1.0;
  MoeShape moe;
  api::ModelFiles model_files;  // shared with the gateway
};

struct FleetMember {
  std::string url;        // http://127.0.0.1:port
  std::string kv_events;  // ipc://...
  std::string kv_replay;
  Role role = Role::kBoth;
  uint16_t bootstrap_port = 0;  // prefill workers (SGLang's protocol)
};

class MockFleet {
 public:
  MockFleet();
  ~MockFleet();  // stops every member and removes its ipc files
  MockFleet(const MockFleet&) = delete;
  MockFleet& operator=(const MockFleet&) = delete;

  Status Start(const FleetOptions& options);
  const std::vector<FleetMember>& members() const { return members_; }
  void Stop();

 private:
  std::vector<std::unique_ptr<MockerServer>> servers_;
  std::vector<FleetMember> members_;
  std::vector<std::string> ipc_paths_;
};

}  // namespace kvgate::mocker
