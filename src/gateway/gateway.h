// `kvgate serve`: the OpenAI-compatible KV-aware gateway, as a composition of its parts:
// the HTTP server and its route table -> InferenceCall (request -> hashes -> router ->
// upstream engine) ; the KV event subscriber keeps the prefix index the router reads; the
// worker pool watches the engines' health. Simulated workers, when wanted, are started by
// the caller and passed in as ordinary workers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "api/prompt.h"
#include "common/status.h"
#include "gateway/config.h"

namespace kvgate::gateway {

class Gateway {
 public:
  // `model_files`: the tokenizer and template of config.model_dir when the caller loaded
  // them already (to share them); otherwise Start loads them.
  explicit Gateway(GatewayConfig config, api::ModelFiles model_files = {});
  ~Gateway();
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  // Subscribes to KV events, starts health checks and the HTTP server.
  Status Start();
  uint16_t port() const;
  // Stops accepting, lets in-flight requests finish up to the configured grace, stops all.
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvgate::gateway
