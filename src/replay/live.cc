#include "replay/live.h"

#include <fmt/format.h>

#include <atomic>
#include <boost/json.hpp>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "api/sse.h"
#include "http/client.h"

namespace kvgate::replay {
namespace {

namespace json = boost::json;
using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point start, Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(t - start).count();
}

// Completion of all requests, counted.
struct Tally {
  std::mutex mu;
  std::condition_variable cv;
  size_t done = 0;
  // The gateway names workers by id; the report numbers them in order of appearance.
  std::map<std::string, uint32_t> worker_numbers;
  uint32_t Number(std::string_view worker) {
    std::lock_guard lock(mu);
    return worker_numbers.try_emplace(std::string(worker), worker_numbers.size()).first->second;
  }
};

// One streamed completion: token times from the SSE chunks, the engine's cached tokens and
// the gateway's routing from the usage chunk and nvext.
class LiveRequest : public http::ResponseSink {
 public:
  LiveRequest(RequestMetrics& m, Clock::time_point start, Tally& tally)
      : m_(m), start_(start), tally_(tally) {}

  void OnHeaders(int status, std::string_view) override { status_ = status; }

  void OnBody(std::string_view data) override {
    if (status_ != 200) return;
    const auto now = Clock::now();
    splitter_.Feed(data, [&](std::string_view event) { OnEvent(api::SseData(event), now); });
  }

  void OnDone(const Status& s) override {
    m_.rejected = !s.ok() || status_ != 200 || m_.first_token_ms < 0;
    m_.finish_ms = MsSince(start_, Clock::now());
    std::lock_guard lock(tally_.mu);
    ++tally_.done;
    tally_.cv.notify_all();
  }

 private:
  void OnEvent(const std::string& data, Clock::time_point now) {
    if (data.empty() || data == "[DONE]") return;
    boost::system::error_code ec;
    json::value v = json::parse(data, ec);
    if (ec || !v.is_object()) return;
    const json::object& chunk = v.as_object();
    if (const json::value* choices = chunk.if_contains("choices");
        choices && choices->is_array() && !choices->as_array().empty()) {
      const double t = MsSince(start_, now);
      if (m_.first_token_ms < 0) {
        m_.first_token_ms = t;
      } else {
        m_.itl_ms.push_back(static_cast<float>(t - last_token_ms_));
      }
      last_token_ms_ = t;
      ++m_.output_tokens;
    }
    if (const json::value* usage = chunk.if_contains("usage"); usage && usage->is_object()) {
      const json::object& u = usage->as_object();
      if (const json::value* d = u.if_contains("prompt_tokens_details"); d && d->is_object()) {
        if (const json::value* c = d->as_object().if_contains("cached_tokens");
            c && c->is_int64()) {
          m_.cached_tokens = static_cast<uint32_t>(c->as_int64());
        }
      }
    }
    if (const json::value* nv = chunk.if_contains("nvext"); nv && nv->is_object()) {
      const json::object& n = nv->as_object();
      if (const json::value* w = n.if_contains("worker_id"); w && w->is_string()) {
        m_.worker = tally_.Number(w->as_string());
      }
      if (const json::value* b = n.if_contains("cached_blocks"); b && b->is_int64()) {
        m_.predicted_blocks = static_cast<uint32_t>(b->as_int64());
      }
    }
  }

  RequestMetrics& m_;
  const Clock::time_point start_;
  Tally& tally_;
  int status_ = 0;
  double last_token_ms_ = 0;
  api::SseSplitter splitter_;
};

}  // namespace

Status RunLive(const Trace& trace, const LiveOptions& options, PolicyRun* run,
               const std::function<void(size_t, size_t)>& progress) {
  http::Endpoint endpoint;
  if (Status s = http::ParseBaseUrl(options.url, &endpoint); !s.ok()) return s;
  run->label = "live";
  run->requests.assign(trace.requests.size(), RequestMetrics{});
  Tally tally;
  http::Client client(http::ClientOptions{1, 4096});
  const double t0 = trace.requests.empty() ? 0 : trace.requests.front().timestamp_ms;
  const auto start = Clock::now();
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    const TraceRequest& r = trace.requests[i];
    const double arrival_ms = (r.timestamp_ms - t0) / options.speed;
    std::this_thread::sleep_until(
        start + std::chrono::microseconds(static_cast<int64_t>(arrival_ms * 1000)));
    RequestMetrics& m = run->requests[i];
    m.arrival_ms = MsSince(start, Clock::now());
    const std::vector<uint32_t> prompt = PromptTokens(r, options.trace_block_size);
    m.prompt_tokens = static_cast<uint32_t>(prompt.size());
    json::object body{
        {"prompt", json::array(prompt.begin(), prompt.end())},
        {"max_tokens", std::max<uint32_t>(1, r.output_length)},
        {"stream", true},
        {"stream_options", json::object{{"include_usage", true}}},
        {"nvext", json::object{{"extra_fields", json::array{"worker_id", "cached_blocks"}}}}};
    if (!options.model.empty()) body["model"] = options.model;
    http::ClientRequest request;
    request.target = "/v1/completions";
    request.body = json::serialize(body);
    request.timeouts.first_byte = options.timeout;
    request.timeouts.idle = options.timeout;
    client.Fetch(endpoint, std::move(request), std::make_shared<LiveRequest>(m, start, tally));
    if (progress) {
      std::lock_guard lock(tally.mu);
      progress(tally.done, trace.requests.size());
    }
  }
  std::unique_lock lock(tally.mu);
  const auto deadline = Clock::now() + options.timeout;
  while (tally.done < trace.requests.size()) {
    if (tally.cv.wait_until(lock, deadline) == std::cv_status::timeout) break;
    if (progress) progress(tally.done, trace.requests.size());
  }
  run->wall_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (tally.done < trace.requests.size()) {
    return Status::Error(fmt::format("{} of {} requests did not finish in time",
                                     trace.requests.size() - tally.done, trace.requests.size()));
  }
  return Status::Ok();
}

}  // namespace kvgate::replay
