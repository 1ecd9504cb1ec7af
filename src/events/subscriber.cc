#include "events/subscriber.h"

#include <algorithm>
#include <cerrno>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "common/log.h"
#include "wire/decode.h"
#include "wire/seq_frame.h"
#include "wire/zmq_poll.h"

namespace kvgate::events {
namespace {

LogRateLimiter g_bad_input_log(10);

}  // namespace

struct Subscriber::ZmqContext {
  // libzmq starts its I/O thread and reaper with the first socket, and aborts the process
  // when it cannot create their pollers: start them now, while descriptors are plentiful,
  // rather than with a worker's first stream (which may come when the process has none).
  ZmqContext() { zmq::socket_t starter(context, zmq::socket_type::pair); }
  zmq::context_t context{1};
};

class Subscriber::Stream : public StreamActions {
 public:
  Stream(Subscriber& owner, const WorkerEndpoints& endpoints)
      : owner_(owner),
        endpoints_(endpoints),
        sub_(owner.zmq_->context, zmq::socket_type::sub),
        state_(*this, !endpoints.replay.empty()) {
    Configure(sub_);
    sub_.set(zmq::sockopt::subscribe, "");
    sub_.connect(endpoints.events);
    if (!endpoints.replay.empty()) {
      dealer_.emplace(owner.zmq_->context, zmq::socket_type::dealer);
      Configure(*dealer_);
      dealer_->connect(endpoints.replay);
      CatchUp();
      // Once more when the subscription has surely taken effect, unless a live batch
      // arrived by then (which reveals any gap by itself).
      second_catch_up_ = Clock::now() + std::chrono::seconds(1);
    }
  }

  uint32_t worker() const { return endpoints_.worker; }
  std::optional<uint32_t> dp_rank() const { return endpoints_.dp_rank; }
  zmq::socket_t& sub() { return sub_; }
  zmq::socket_t* dealer() { return dealer_ ? &*dealer_ : nullptr; }
  const WorkerStreamStats& stats() {
    stats_.stream = state_.counters();
    caught_up_ |= !state_.replaying();
    stats_.caught_up = caught_up_;
    return stats_;
  }

  void OnLiveMessage(std::vector<zmq::message_t>& frames) {
    uint64_t seq;
    if (frames.size() != 3 || !wire::ParseSeqFrame(frames[1].to_string_view(), &seq)) {
      BadFrames(frames.size());
      return;
    }
    second_catch_up_ = {};
    state_.OnLive(seq, frames[2].to_string_view());
    if (state_.replaying() && replay_deadline_ == TimePoint{}) {
      replay_deadline_ = Clock::now() + owner_.options_.replay_timeout;
    }
  }

  void OnReplayMessage(std::vector<zmq::message_t>& frames) {
    // [empty, seq, payload] or [empty, topic, seq, payload]
    uint64_t seq;
    const size_t n = frames.size();
    if ((n != 3 && n != 4) || frames[0].size() != 0 ||
        !wire::ParseSeqFrame(frames[n - 2].to_string_view(), &seq)) {
      BadFrames(n);
      return;
    }
    if (seq == wire::kReplayEndSeq) {
      replay_deadline_ = {};
      state_.OnReplayEnd();
      return;
    }
    state_.OnReplay(seq, frames[n - 1].to_string_view());
  }

  void CatchUp() {
    state_.CatchUp();
    if (state_.replaying()) replay_deadline_ = Clock::now() + owner_.options_.replay_timeout;
  }

  void CheckTimers(std::chrono::steady_clock::time_point now) {
    if (second_catch_up_ != TimePoint{} && now >= second_catch_up_ && !state_.replaying()) {
      second_catch_up_ = {};
      CatchUp();
    }
    if (replay_deadline_ != TimePoint{} && now >= replay_deadline_) {
      if (g_bad_input_log.Allow()) {
        Log(LogLevel::kWarn, "worker {}: replay from {} timed out", worker(), endpoints_.replay);
      }
      replay_deadline_ = {};
      state_.OnReplayEnd();
    }
  }

  // --- StreamActions ---
  void Apply(uint64_t seq, std::string_view payload) override {
    Status status = wire::DecodeEventBatch(payload, batch_);
    if (!status.ok()) {
      ++stats_.bad_payloads;
      if (g_bad_input_log.Allow()) {
        Log(LogLevel::kWarn, "worker {} seq {}: {}", worker(), seq, status.message());
      }
      return;
    }
    for (const wire::Event& e : batch_.events) {
      ++stats_.events[static_cast<size_t>(e.kind)];
      if (e.unknown_medium) ++stats_.unknown_medium;
      if (e.kind == wire::EventKind::kInvalid && g_bad_input_log.Allow()) {
        Log(LogLevel::kWarn, "worker {} seq {}: invalid event {}: {}", worker(), seq, e.index,
            e.message);
      }
    }
    const int64_t dp = batch_.dp_rank.value_or(0);
    if (dp > int64_t{UINT32_MAX}) {  // no engine has that many ranks: not some other rank's
      ++stats_.bad_payloads;
      if (g_bad_input_log.Allow()) {
        Log(LogLevel::kWarn, "worker {} seq {}: data_parallel_rank {} out of range", worker(), seq,
            dp);
      }
      return;
    }
    const kv::WorkerKey key{worker(),
                            endpoints_.dp_rank.value_or(dp < 0 ? 0u : static_cast<uint32_t>(dp))};
    if (owner_.index_ != nullptr) owner_.index_->ApplyBatch(key, batch_, stats_.apply);
    if (owner_.observer_) owner_.observer_(worker(), seq, batch_);
  }

  void Restart() override {
    if (g_bad_input_log.Allow()) {  // an engine flapping restarts must not flood the log
      Log(LogLevel::kInfo, "worker {}: event sequence restarted; dropping its blocks", worker());
    }
    if (owner_.index_ == nullptr) return;
    if (endpoints_.dp_rank) {
      // One rank's publisher restarted: its blocks go, the other ranks' stay.
      owner_.index_->ClearWorker({worker(), *endpoints_.dp_rank});
    } else {
      owner_.index_->RemoveWorker(worker());
    }
  }

  void RequestReplay(uint64_t from) override {
    if (!dealer_) return;
    const std::string seq = wire::SeqFrame(from);
    const std::array<zmq::const_buffer, 2> request = {zmq::const_buffer("", 0), zmq::buffer(seq)};
    if (!zmq::send_multipart(*dealer_, request, zmq::send_flags::dontwait)) {
      Log(LogLevel::kWarn, "worker {}: could not send replay request", worker());
    }
  }

 private:
  using Clock = std::chrono::steady_clock;
  using TimePoint = Clock::time_point;

  void Configure(zmq::socket_t& s) {
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::reconnect_ivl, static_cast<int>(owner_.options_.reconnect_min.count()));
    s.set(zmq::sockopt::reconnect_ivl_max, static_cast<int>(owner_.options_.reconnect_max.count()));
  }

  void BadFrames(size_t count) {
    ++stats_.bad_frames;
    if (g_bad_input_log.Allow()) {
      Log(LogLevel::kWarn, "worker {}: dropped message with {} frames or a bad seq frame", worker(),
          count);
    }
  }

  Subscriber& owner_;
  WorkerEndpoints endpoints_;
  zmq::socket_t sub_;
  std::optional<zmq::socket_t> dealer_;
  StreamState state_;
  wire::DecodedBatch batch_;
  WorkerStreamStats stats_;
  TimePoint replay_deadline_{};
  bool caught_up_ = false;
  TimePoint second_catch_up_{};
};

Subscriber::Subscriber(kv::PrefixIndex* index, SubscriberOptions options, Observer observer)
    : index_(index),
      options_(options),
      observer_(std::move(observer)),
      zmq_(std::make_unique<ZmqContext>()) {
  thread_ = std::thread([this] { Run(); });
}

Subscriber::~Subscriber() {
  stop_ = true;
  thread_.join();
}

void Subscriber::AddWorker(const WorkerEndpoints& endpoints) {
  std::lock_guard lock(mu_);
  commands_.push_back({true, endpoints});
}

void Subscriber::RemoveWorker(uint32_t worker) {
  std::lock_guard lock(mu_);
  commands_.push_back({false, WorkerEndpoints{worker, {}, {}, std::nullopt}});
}

std::vector<std::pair<uint32_t, WorkerStreamStats>> Subscriber::Stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void Subscriber::ProcessCommands() {
  std::vector<Command> commands;
  if (!deferred_.empty() && std::chrono::steady_clock::now() >= retry_deferred_at_)
    commands.swap(deferred_);
  {
    std::lock_guard lock(mu_);
    // After the deferred ones: a later command for the same worker wins.
    commands.insert(commands.end(), commands_.begin(), commands_.end());
    commands_.clear();
  }
  for (const Command& c : commands) {
    const uint32_t worker = c.endpoints.worker;
    std::erase_if(streams_, [&](const auto& s) {
      return s->worker() == worker && (!c.add || s->dp_rank() == c.endpoints.dp_rank);
    });
    if (c.add) {
      try {
        streams_.push_back(std::make_unique<Stream>(*this, c.endpoints));
      } catch (const zmq::error_t& e) {
        if (e.num() == EMFILE || e.num() == ENFILE || e.num() == ENOMEM) {
          // This process is short of descriptors: not the worker's fault, try again soon.
          deferred_.push_back(c);
          retry_deferred_at_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
          if (g_bad_input_log.Allow()) {
            Log(LogLevel::kWarn, "worker {}: cannot subscribe yet: {}", worker, e.what());
          }
        } else {
          Log(LogLevel::kError, "worker {}: cannot connect to {}: {}", worker, c.endpoints.events,
              e.what());
        }
      }
    } else if (index_ != nullptr) {
      index_->RemoveWorker(worker);
    }
  }
  PublishStats();
}

bool Subscriber::CaughtUp(uint32_t worker) const {
  std::lock_guard lock(mu_);
  bool any = false;
  for (const auto& [w, stats] : stats_) {
    if (w != worker) continue;
    if (!stats.caught_up) return false;
    any = true;
  }
  return any;
}

void Subscriber::PublishStats() {
  std::lock_guard lock(mu_);
  stats_.clear();
  for (auto& s : streams_) stats_.emplace_back(s->worker(), s->stats());
}

void Subscriber::Run() {
  std::vector<zmq::pollitem_t> items;
  std::vector<std::pair<Stream*, bool>> owners;  // (stream, is_replay) per poll item
  std::vector<zmq::message_t> frames;
  while (!stop_) {
    ProcessCommands();
    items.clear();
    owners.clear();
    for (auto& s : streams_) {
      items.push_back({s->sub().handle(), 0, ZMQ_POLLIN, 0});
      owners.emplace_back(s.get(), false);
      if (zmq::socket_t* d = s->dealer()) {
        items.push_back({d->handle(), 0, ZMQ_POLLIN, 0});
        owners.emplace_back(s.get(), true);
      }
    }
    if (items.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    wire::PollIgnoringSignals(items.data(), items.size(), std::chrono::milliseconds(50));
    for (size_t i = 0; i < items.size(); ++i) {
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      auto [stream, is_replay] = owners[i];
      zmq::socket_t& socket = is_replay ? *stream->dealer() : stream->sub();
      // Drain what is ready, bounded so one busy worker cannot starve the others.
      for (int n = 0; n < 256; ++n) {
        frames.clear();
        if (!zmq::recv_multipart(socket, std::back_inserter(frames), zmq::recv_flags::dontwait))
          break;
        if (is_replay) {
          stream->OnReplayMessage(frames);
        } else {
          stream->OnLiveMessage(frames);
        }
      }
    }
    const auto now = std::chrono::steady_clock::now();
    for (auto& s : streams_) s->CheckTimers(now);
    PublishStats();
  }
}

}  // namespace kvgate::events
