#include "gateway/inference_call.h"

#include <fmt/format.h>

#include "api/error.h"
#include "api/request_fields.h"
#include "api/routed_experts.h"
#include "api/sse.h"
#include "common/log.h"
#include "gateway/fidelity.h"
#include "gateway/gateway_metrics.h"
#include "gateway/prefill_phase.h"
#include "gateway/worker_pool.h"

namespace kvgate::gateway {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

routing::FairShare ShareOf(const CallServices& s, uint32_t tenant) {
  return s.tenants.ShareOf(tenant, s.router.RequestSlots());
}

LogRateLimiter experts_log_limiter(5);
LogRateLimiter upstream_log_limiter(5);
LogRateLimiter fallback_log_limiter(5);
LogRateLimiter prefill_log_limiter(5);

constexpr std::string_view kPdPathNames[] = {"", "disaggregated", "prefill_skipped", "fallback"};

}  // namespace

// 429 and 503 tell the client when to come back.
static void Reject(CallServices& s, const std::string& route, http::Responder& responder,
                   const Status& status) {
  const int code = api::HttpStatus(status.code());
  s.metrics.requests.Add({route, std::to_string(code)});
  http::Responder::Headers headers;
  if (code == 429 || code == 503) headers.emplace_back("Retry-After", "1");
  responder.Send(code, "application/json", api::ErrorBody(status), std::move(headers));
}

// A tenant over one of its limits: 429 in OpenAI's shape, saying when there is room.
static void RejectTenant(CallServices& s, const std::string& route, http::Responder& responder,
                         uint32_t tenant, const Tenants::Refusal& refusal) {
  s.metrics.requests.Add({route, "429"});
  const std::string message =
      fmt::format("tenant '{}' is over its {} limit; retry in {} s", s.tenants.config(tenant).name,
                  RejectionName(refusal.why), refusal.retry_after_s);
  responder.Send(429, "application/json", api::ErrorBody(429, message, "rate_limit_exceeded"),
                 {{"Retry-After", std::to_string(refusal.retry_after_s)}});
}

void InferenceCall::Start(CallServices& s, api::Api api, http::Request req,
                          std::shared_ptr<http::Responder> responder) {
  const auto received = std::chrono::steady_clock::now();
  if (s.in_flight.fetch_add(1) >= static_cast<int64_t>(s.limits.max_in_flight)) {
    --s.in_flight;
    return Reject(s, req.path, *responder,
                  {StatusCode::kResourceExhausted,
                   fmt::format("more than {} requests in flight", s.limits.max_in_flight)});
  }
  // (The route's key check found the tenant already.)
  const uint32_t tenant = s.tenants.Find(req.Header("authorization")).value_or(0);
  if (auto refusal = s.tenants.Begin(tenant)) {
    --s.in_flight;
    return RejectTenant(s, req.path, *responder, tenant, *refusal);
  }
  if (req.body.size() < s.limits.offload_prompt_bytes) {
    return Plan(s, api, req, received, tenant, std::move(responder));
  }
  s.prompt_workers.Post([&s, api, req = std::move(req), received, tenant, responder] {
    Plan(s, api, req, received, tenant, responder);
  });
}

void InferenceCall::Plan(CallServices& s, api::Api api, const http::Request& req,
                         std::chrono::steady_clock::time_point received, uint32_t tenant,
                         std::shared_ptr<http::Responder> responder) {
  CallPlan plan;
  plan.received = received;
  if (Status st = PlanCall(s.model, s.router.wants_eagle_hashes(), api, req, &plan); !st.ok()) {
    --s.in_flight;
    s.tenants.End(tenant, 0, 0);
    return Reject(s, req.path, *responder, st);
  }
  // Its tokens: the prompt and all it may generate, settled when it ends.
  const uint64_t tokens =
      plan.request.prompt.size() +
      uint64_t{plan.request.max_tokens.value_or(kDefaultMaxTokens)} * plan.request.n;
  if (auto refusal = s.tenants.Charge(tenant, tokens)) {
    --s.in_flight;
    return RejectTenant(s, req.path, *responder, tenant, *refusal);
  }
  bool all_busy = false;
  std::optional<routing::RouteDecision> decision =
      s.router.Route(RouteRequestOf(plan, ShareOf(s, tenant)), &all_busy);
  if (!decision && all_busy) return Wait(s, std::move(plan), std::move(responder), tenant, tokens);
  if (!decision) {
    --s.in_flight;
    s.tenants.End(tenant, tokens, 0);
    return Reject(s, req.path, *responder,
                  {StatusCode::kUnavailable, "no healthy worker is available"});
  }
  Launch(s, std::move(plan), *decision, std::move(responder), tenant, tokens);
}

void InferenceCall::Launch(CallServices& s, CallPlan plan, routing::RouteDecision decision,
                           std::shared_ptr<http::Responder> responder, uint32_t tenant,
                           uint64_t charged) {
  s.metrics.prompt_blocks.Add({}, static_cast<double>(plan.local_hashes.size()));
  if (!plan.request.prompt_fallback.empty()) {
    s.metrics.prompt_fallback.Add({plan.request.prompt_fallback});
    if (fallback_log_limiter.Allow()) {
      Log(LogLevel::kWarn, "routed a request without its prompt ({}: {}); the engine decides",
          plan.request.prompt_fallback, plan.request.prompt_error);
    }
  }
  s.decisions.Record({std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count(),
                      decision, s.workers.worker(decision.worker.worker).config.id,
                      s.tenants.config(tenant).name,
                      static_cast<uint32_t>(plan.request.prompt.size())});
  auto call =
      std::make_shared<InferenceCall>(s, std::move(plan), decision, responder, tenant, charged);
  responder->OnDisconnect([weak = std::weak_ptr<InferenceCall>(call)] {
    if (auto self = weak.lock()) self->CancelUpstream();
  });
  call->Begin();
}

void InferenceCall::Wait(CallServices& s, CallPlan plan, std::shared_ptr<http::Responder> responder,
                         uint32_t tenant, uint64_t charged) {
  const std::string path = plan.path;
  const std::string& name = s.tenants.config(tenant).name;
  auto held = std::make_shared<CallPlan>(std::move(plan));
  auto gone = std::make_shared<std::atomic<bool>>(false);
  responder->OnDisconnect([gone] { *gone = true; });
  const auto enqueued = std::chrono::steady_clock::now();
  WaitQueue::Ticket ticket{
      tenant,
      s.tenants.config(tenant).priority,
      charged,
      [&s, held, responder, tenant, charged, enqueued, name] {
        std::optional<routing::RouteDecision> d =
            s.router.Route(RouteRequestOf(*held, ShareOf(s, tenant)));
        if (!d) return false;
        s.metrics.queue_wait_seconds.Observe({name}, SecondsSince(enqueued));
        Launch(s, std::move(*held), *d, responder, tenant, charged);
        return true;
      },
      [&s, responder, tenant, charged, path, name](WaitQueue::Exit why) {
        --s.in_flight;
        s.tenants.End(tenant, charged, 0);
        s.metrics.queue_exits.Add({name, why == WaitQueue::Exit::kTimedOut     ? "timeout"
                                         : why == WaitQueue::Exit::kClientLeft ? "client_left"
                                                                               : "stopped"});
        Reject(s, path, *responder,
               {StatusCode::kUnavailable, why == WaitQueue::Exit::kTimedOut
                                              ? "every worker stayed busy while it waited"
                                              : "the request left the wait queue"});
      },
      gone};
  if (!s.queue.Push(std::move(ticket))) {
    --s.in_flight;
    s.tenants.End(tenant, charged, 0);
    s.metrics.queue_exits.Add({name, "full"});
    return Reject(s, path, *responder,
                  {StatusCode::kUnavailable, "every worker is busy and the wait queue is full"});
  }
  s.queue.Pump();  // a worker may have come free meanwhile
}

void InferenceCall::Begin() {
  if (!services_.router.HasRoutable(/*prefill_phase=*/true)) return Send();
  const Worker& decode = services_.workers.worker(decision_.worker.worker);
  const engines::Disaggregation protocol = engines::TraitsOf(decode.config.engine).disaggregation;
  const uint64_t cached = uint64_t{decision_.cached_blocks} * services_.model.block_size;
  const uint64_t missing =
      plan_.request.prompt.size() - std::min<uint64_t>(cached, plan_.request.prompt.size());
  if (missing <= services_.pd.min_prefill_tokens) {
    pd_path_ = PdPath::kPrefillSkipped;  // the decode worker has (nearly) all of it
    return Send();
  }
  if (protocol == engines::Disaggregation::kNone || !RoutePrefill()) {
    pd_path_ = PdPath::kFallback;
    return Send();
  }
  pd_path_ = PdPath::kDisaggregated;
  phase_start_ = std::chrono::steady_clock::now();
  if (protocol == engines::Disaggregation::kKvTransferParams) return StartPrefill();
  StartConcurrentPrefill();
  Send();
}

bool InferenceCall::RoutePrefill() {
  routing::RouteRequest route = RouteRequestOf(plan_, routing::FairShare::kNotShared);
  route.prefill_phase = true;
  route.exclude = prefill_failed_;
  std::optional<routing::RouteDecision> d = services_.router.Route(route);
  if (!d) return false;
  prefill_ = d;
  return true;
}

// A request to a worker with what every attempt sends: the client's forwarded headers, the
// dp rank when the worker has several, and the timeouts (`first_byte`: until its headers).
static http::ClientRequest UpstreamRequest(const CallPlan& plan, const LimitsConfig& limits,
                                           const Worker& w, uint32_t dp_rank, std::string body,
                                           std::chrono::milliseconds first_byte) {
  http::ClientRequest request;
  request.target = plan.path;
  request.body = std::move(body);
  request.timeouts = {limits.connect_timeout, first_byte, limits.idle_timeout};
  request.headers = plan.forward_headers;
  if (w.config.dp_size > 1) {
    request.headers.emplace_back("X-data-parallel-rank", std::to_string(dp_rank));
  }
  return request;
}

void InferenceCall::StartPrefill() {
  const Worker& w = services_.workers.worker(prefill_->worker.worker);
  services_.metrics.routed.Add({w.config.id});
  auto self = shared_from_this();
  services_.client.Fetch(w.endpoint,
                         UpstreamRequest(plan_, services_.limits, w, prefill_->worker.dp_rank,
                                         VllmPrefillBody(plan_.EngineBody(w.config.engine)),
                                         services_.limits.non_streaming_timeout),
                         std::make_shared<PrefillSink>(
                             [self](const Status& transfer, int code, std::string body) {
                               self->OnPrefilled(transfer, code, std::move(body));
                             },
                             [self] { return !self->responder_->connected(); }));
}

void InferenceCall::OnPrefilled(const Status& transfer, int code, std::string body) {
  std::optional<boost::json::object> params;
  if (transfer.ok() && code == 200) params = TransferParamsOf(body);
  if (!params) {
    const bool at_fault = !transfer.ok() || code >= 500;
    PrefillFailed(!transfer.ok() ? transfer.message()
                  : code != 200  ? fmt::format("status {}: {}", code, body.substr(0, 200))
                                 : "its answer has no kv_transfer_params",
                  at_fault);
    if (responder_->connected() && prefill_failed_.size() == 1 && RoutePrefill()) {
      return StartPrefill();  // once more, on another prefill worker
    }
    pd_path_ = PdPath::kFallback;  // served whole by the decode worker
    prefill_.reset();
    return Send();
  }
  const Worker& w = services_.workers.worker(prefill_->worker.worker);
  services_.workers.ReportSuccess(w.slot, WorkerPool::Check::kInference);
  // The prefill worker's answer is where the gateway's cache prediction can be checked.
  ObserveFidelity(w.slot, prefill_->cached_blocks, ReadPrefillAnswer(body));
  services_.router.OnFinished(prefill_->id);
  services_.metrics.pd_phase_seconds.Observe({"prefill"}, SecondsSince(phase_start_));
  decode_fields_ = {{"kv_transfer_params", std::move(*params)}};
  services_.router.OnFirstToken(decision_.id);  // the decode worker does not prefill it
  phase_start_ = std::chrono::steady_clock::now();
  Send();
}

void InferenceCall::StartConcurrentPrefill() {
  const Worker& w = services_.workers.worker(prefill_->worker.worker);
  if (w.config.bootstrap_port == 0) {
    // Its record names no bootstrap server: the decode worker could not find the KV.
    PrefillFailed("its worker record has no bootstrap_port", /*worker_at_fault=*/false);
    pd_path_ = PdPath::kFallback;
    prefill_.reset();
    return;
  }
  services_.metrics.routed.Add({w.config.id});
  decode_fields_ = BootstrapFields(w.endpoint.host, w.config.bootstrap_port);
  {
    std::lock_guard lock(prompt_experts_mu_);
    awaits_prefill_answer_ = plan_.request.extra.routed_experts && plan_.request.n == 1;
  }
  auto self = shared_from_this();
  services_.client.Fetch(
      w.endpoint,
      UpstreamRequest(plan_, services_.limits, w, prefill_->worker.dp_rank,
                      BootstrapPrefillBody(plan_.EngineBody(w.config.engine), decode_fields_),
                      services_.limits.non_streaming_timeout),
      std::make_shared<PrefillSink>(
          [self](const Status& transfer, int code, std::string body) {
            self->OnConcurrentPrefillDone(transfer, code, std::move(body));
          },
          [self] { return !self->responder_->connected(); }));
}

void InferenceCall::OnConcurrentPrefillDone(const Status& transfer, int code, std::string body) {
  if (transfer.ok() && code == 200) {
    ReadPrefillAnswer(body);
    services_.router.OnFinished(prefill_->id);
    services_.metrics.pd_phase_seconds.Observe({"prefill"}, SecondsSince(phase_start_));
    return PrefillAnswered();
  }
  if (!responder_->connected()) {
    services_.router.OnFailed(prefill_->id);
    return PrefillAnswered();
  }
  PrefillFailed(transfer.ok() ? fmt::format("status {}", code) : transfer.message(),
                !transfer.ok() || code >= 500);
  // The decode worker waits for a room that will never be ready: stop it, and OnDone sends
  // the request again.
  concurrent_prefill_failed_ = true;
  CancelUpstream();
  PrefillAnswered();
}

void InferenceCall::PrefillAnswered() {
  std::unique_lock lock(prompt_experts_mu_);
  awaits_prefill_answer_ = false;
  draining_held_ = true;
  while (!held_.empty()) {  // (OnBody holds what arrives meanwhile: order is kept)
    const std::string bytes = std::exchange(held_, {});
    lock.unlock();
    FeedBody(bytes);
    lock.lock();
  }
  draining_held_ = false;
  std::optional<Status> done = std::exchange(deferred_done_, std::nullopt);
  lock.unlock();
  if (done) OnDone(*done);
}

engines::TokenCounts InferenceCall::ReadPrefillAnswer(std::string_view body) {
  boost::system::error_code ec;
  boost::json::value answer = api::ParseJson(body, ec);
  engines::TokenCounts counts;
  if (ec || !answer.is_object()) return counts;
  engines::ReadTokenCounts(answer.as_object(), &counts);
  KeepPromptExperts(answer.as_object(), counts);
  return counts;
}

void InferenceCall::ObserveFidelity(uint32_t slot, uint32_t predicted_blocks,
                                    const engines::TokenCounts& reported) {
  // The engine serves at most prompt - 1 tokens from its cache, in whole blocks.
  // (A partial prompt is no measure of the gateway's view: it is not compared.)
  const uint64_t prompt = plan_.request.prompt_fallback.empty() ? plan_.request.prompt.size() : 0;
  const uint64_t bs = services_.model.block_size;
  const uint64_t cacheable_blocks = prompt == 0 ? 0 : (prompt - 1) / bs;
  services_.fidelity.Observe(slot, prompt,
                             std::min<uint64_t>(predicted_blocks, cacheable_blocks) * bs, reported);
}

void InferenceCall::KeepPromptExperts(boost::json::object& answer,
                                      const engines::TokenCounts& counts) {
  if (!plan_.request.extra.routed_experts || plan_.request.n != 1) return;
  std::vector<engines::ChoiceExperts> found;
  uint64_t start = plan_.request.routed_experts_start;
  if (!engines::TakeRoutedExperts(answer, found, &start) || found.empty()) return;
  api::ExpertsContext context;
  context.layers = services_.model.experts_layers;
  context.top_k = services_.model.experts_top_k;
  context.prompt_tokens = counts.prompt;
  context.completion_tokens = counts.completion;
  context.start = start;
  std::string problem;
  boost::json::value rows = api::NormalizeRoutedExperts(found.front().native, context, &problem);
  std::lock_guard lock(prompt_experts_mu_);
  prompt_experts_ = std::move(rows);
}

void InferenceCall::PrefillFailed(std::string_view why, bool worker_at_fault) {
  const Worker& w = services_.workers.worker(prefill_->worker.worker);
  services_.router.OnFailed(prefill_->id);
  prefill_failed_.push_back(prefill_->worker);
  if (worker_at_fault) {
    services_.metrics.upstream_errors.Add({w.config.id});
    services_.workers.ReportFailure(w.slot, WorkerPool::Check::kInference, why);
  }
  if (prefill_log_limiter.Allow()) {
    Log(LogLevel::kWarn, "prefill worker {} ({}): {}", w.config.id, w.config.url, why);
  }
}

void InferenceCall::OnCancellable(std::function<void()> cancel) {
  {
    std::lock_guard lock(cancel_mu_);
    cancel_upstream_ = cancel;
  }
  if (!responder_->connected()) cancel();  // it left before the fetch began to wait
}

void InferenceCall::CancelUpstream() {
  std::function<void()> cancel;
  {
    std::lock_guard lock(cancel_mu_);
    cancel = cancel_upstream_;
  }
  if (cancel) cancel();
}

InferenceCall::InferenceCall(CallServices& services, CallPlan plan, routing::RouteDecision decision,
                             std::shared_ptr<http::Responder> responder, uint32_t tenant,
                             uint64_t charged)
    : services_(services),
      plan_(std::move(plan)),
      decision_(decision),
      responder_(std::move(responder)),
      tenant_(tenant),
      charged_(charged) {}

InferenceCall::~InferenceCall() {
  // Abandoned without OnDone (the gateway shut down): still balance the books.
  if (!finished_) {
    services_.router.OnFailed(decision_.id);
    services_.tenants.End(tenant_, charged_, charged_);
    --services_.in_flight;
  }
}

void InferenceCall::Send() {
  const Worker& w = services_.workers.worker(decision_.worker.worker);
  const std::string& worker = w.config.id;
  services_.metrics.routed.Add({worker});
  services_.metrics.predicted_blocks.Add({worker}, decision_.cached_blocks);
  std::string body = plan_.EngineBody(w.config.engine);
  if (!decode_fields_.empty()) body = WithFields(body, decode_fields_);
  const LimitsConfig& limits = services_.limits;
  http::ClientRequest request = UpstreamRequest(
      plan_, limits, w, decision_.worker.dp_rank, std::move(body),
      plan_.request.stream ? limits.first_byte_timeout : limits.non_streaming_timeout);
  status_ = 0;
  body_.clear();
  services_.client.Fetch(w.endpoint, std::move(request), shared_from_this());
}

api::ResponseRewriter InferenceCall::MakeRewriter() const {
  api::RewriteOptions o;
  o.extra = plan_.request.extra;
  o.drop_usage = plan_.drop_usage;
  o.experts_layers = services_.model.experts_layers;
  o.experts_top_k = services_.model.experts_top_k;
  o.experts_start = plan_.request.routed_experts_start;
  o.choices = plan_.request.n;
  o.worker_id = services_.workers.worker(decision_.worker.worker).config.id;
  o.dp_rank = decision_.worker.dp_rank;
  o.cached_blocks = decision_.cached_blocks;
  if (prefill_) {
    o.prefill_worker_id = services_.workers.worker(prefill_->worker.worker).config.id;
    o.cached_blocks = prefill_->cached_blocks;  // where the prompt was computed
    if (o.extra.routed_experts && o.choices == 1) {
      // (The rewriter lives inside this call: `this` outlives it.)
      o.prompt_experts = [this] {
        std::lock_guard lock(prompt_experts_mu_);
        return prompt_experts_;
      };
    }
  }
  return api::ResponseRewriter(o);
}

void InferenceCall::CountExpertsProblem(const api::ResponseRewriter& rewriter) {
  if (rewriter.experts_problem().empty()) return;
  services_.metrics.experts_invalid.Add({});
  if (experts_log_limiter.Allow()) {
    Log(LogLevel::kWarn, "worker {}: routed experts: {}", decision_.worker.worker,
        rewriter.experts_problem());
  }
}

void InferenceCall::OnHeaders(int status, std::string_view content_type) {
  status_ = status;
  content_type_ = content_type.empty() ? "application/json" : std::string(content_type);
  if (status >= 500) return;  // an engine failure: maybe retried, the body is kept as the reason
  if (content_type.substr(0, 17) == "text/event-stream") {
    streaming_ = true;
    stream_rewriter_.emplace(MakeRewriter());
    responder_->Begin(status, std::string(content_type));
  }
}

void InferenceCall::OnFirstByte() {
  first_byte_ = true;
  services_.router.OnFirstToken(decision_.id);
  services_.metrics.ttft_seconds.Observe({plan_.path}, SecondsSince(plan_.received));
  if (services_.router.config().worker_max_prefill_tokens) services_.queue.Pump();
}

bool InferenceCall::Backlogged() const {
  return responder_->buffered_bytes() > services_.limits.client_buffer_bytes;
}

void InferenceCall::Write(std::string data) {
  if (data.size() >= 2) {
    tail_[0] = data[data.size() - 2];
  } else if (!data.empty()) {
    tail_[0] = tail_[1];
  }
  if (!data.empty()) tail_[1] = data.back();
  responder_->Write(std::move(data));
}

void InferenceCall::OnBody(std::string_view data) {
  if (streaming_) {
    // SGLang with routed experts asked: the stream's end carries them, and needs the
    // prefill worker's answer first.
    std::lock_guard lock(prompt_experts_mu_);
    if (awaits_prefill_answer_ || draining_held_) {
      held_.append(data);
      return;
    }
  }
  FeedBody(data);
}

void InferenceCall::FeedBody(std::string_view data) {
  if (!streaming_) {
    if (body_.size() + data.size() > services_.limits.max_response_bytes) {
      too_large_ = true;  // Cancelled() now: the engine's connection is dropped
      return;
    }
    body_.append(data);
    return;
  }
  if (!first_byte_) OnFirstByte();
  // What one read of the engine yields goes to the client as one piece (one write), not
  // one per event.
  std::string out;
  stream_rewriter_->Feed(data, [&out](std::string event) { out += event; });
  if (!out.empty()) Write(std::move(out));
}

bool InferenceCall::Retry() {
  if (retried_ || !responder_->connected()) return false;  // once per request
  retried_ = true;
  // A disaggregated attempt may have failed for its KV's sake (e.g. the prefill worker died
  // before the decode worker fetched it): its decode worker may still serve it whole.
  if (pd_path_ != PdPath::kDisaggregated) failed_.push_back(decision_.worker);
  routing::RouteRequest again = RouteRequestOf(plan_, ShareOf(services_, tenant_));
  again.exclude = failed_;
  auto next = services_.router.Route(again);
  if (!next) return false;  // the caller fails the first decision
  services_.router.OnFailed(decision_.id);
  services_.metrics.retries.Add({});
  decision_ = *next;
  if (pd_path_ == PdPath::kDisaggregated) pd_path_ = PdPath::kFallback;  // served whole there
  decode_fields_.clear();
  Send();
  return true;
}

void InferenceCall::OnDone(const Status& status) {
  {
    std::lock_guard lock(prompt_experts_mu_);
    if (awaits_prefill_answer_ || draining_held_) {
      deferred_done_ = status;  // PrefillAnswered takes it from here
      return;
    }
  }
  if (concurrent_prefill_failed_.exchange(false) && !first_byte_ && !streaming_ &&
      responder_->connected()) {
    // SGLang: its prefill worker failed while this decode worker waited for the KV. Once
    // more with another prefill worker, else whole on this one.
    decode_fields_.clear();
    if (prefill_failed_.size() == 1 && RoutePrefill()) {
      StartConcurrentPrefill();
    } else {
      pd_path_ = PdPath::kFallback;
      prefill_.reset();
    }
    return Send();
  }
  const Worker& w = services_.workers.worker(decision_.worker.worker);
  if (too_large_) {
    const Status failure(StatusCode::kAborted,
                         fmt::format("worker {}'s response is larger than {} bytes", w.config.id,
                                     services_.limits.max_response_bytes));
    Finish(api::HttpStatus(failure.code()), /*succeeded=*/false);
    return responder_->Send(502, "application/json", api::ErrorBody(failure));
  }
  // Out of descriptors or memory here: not the worker's fault, and no use retrying.
  const bool local = status.code() == StatusCode::kResourceExhausted;
  const bool engine_failed = !status.ok() || status_ >= 500;
  const std::string detail = status.ok() ? fmt::format("status {}", status_) : status.message();
  if (engine_failed && !local && !Cancelled()) {
    services_.metrics.upstream_errors.Add({w.config.id});
    services_.workers.ReportFailure(w.slot, WorkerPool::Check::kInference, detail);
  } else if (!engine_failed) {
    services_.workers.ReportSuccess(w.slot, WorkerPool::Check::kInference);
  }
  if (engine_failed && upstream_log_limiter.Allow()) {
    Log(LogLevel::kWarn, "worker {} ({}): {}", w.config.id, w.config.url, detail);
  }
  auto write = [this](std::string out) { Write(std::move(out)); };
  if (engine_failed && !streaming_) {
    if (!local && Retry()) return;
    // The client learns which worker failed and how, not where it lives (that is logged).
    const Status failure =
        local ? Status(StatusCode::kUnavailable, "the gateway is short of resources; retry later")
        : status.timed_out() ? Status(StatusCode::kDeadlineExceeded,
                                      fmt::format("worker {} did not answer in time", w.config.id))
        : status.ok()
            ? Status(StatusCode::kAborted, fmt::format("worker {} answered {}: {}", w.config.id,
                                                       status_, body_.substr(0, 300)))
            : Status(StatusCode::kAborted, fmt::format("worker {} failed", w.config.id));
    const int code = api::HttpStatus(failure.code());
    Finish(code, /*succeeded=*/false);
    http::Responder::Headers headers;
    if (code == 503) headers.emplace_back("Retry-After", "1");
    return responder_->Send(code, "application/json", api::ErrorBody(failure), std::move(headers));
  }
  if (streaming_) {
    if (!status.ok()) {
      // Bytes already reached the client: end the stream with an error event, never a hang,
      // after whatever part of an event the engine left unfinished.
      stream_rewriter_->Finish(/*complete=*/false, write);
      if (tail_[0] != '\n' || tail_[1] != '\n') Write("\n\n");
      const Status failure(StatusCode::kAborted,
                           fmt::format("worker {} failed mid-stream", w.config.id));
      Write(api::SseEvent(api::ErrorBody(failure)));
      Finish(api::HttpStatus(failure.code()), /*succeeded=*/false);
      return responder_->End();
    }
    stream_rewriter_->Finish(/*complete=*/true, write);
    CountExpertsProblem(*stream_rewriter_);
    Finish(status_, /*succeeded=*/true, stream_rewriter_->counts());
    return responder_->End();
  }
  // A whole JSON response (or a 4xx the engine chose): add nvext when asked.
  if (!first_byte_) OnFirstByte();
  engines::TokenCounts counts;
  if (status_ < 400) {
    api::ResponseRewriter rewriter = MakeRewriter();
    body_ = rewriter.RewriteBody(std::move(body_));
    CountExpertsProblem(rewriter);
    counts = rewriter.counts();
  }
  Finish(status_, /*succeeded=*/true, counts);
  responder_->Send(status_, content_type_, std::move(body_));
}

void InferenceCall::Finish(int status, bool succeeded, const engines::TokenCounts& reported) {
  finished_ = true;
  // What it really used, where the engine said so; else what it was charged.
  const uint64_t used = reported.prompt && reported.completion
                            ? *reported.prompt + *reported.completion
                            : (succeeded ? charged_ : 0);
  services_.tenants.End(tenant_, charged_, used);
  if (succeeded) {
    // A decode worker counts the KV it received as cached: no measure of the prediction
    // (the prefill phase's answer was).
    if (!prefill_) {
      ObserveFidelity(decision_.worker.worker, decision_.cached_blocks, reported);
    } else {
      services_.metrics.pd_phase_seconds.Observe({"decode"}, SecondsSince(phase_start_));
    }
    services_.router.OnFinished(decision_.id);
  } else {
    services_.router.OnFailed(decision_.id);
  }
  if (pd_path_ != PdPath::kNone) {
    services_.metrics.pd_requests.Add({std::string(kPdPathNames[static_cast<size_t>(pd_path_)])});
  }
  services_.queue.Pump();  // its worker has room again
  services_.metrics.requests.Add({plan_.path, std::to_string(status)});
  services_.metrics.request_seconds.Observe({plan_.path}, SecondsSince(plan_.received));
  --services_.in_flight;
}

}  // namespace kvgate::gateway
