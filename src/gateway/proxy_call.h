// One client request on its way through an engine worker: forwards the body, streams the
// response back as it arrives, retries once on the next-best worker when the attempt failed
// before any byte reached the client, and adds the `nvext` fields the client asked for
// (worker_id, cached_blocks, routed_experts) to the final chunk or the JSON body.
#pragma once

#include <boost/json.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "api/prompt.h"
#include "api/sse.h"
#include "engines/engines.h"
#include "http/client.h"
#include "http/server.h"
#include "routing/router.h"

namespace kvgate::gateway {

class GatewayMetrics;
class WorkerPool;

// What the gateway shares with every call.
struct ProxyServices {
  routing::Router& router;
  WorkerPool& workers;
  http::Client& client;
  GatewayMetrics& metrics;
  uint32_t experts_layers = 0;
  uint32_t experts_top_k = 0;
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds first_byte_timeout{300'000};
  std::chrono::milliseconds idle_timeout{300'000};
  std::atomic<int64_t>* in_flight = nullptr;  // decremented when a call ends
};

// What the handler decided for one request.
struct CallPlan {
  api::Api api = api::Api::kCompletions;
  std::string route;  // metrics label, e.g. "/v1/chat/completions"
  std::string path;   // upstream target
  bool want_worker_id = false;
  bool want_cached_blocks = false;
  bool want_experts = false;
  bool wants_nvext() const { return want_worker_id || want_cached_blocks || want_experts; }
  bool drop_usage = false;  // usage was forced upstream for routed experts; the client did not ask
  // The body for the engine: the client's bytes, or re-serialized when kvgate added fields
  // (routed-experts request fields, stream_options) or removed its own (nvext).
  std::string body;
  // With routed experts, the body is finished per attempt: the fields that ask for them
  // depend on the chosen worker's engine.
  boost::json::object experts_body;
  uint64_t experts_start = 0;
  std::vector<uint64_t> local_hashes;
  std::vector<uint64_t> eagle_hashes;  // only when the router wants them
  uint32_t prompt_tokens = 0;
  // Client headers the engine should see too (request ids, trace context).
  std::vector<std::pair<std::string, std::string>> forward_headers;
  std::chrono::steady_clock::time_point received;
};

class ProxyCall : public http::ResponseSink, public std::enable_shared_from_this<ProxyCall> {
 public:
  // Sends `plan` to the worker `decision` chose; the call answers `responder` in the end.
  static void Start(ProxyServices& services, CallPlan plan, routing::RouteDecision decision,
                    std::shared_ptr<http::Responder> responder);

  ProxyCall(ProxyServices& services, CallPlan plan, routing::RouteDecision decision,
            std::shared_ptr<http::Responder> responder);
  ~ProxyCall() override;

  void OnHeaders(int status, std::string_view content_type) override;
  void OnBody(std::string_view data) override;
  void OnDone(const Status& status) override;
  bool Cancelled() const override { return !responder_->connected(); }

 private:
  void Send();
  bool Retry();
  void OnFirstByte();
  void OnStreamEvent(std::string_view event);
  // `complete`: the engine finished the response (else it failed part-way).
  void FlushFinal(bool complete);
  void WriteEvent(const boost::json::object& chunk);
  boost::json::object Nvext(bool complete);
  // Counts the request and releases its load on the router; before the last byte goes out.
  void Finish(int status, bool succeeded);

  ProxyServices& services_;
  const CallPlan plan_;
  routing::RouteDecision decision_;
  std::shared_ptr<http::Responder> responder_;
  std::vector<kv::WorkerKey> failed_;

  // This attempt.
  int status_ = 0;
  std::string content_type_;
  bool streaming_ = false;  // the client's response has begun (SSE)
  bool rewrite_ = false;    // the stream is rewritten event by event
  bool first_byte_ = false;
  std::string body_;  // non-streaming responses, and failed attempts' error bodies

  // Stream rewriting: the final chunk is held until the engine has sent everything that
  // belongs in it (SGLang sends routed experts in a chunk after the finish_reason).
  api::SseSplitter splitter_;
  std::optional<boost::json::object> final_chunk_;
  std::vector<std::string> after_final_;
  bool final_flushed_ = false;
  boost::json::value experts_;
  bool experts_found_ = false;
  uint64_t experts_start_ = 0;
  engines::TokenCounts counts_;
  bool finished_ = false;
};

}  // namespace kvgate::gateway
