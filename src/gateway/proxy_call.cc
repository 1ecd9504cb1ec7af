#include "gateway/proxy_call.h"

#include <fmt/format.h>

#include "api/routed_experts.h"
#include "common/log.h"
#include "gateway/gateway_metrics.h"
#include "gateway/worker_pool.h"

namespace kvgate::gateway {
namespace {

namespace json = boost::json;

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

bool IsFinalChunk(const json::object& chunk) {
  if (const json::value* choices = chunk.if_contains("choices"); choices && choices->is_array()) {
    for (const json::value& c : choices->as_array()) {
      const json::value* reason =
          c.is_object() ? c.as_object().if_contains("finish_reason") : nullptr;
      if (reason && !reason->is_null()) return true;
    }
  }
  if (const json::value* meta = chunk.if_contains("meta_info"); meta && meta->is_object()) {
    const json::value* reason = meta->as_object().if_contains("finish_reason");
    if (reason && !reason->is_null()) return true;
  }
  return false;
}

// A chunk left with nothing for the client once kvgate took what it moved elsewhere.
bool IsEmptyChunk(const json::object& chunk) {
  const json::value* choices = chunk.if_contains("choices");
  const bool no_choices =
      choices == nullptr || (choices->is_array() && choices->as_array().empty());
  return no_choices && !chunk.contains("usage") && !chunk.contains("meta_info") &&
         !chunk.contains("text");
}

std::string SseEvent(std::string_view data) { return fmt::format("data: {}\n\n", data); }

LogRateLimiter experts_log_limiter(5);

}  // namespace

void ProxyCall::Start(ProxyServices& services, CallPlan plan, routing::RouteDecision decision,
                      std::shared_ptr<http::Responder> responder) {
  std::make_shared<ProxyCall>(services, std::move(plan), decision, std::move(responder))->Send();
}

ProxyCall::ProxyCall(ProxyServices& services, CallPlan plan, routing::RouteDecision decision,
                     std::shared_ptr<http::Responder> responder)
    : services_(services),
      plan_(std::move(plan)),
      decision_(decision),
      responder_(std::move(responder)) {}

ProxyCall::~ProxyCall() {
  // Abandoned without OnDone (the client shut down): still balance the books.
  if (!finished_) {
    services_.router.OnFailed(decision_.id);
    if (services_.in_flight) --*services_.in_flight;
  }
}

void ProxyCall::Send() {
  const Worker& w = services_.workers.worker(decision_.worker.worker);
  const std::string worker = std::to_string(w.id);
  services_.metrics.routed.Add({worker});
  services_.metrics.predicted_blocks.Add({worker}, decision_.cached_blocks);
  http::ClientRequest request;
  request.target = plan_.path;
  if (plan_.want_experts) {
    boost::json::object body = plan_.experts_body;
    engines::AskForRoutedExperts(w.config.engine, plan_.experts_start, body);
    request.body = json::serialize(body);
  } else {
    request.body = plan_.body;
  }
  request.timeouts = {services_.connect_timeout, services_.first_byte_timeout,
                      services_.idle_timeout};
  request.headers = plan_.forward_headers;
  if (w.config.dp_size > 1) {
    request.headers.emplace_back("X-data-parallel-rank", std::to_string(decision_.worker.dp_rank));
  }
  status_ = 0;
  body_.clear();
  services_.client.Fetch(w.endpoint, std::move(request), shared_from_this());
}

void ProxyCall::OnHeaders(int status, std::string_view content_type) {
  status_ = status;
  content_type_ = content_type.empty() ? "application/json" : std::string(content_type);
  if (status >= 500) return;  // an engine failure: maybe retried, the body is kept as the reason
  if (content_type.substr(0, 17) == "text/event-stream") {
    streaming_ = true;
    rewrite_ = plan_.wants_nvext();
    responder_->Begin(status, std::string(content_type));
  }
}

void ProxyCall::OnFirstByte() {
  first_byte_ = true;
  services_.router.OnFirstToken(decision_.id);
  services_.metrics.ttft_seconds.Observe({plan_.route}, SecondsSince(plan_.received));
}

void ProxyCall::OnBody(std::string_view data) {
  if (!streaming_) {
    body_.append(data);
    return;
  }
  if (!first_byte_) OnFirstByte();
  if (!rewrite_) {
    responder_->Write(std::string(data));
    return;
  }
  splitter_.Feed(data, [this](std::string_view event) { OnStreamEvent(event); });
}

void ProxyCall::OnStreamEvent(std::string_view event) {
  const std::string data = api::SseData(event);
  if (data == "[DONE]") {
    FlushFinal(/*complete=*/true);
    responder_->Write(SseEvent(data));
    return;
  }
  boost::system::error_code ec;
  json::value parsed = data.empty() ? json::value() : json::parse(data, ec);
  if (ec || !parsed.is_object()) {  // not ours to understand: pass it on
    responder_->Write(std::string(event) + "\n\n");
    return;
  }
  json::object& chunk = parsed.as_object();
  bool modified = false;
  if (plan_.want_experts) {
    json::value native;
    uint64_t start = 0;
    if (engines::TakeRoutedExperts(chunk, native, &start)) {
      experts_ = std::move(native);
      experts_start_ = start;
      experts_found_ = modified = true;
    }
  }
  engines::ReadTokenCounts(chunk, &counts_);
  if (plan_.drop_usage && chunk.erase("usage")) modified = true;
  if (modified && IsEmptyChunk(chunk)) return;
  if (!final_chunk_ && !final_flushed_ && IsFinalChunk(chunk)) {
    final_chunk_ = std::move(chunk);
    return;
  }
  std::string out = modified ? SseEvent(json::serialize(chunk)) : std::string(event) + "\n\n";
  if (final_chunk_) {
    after_final_.push_back(std::move(out));
  } else {
    responder_->Write(std::move(out));
  }
}

json::object ProxyCall::Nvext(bool complete) {
  json::object nvext;
  if (plan_.want_worker_id) {
    nvext["worker_id"] = decision_.worker.worker;
    nvext["dp_rank"] = decision_.worker.dp_rank;
  }
  if (plan_.want_cached_blocks) nvext["cached_blocks"] = decision_.cached_blocks;
  if (plan_.want_experts) {
    api::ExpertsContext context;
    context.layers = services_.experts_layers;
    context.top_k = services_.experts_top_k;
    context.prompt_tokens = counts_.prompt;
    context.completion_tokens = counts_.completion;
    context.start = counts_.prompt ? std::min(experts_start_, *counts_.prompt) : experts_start_;
    std::string problem;
    json::value normalized = experts_found_
                                 ? api::NormalizeRoutedExperts(experts_, context, &problem)
                                 : json::value(nullptr);
    if (!experts_found_) problem = "the engine returned no routed experts";
    if (normalized.is_null() && complete) {  // a failed response is counted as such already
      services_.metrics.experts_invalid.Add({});
      if (experts_log_limiter.Allow()) {
        Log(LogLevel::kWarn, "worker {}: routed experts: {}", decision_.worker.worker, problem);
      }
    }
    nvext["routed_experts"] = std::move(normalized);
  }
  return nvext;
}

void ProxyCall::WriteEvent(const json::object& chunk) {
  responder_->Write(SseEvent(json::serialize(chunk)));
}

void ProxyCall::FlushFinal(bool complete) {
  if (final_flushed_) return;
  final_flushed_ = true;
  if (!complete && !final_chunk_) return;  // cut short before the end: nothing to finish
  json::object chunk =
      final_chunk_ ? std::move(*final_chunk_) : json::object{{"choices", json::array{}}};
  final_chunk_.reset();
  chunk["nvext"] = Nvext(complete);
  WriteEvent(chunk);
  for (std::string& e : after_final_) responder_->Write(std::move(e));
  after_final_.clear();
}

bool ProxyCall::Retry() {
  if (!failed_.empty() || !responder_->connected()) return false;  // once per request
  failed_.push_back(decision_.worker);
  routing::RouteRequest again;
  again.local_hashes = plan_.local_hashes;
  again.eagle_hashes = plan_.eagle_hashes;
  again.prompt_tokens = plan_.prompt_tokens;
  again.exclude = failed_;
  auto next = services_.router.Route(again);
  if (!next) return false;  // the caller fails the first decision
  services_.router.OnFailed(decision_.id);
  services_.metrics.retries.Add({});
  decision_ = *next;
  Send();
  return true;
}

void ProxyCall::OnDone(const Status& status) {
  const uint32_t worker = decision_.worker.worker;
  const bool engine_failed = !status.ok() || status_ >= 500;
  if (engine_failed && !Cancelled()) {
    services_.metrics.upstream_errors.Add({std::to_string(worker)});
    services_.workers.ReportFailure(
        worker, status.ok() ? fmt::format("status {}", status_) : status.message());
  } else if (!engine_failed) {
    services_.workers.ReportSuccess(worker);
  }
  if (engine_failed && !streaming_) {
    const std::string why = status.ok() ? fmt::format("worker {} answered {}: {}", worker, status_,
                                                      body_.substr(0, 300))
                                        : fmt::format("worker {}: {}", worker, status.message());
    if (Retry()) return;
    const int code = status.timed_out() ? 504 : 502;
    Finish(code, /*succeeded=*/false);
    return responder_->Send(code, "application/json",
                            http::OpenAiError(code, why, "upstream_error"));
  }
  if (streaming_) {
    if (!status.ok()) {
      // Bytes already reached the client: end the stream with an error event, never a hang.
      if (rewrite_) FlushFinal(/*complete=*/false);
      responder_->Write(SseEvent(http::OpenAiError(
          502, fmt::format("worker {} failed mid-stream: {}", worker, status.message()),
          "upstream_error")));
      Finish(status_, /*succeeded=*/false);
      return responder_->End();
    }
    if (rewrite_) {
      if (!splitter_.pending().empty()) responder_->Write(std::string(splitter_.pending()));
      FlushFinal(/*complete=*/true);
    }
    Finish(status_, /*succeeded=*/true);
    return responder_->End();
  }
  // A whole JSON response (or a 4xx the engine chose): add nvext when asked.
  if (!first_byte_) OnFirstByte();
  if (status_ < 400 && plan_.wants_nvext()) {
    boost::system::error_code ec;
    json::value parsed = json::parse(body_, ec);
    if (!ec && parsed.is_object()) {
      json::object& body = parsed.as_object();
      if (plan_.want_experts) {
        experts_found_ = engines::TakeRoutedExperts(body, experts_, &experts_start_);
      }
      engines::ReadTokenCounts(body, &counts_);
      body["nvext"] = Nvext(/*complete=*/true);
      body_ = json::serialize(body);
    }
  }
  Finish(status_, /*succeeded=*/true);
  responder_->Send(status_, content_type_, std::move(body_));
}

// Bookkeeping comes before the last byte goes out: a client that reads /metrics right
// after its response must see its request counted.
void ProxyCall::Finish(int status, bool succeeded) {
  finished_ = true;
  if (succeeded) {
    services_.router.OnFinished(decision_.id);
  } else {
    services_.router.OnFailed(decision_.id);
  }
  services_.metrics.requests.Add({plan_.route, std::to_string(status)});
  services_.metrics.request_seconds.Observe({plan_.route}, SecondsSince(plan_.received));
  if (services_.in_flight) --*services_.in_flight;
}

}  // namespace kvgate::gateway
