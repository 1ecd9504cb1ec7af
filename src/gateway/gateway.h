// `kvgate serve`: the OpenAI-compatible KV-aware gateway (DESIGN.md §6-§7). Wires the
// pieces together: HTTP server -> request preprocessing (chat template, tokenizer, block
// hashes) -> router over the prefix index and load -> upstream client to the chosen engine;
// the KV event subscriber keeps the index current; optional in-process simulated workers.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "gateway/config.h"

namespace kvgate::gateway {

class Gateway {
 public:
  explicit Gateway(GatewayConfig config);
  ~Gateway();
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  // Loads the model files, starts mock workers (if any), subscribes to KV events, starts
  // health checks and the HTTP server.
  Status Start();
  uint16_t port() const;
  // Base URLs of the workers (mock workers included), in worker-id order.
  std::vector<std::string> worker_urls() const;
  // Stops accepting, lets in-flight requests finish up to the configured grace, stops all.
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvgate::gateway
