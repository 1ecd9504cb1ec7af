#include "mocker/fleet.h"

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>

#include "mocker/server.h"

namespace kvgate::mocker {

MockFleet::MockFleet() = default;

MockFleet::~MockFleet() { Stop(); }

Status MockFleet::Start(const FleetOptions& f) {
  const std::string dir = std::filesystem::temp_directory_path().string();
  for (uint32_t i = 0; i < f.prefill_count + f.count; ++i) {
    MockerOptions o;
    if (f.prefill_count > 0) o.transfer.role = i < f.prefill_count ? Role::kPrefill : Role::kDecode;
    if (o.transfer.role == Role::kPrefill) o.transfer.bootstrap_port = kAnyPort;
    o.kind = f.engine;
    o.model = f.model;
    o.engine.block_size = f.block_size;
    o.engine.num_blocks = f.num_blocks;
    o.engine.timing.speedup = f.speedup;
    const std::string base = fmt::format("{}/kvgate-{}-mock{}", dir, getpid(), i);
    o.kv_events = "ipc://" + base + "-events";
    o.kv_replay = "ipc://" + base + "-replay";
    ipc_paths_.push_back(base + "-events");
    ipc_paths_.push_back(base + "-replay");
    o.event_format.format = engines::TraitsOf(f.engine).event_format;
    o.moe = f.moe;
    o.allow_crash = false;  // a crash fault must not take the host process down
    o.tokenizer = f.model_files.tokenizer;
    o.chat_template = f.model_files.chat_template;
    auto server = std::make_unique<MockerServer>(o);
    if (Status s = server->Start(); !s.ok()) return s;
    members_.push_back({fmt::format("http://127.0.0.1:{}", server->port()), o.kv_events,
                        o.kv_replay, o.transfer.role, server->bootstrap_port()});
    servers_.push_back(std::move(server));
  }
  return Status::Ok();
}

void MockFleet::Stop() {
  for (auto& s : servers_) s->Stop();
  servers_.clear();
  for (const std::string& p : ipc_paths_) std::filesystem::remove(p);
  ipc_paths_.clear();
}

}  // namespace kvgate::mocker
