// Publishes KV-event batches the way vLLM does: ZMQ PUB multipart [topic, seq (8 bytes BE),
// payload], and a ROUTER that replays buffered batches from a requested seq, ending with the
// seq = -1 marker. The buffer keeps the last 10,000 batches.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"

namespace kvgate::mocker {

class EventPublisher {
 public:
  EventPublisher();
  ~EventPublisher();

  // `replay_endpoint` may be empty (no replay socket).
  Status Bind(const std::string& endpoint, const std::string& replay_endpoint);
  // Sends one batch with the next seq (single publishing thread). With `send_live` false it
  // only enters the replay buffer: a gap the subscriber must repair.
  void Publish(const std::string& payload, bool send_live = true);
  // The engine restarted: seq starts over at 0 and the replay buffer empties.
  void ResetSequence();

 private:
  void ServeReplay();

  struct Sockets;
  std::unique_ptr<Sockets> sockets_;
  std::mutex mu_;  // guards buffer_ and next_seq_
  std::deque<std::pair<uint64_t, std::string>> buffer_;
  uint64_t next_seq_ = 0;
  std::atomic<bool> stop_{false};
  std::thread replay_thread_;
};

}  // namespace kvgate::mocker
