// The mocker's side of disaggregated prefill and decode (docs/design.md §12), for both
// engines' protocols: what a request asks of this worker (vLLM's `kv_transfer_params`,
// SGLang's bootstrap fields), the answer a vLLM prefill phase carries, the simulated KV
// transfer time, and SGLang's bootstrap rooms (the prefill worker says when a room's KV is
// ready; a decode worker waits for it).
#pragma once

#include <boost/json/fwd.hpp>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "common/status.h"
#include "engines/engines.h"
#include "http/client.h"
#include "mocker/transfer.h"

namespace kvgate::http {
class Server;
}

namespace kvgate::mocker {

// What a request asks of this worker beyond an ordinary generation.
struct TransferAsk {
  bool remote_decode = false;    // vLLM prefill phase: answer with kv_transfer_params
  uint32_t imported_blocks = 0;  // vLLM decode phase: prompt blocks sent by the prefill worker
  std::optional<int64_t> room;   // SGLang: the bootstrap room
  // SGLang decode: the prefill worker's bootstrap server, to wait for the room there.
  std::optional<http::Endpoint> bootstrap;
};

// Reads `body`'s disaggregation fields for a worker of `config.role` imitating `engine`.
// Errors (400) for malformed fields. `prompt_blocks`: the prompt's full blocks a prefill
// worker can hand over ((len - 1) / block_size).
Status ReadTransferAsk(const boost::json::object& body, engines::EngineKind engine,
                       const TransferConfig& config, uint32_t prompt_blocks, TransferAsk* ask);

// What a vLLM prefill worker answers in `kv_transfer_params` (as the NIXL connector does).
boost::json::object TransferParamsAnswer(const std::string& engine_id, const std::string& host,
                                         uint16_t port, uint32_t blocks);

// Prefill side: the rooms whose KV is computed, served on the bootstrap port as
// GET /rooms/{room} -> 200 (ready) or 404 (not yet).
class BootstrapServer {
 public:
  BootstrapServer();
  ~BootstrapServer();
  Status Start(const std::string& host, uint16_t port);  // kAnyPort: a free one
  uint16_t port() const;
  void Ready(int64_t room);

 private:
  std::mutex mu_;
  absl::flat_hash_set<int64_t> ready_;
  std::deque<int64_t> order_;  // oldest first: the set is bounded
  std::unique_ptr<http::Server> server_;
};

// Decode side: waits, on its own thread, for rooms to be ready on their prefill workers.
class RoomWaiter {
 public:
  using Done = std::function<void(const Status&)>;
  RoomWaiter();
  ~RoomWaiter();
  // Calls `done` (on the waiter's thread) once the room is ready, or with an error after
  // `timeout`, or at once when the prefill worker's bootstrap server is gone.
  void Wait(const http::Endpoint& prefill, int64_t room, std::chrono::milliseconds timeout,
            Done done);

 private:
  struct Waiting {
    http::Endpoint prefill;
    int64_t room;
    std::chrono::steady_clock::time_point deadline;
    Done done;
    uint32_t unreachable = 0;  // consecutive asks that found no server
  };
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Waiting> waiting_;
  bool stop_ = false;
  std::unique_ptr<http::Client> client_;
  std::thread thread_;
};

}  // namespace kvgate::mocker
