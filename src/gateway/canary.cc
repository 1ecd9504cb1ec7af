#include "gateway/canary.h"

#include <fmt/format.h>

#include <boost/json.hpp>
#include <future>

#include "api/request_fields.h"
#include "engines/engines.h"
#include "events/subscriber.h"
#include "gateway/fidelity.h"
#include "gateway/worker_pool.h"
#include "http/client.h"
#include "kv/block_hash.h"
#include "kv/prefix_index.h"

namespace kvgate::gateway {
namespace {

namespace json = boost::json;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kBlocks = 3;

// What the worker's event stream has done so far (the counters the canary compares).
struct EventCounts {
  uint64_t stored = 0;
  uint64_t skipped_for_size = 0;  // stores whose block size or token count did not fit ours
};

EventCounts CountsOf(const events::Subscriber& subscriber, uint32_t worker) {
  EventCounts counts;  // (summed over the worker's streams: one per rank for some engines)
  for (const auto& [id, stats] : subscriber.Stats()) {
    if (id != worker) continue;
    counts.stored += stats.events[static_cast<size_t>(wire::EventKind::kStored)];
    counts.skipped_for_size += stats.apply.block_size_mismatch + stats.apply.token_count_mismatch;
  }
  return counts;
}

}  // namespace

CanaryRunner::CanaryRunner(CanaryOptions options, http::Client& client,
                           const kv::PrefixIndex& index, const events::Subscriber& subscriber,
                           const WorkerPool& workers, Fidelity& fidelity)
    : options_(std::move(options)),
      client_(client),
      index_(index),
      subscriber_(subscriber),
      workers_(workers),
      fidelity_(fidelity),
      thread_([this] { Loop(); }) {}

void CanaryRunner::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    jobs_.clear();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CanaryRunner::Queue(uint32_t worker, bool wait_until_up,
                         std::function<void(const std::string&)> done) {
  {
    std::lock_guard lock(mu_);
    if (stop_) return;
    jobs_.push_back({worker, wait_until_up, std::move(done)});
  }
  cv_.notify_all();
}

bool CanaryRunner::Stopping() {
  std::lock_guard lock(mu_);
  return stop_;
}

void CanaryRunner::Loop() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    std::string result;
    if (job.wait_until_up) {
      const auto deadline = Clock::now() + options_.healthy_within;
      while (!workers_.seen_up(job.worker) && Clock::now() < deadline && !Stopping()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      if (!workers_.seen_up(job.worker)) result = "error: the worker never passed a health check";
    }
    if (Stopping()) return;
    if (result.empty()) result = Run(job.worker);
    fidelity_.SetCanary(job.worker, result);
    if (job.done) job.done(result);
  }
}

std::string CanaryRunner::Run(uint32_t worker_id) {
  const Worker& worker = workers_.worker(worker_id);
  const uint32_t bs = options_.block_size;
  // Fresh ids each time: nothing of this prompt can be cached before the first request.
  std::uniform_int_distribution<uint32_t> id(1000, 30000);
  std::vector<uint32_t> tokens(kBlocks * bs + 1);
  for (uint32_t& t : tokens) t = id(rng_);
  std::vector<uint64_t> local;
  kv::AppendLocalBlockHashes(tokens, bs, kv::kDefaultSeed, false, local);

  json::object request{{"model", options_.model},
                       {"prompt", json::array(tokens.begin(), tokens.end())},
                       {"max_tokens", 1},
                       {"temperature", 0},
                       {"stream", false}};
  const std::string body = json::serialize(request);
  // One completion; its counts, or why there are none.
  auto complete = [&](engines::TokenCounts* counts) -> std::string {
    http::ClientRequest r;
    r.target = "/v1/completions";
    r.body = body;
    r.timeouts.first_byte = options_.request_timeout;
    if (worker.config.dp_size > 1) r.headers.emplace_back("X-data-parallel-rank", "0");
    http::WholeResponse reply;
    for (;;) {
      std::future<http::WholeResponse> future = http::FetchWhole(client_, worker.endpoint, r);
      const auto deadline = Clock::now() + options_.request_timeout + std::chrono::seconds(5);
      while (future.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
        if (Stopping()) return "error: the gateway is stopping";
        if (Clock::now() > deadline) return "error: no answer in time";
      }
      try {
        reply = future.get();
      } catch (const std::future_error&) {  // the client shut down under it
        return "error: the gateway is stopping";
      }
      // Out of descriptors or memory here says nothing of the worker: ask again later.
      if (reply.status.code() != StatusCode::kResourceExhausted) break;
      for (int i = 0; i < 10; ++i) {
        if (Stopping()) return "error: the gateway is stopping";
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    if (!reply.status.ok()) return "error: " + reply.status.message();
    if (reply.code != 200) {
      return fmt::format("error: status {}: {}", reply.code, reply.body.substr(0, 200));
    }
    boost::system::error_code ec;
    json::value v = api::ParseJson(reply.body, ec);
    if (ec || !v.is_object()) return "error: the response is not a JSON object";
    engines::ReadTokenCounts(v.as_object(), counts);
    if (!counts->prompt) return "error: the response has no usage.prompt_tokens";
    if (*counts->prompt != tokens.size()) return "token_mismatch";
    return "";
  };

  const EventCounts before = CountsOf(subscriber_, worker_id);
  engines::TokenCounts first;
  if (std::string problem = complete(&first); !problem.empty()) return problem;
  if (worker.config.kv_events.empty()) return "no_events";

  // The worker's events must store our blocks, hashed as kvgate hashes them.
  const auto deadline = Clock::now() + options_.events_within;
  std::vector<kv::Overlap> overlaps;
  for (;;) {
    index_.Match(local, overlaps);
    bool stored = false;
    for (const kv::Overlap& o : overlaps) {
      stored |= o.worker == kv::WorkerKey{worker_id, 0} && o.total() >= kBlocks;
    }
    if (stored) break;
    const EventCounts now = CountsOf(subscriber_, worker_id);
    if (now.skipped_for_size > before.skipped_for_size) return "block_size_mismatch";
    if (Clock::now() >= deadline || Stopping()) {
      // Stores came, but not of these blocks: the engine hashed other tokens than ours.
      return now.stored > before.stored ? "token_mismatch" : "no_events";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }

  engines::TokenCounts second;
  if (std::string problem = complete(&second); !problem.empty()) return problem;
  if (!second.cached) return "no_cached_tokens_reported";
  if (*second.cached != uint64_t{kBlocks} * bs) {
    return fmt::format("error: the engine reported {} cached tokens where it stored {}",
                       *second.cached, kBlocks * bs);
  }
  return "ok";
}

}  // namespace kvgate::gateway
