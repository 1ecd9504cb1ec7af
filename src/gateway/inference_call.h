// One client inference request's whole life in the gateway: read and hash it, admit it,
// route it, send it to the engine, stream the response back as it arrives (rewritten for
// nvext when asked), retry once on the next-best worker when an attempt failed before any
// byte reached the client, and settle the books (load, in-flight count, metrics) once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "api/response_rewriter.h"
#include "common/work_queue.h"
#include "gateway/call_plan.h"
#include "gateway/config.h"
#include "gateway/decision_log.h"
#include "gateway/tenants.h"
#include "gateway/wait_queue.h"
#include "http/client.h"
#include "http/server.h"
#include "routing/router.h"

namespace kvgate::gateway {

struct GatewayMetrics;
class Fidelity;
class WorkerPool;

// What the gateway shares with every call.
struct CallServices {
  const ServedModel& model;
  routing::Router& router;
  WorkerPool& workers;
  http::Client& client;
  GatewayMetrics& metrics;
  Fidelity& fidelity;
  const LimitsConfig& limits;
  const PdConfig& pd;
  Tenants& tenants;
  WaitQueue& queue;           // requests waiting for a free worker
  WorkQueue& prompt_workers;  // where large prompts are templated and tokenized
  DecisionLog& decisions;     // the latest routing decisions (dashboard)
  std::atomic<int64_t> in_flight{0};
};

class InferenceCall : public http::ResponseSink,
                      public std::enable_shared_from_this<InferenceCall> {
 public:
  // Serves `req` to `api`; `responder` is answered in every case (errors in OpenAI's shape).
  // Admission comes first, so a rejected request costs no templating or tokenizing.
  static void Start(CallServices& services, api::Api api, http::Request req,
                    std::shared_ptr<http::Responder> responder);

  // `tenant` was charged `charged` tokens for it (settled when it ends).
  InferenceCall(CallServices& services, CallPlan plan, routing::RouteDecision decision,
                std::shared_ptr<http::Responder> responder, uint32_t tenant, uint64_t charged);
  ~InferenceCall() override;

  void OnHeaders(int status, std::string_view content_type) override;
  void OnBody(std::string_view data) override;
  void OnDone(const Status& status) override;
  bool Cancelled() const override { return too_large_ || !responder_->connected(); }
  bool Backlogged() const override;
  void OnCancellable(std::function<void()> cancel) override;

 private:
  // After admission: read and hash the request, route it, send it.
  static void Plan(CallServices& services, api::Api api, const http::Request& req,
                   std::chrono::steady_clock::time_point received, uint32_t tenant,
                   std::shared_ptr<http::Responder> responder);
  // Routed (the worker that answers the client is chosen): runs a prefill phase first when
  // the fleet has prefill workers and the chosen one lacks enough of the prompt
  // (docs/design.md §12), then sends.
  // A planned request with a worker: the call begins.
  static void Launch(CallServices& services, CallPlan plan, routing::RouteDecision decision,
                     std::shared_ptr<http::Responder> responder, uint32_t tenant, uint64_t charged);
  // Every worker is busy: the request waits for one in the queue (or gets 503).
  static void Wait(CallServices& services, CallPlan plan,
                   std::shared_ptr<http::Responder> responder, uint32_t tenant, uint64_t charged);
  void Begin();
  bool RoutePrefill();
  void StartPrefill();  // vLLM: the prefill phase, then Send()
  void OnPrefilled(const Status& transfer, int code, std::string body);
  void StartConcurrentPrefill();  // SGLang: the prefill request beside the decode one
  void OnConcurrentPrefillDone(const Status& transfer, int code, std::string body);
  // The concurrent prefill answer is in: what the decode stream held back goes on, and an
  // end that waited for it runs (on this, the prefill answer's, thread).
  void PrefillAnswered();
  void FeedBody(std::string_view data);
  // The prefill worker's answer: its token counts, its routed experts kept (when asked).
  engines::TokenCounts ReadPrefillAnswer(std::string_view body);
  // Checks a worker's reported counts against the gateway's prediction for it (§14).
  void ObserveFidelity(uint32_t slot, uint32_t predicted_blocks,
                       const engines::TokenCounts& reported);
  // Keeps the prefill worker's routed experts (its answer's), when the client asked.
  void KeepPromptExperts(boost::json::object& answer, const engines::TokenCounts& counts);
  // Where the phase went wrong, counted against the prefill worker; `why` for the log.
  void PrefillFailed(std::string_view why, bool worker_at_fault);
  void Send();
  void Write(std::string data);
  // The client left: stop waiting on the engine (the client closes that connection).
  void CancelUpstream();
  bool Retry();
  void OnFirstByte();
  api::ResponseRewriter MakeRewriter() const;
  void CountExpertsProblem(const api::ResponseRewriter& rewriter);
  // Counts the request and releases its load and its in-flight slot; before the last byte
  // goes out, so a client that reads /metrics right after its response sees it counted.
  // A success is also checked against the engine's counts (`reported`).
  void Finish(int status, bool succeeded, const engines::TokenCounts& reported = {});

  CallServices& services_;
  const CallPlan plan_;
  routing::RouteDecision decision_;
  std::shared_ptr<http::Responder> responder_;
  const uint32_t tenant_;
  const uint64_t charged_;  // tokens charged to the tenant up front
  std::vector<kv::WorkerKey> failed_;
  bool retried_ = false;
  bool finished_ = false;
  // Disaggregation.
  enum class PdPath : uint8_t { kNone, kDisaggregated, kPrefillSkipped, kFallback };
  PdPath pd_path_ = PdPath::kNone;
  std::optional<routing::RouteDecision> prefill_;  // the prefill phase's worker
  std::vector<kv::WorkerKey> prefill_failed_;
  boost::json::object decode_fields_;  // added to the body the decode worker gets
  std::atomic<bool> concurrent_prefill_failed_{false};
  mutable std::mutex prompt_experts_mu_;  // guards the three below
  boost::json::value prompt_experts_;     // set by the prefill answer, read at the end
  // SGLang, routed experts asked: the decode worker's end waits for the prefill worker's
  // answer (it holds the prompt rows), which runs on another thread.
  bool awaits_prefill_answer_ = false;
  bool draining_held_ = false;  // PrefillAnswered is passing on what was held
  std::string held_;            // decode stream bytes held until the prefill answer
  std::optional<Status> deferred_done_;
  std::chrono::steady_clock::time_point phase_start_;
  std::mutex cancel_mu_;  // the canceller is set on a client thread, used on a server one
  std::function<void()> cancel_upstream_;

  // This attempt.
  int status_ = 0;
  std::string content_type_;
  bool streaming_ = false;  // the client's response has begun (SSE)
  bool first_byte_ = false;
  std::string body_;             // non-streaming responses, and failed attempts' error bodies
  bool too_large_ = false;       // the non-streaming body passed limits.max_response_bytes
  char tail_[2] = {'\n', '\n'};  // the last bytes passed through: is the stream between events?
  std::optional<api::ResponseRewriter> stream_rewriter_;  // for every stream
};

}  // namespace kvgate::gateway
