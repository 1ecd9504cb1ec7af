#include "cluster/load_sync.h"

#include <nats/nats.h>

#include <future>
#include <random>

#include "common/log.h"

namespace kvgate::cluster {

// The NATS connection and subscription (cnats handles). cnats calls back on threads of its
// own (messages on the subscription's, connection events on a shared one, queued), so each
// is closed and then waited for until its last callback has run, before anything those
// callbacks reach goes away.
struct LoadSync::Nats {
  natsOptions* options = nullptr;
  natsConnection* connection = nullptr;
  natsSubscription* subscription = nullptr;
  std::promise<void> subscription_done, connection_closed;

  static void OnSubscriptionDone(void* self) {
    static_cast<Nats*>(self)->subscription_done.set_value();
  }
  static void OnClosed(natsConnection*, void* self) {
    static_cast<Nats*>(self)->connection_closed.set_value();
  }

  ~Nats() {
    constexpr auto kWait = std::chrono::seconds(2);
    if (subscription) {
      if (natsSubscription_Unsubscribe(subscription) == NATS_OK) {
        subscription_done.get_future().wait_for(kWait);
      }
      natsSubscription_Destroy(subscription);
    }
    if (connection) {
      natsConnection_Close(connection);
      connection_closed.get_future().wait_for(kWait);
      natsConnection_Destroy(connection);
    }
    if (options) natsOptions_Destroy(options);
  }
};

namespace {

using ChangeKind = routing::LoadChange::Kind;
static_assert(static_cast<int>(DeltaKind::kRouted) == static_cast<int>(ChangeKind::kRouted) &&
              static_cast<int>(DeltaKind::kFirstToken) ==
                  static_cast<int>(ChangeKind::kFirstToken) &&
              static_cast<int>(DeltaKind::kFinished) == static_cast<int>(ChangeKind::kFinished));

uint64_t RandomInstance() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) | rd();
}

void OnMessage(natsConnection*, natsSubscription*, natsMsg* msg, void* self) {
  static_cast<std::function<void(std::string_view)>*>(self)->operator()(
      std::string_view(natsMsg_GetData(msg), static_cast<size_t>(natsMsg_GetDataLength(msg))));
  natsMsg_Destroy(msg);
}

}  // namespace

LoadSync::LoadSync(LoadSyncOptions options, routing::LoadView& view, WorkerNames names)
    : options_(std::move(options)),
      view_(view),
      names_(std::move(names)),
      instance_(RandomInstance()),
      nats_(std::make_unique<Nats>()) {}

LoadSync::~LoadSync() { Stop(); }

Status LoadSync::Start() {
  // cnats calls back through C function pointers: these trampolines reach this object.
  static auto on_disconnected = [](natsConnection*, void* self) {
    auto* s = static_cast<LoadSync*>(self);
    s->connected_ = false;
    ++s->disconnects_;
    Log(LogLevel::kWarn, "NATS {}: disconnected; routing on this replica's load until it is back",
        s->options_.nats_url);
  };
  static auto on_connected = [](natsConnection*, void* self) {
    auto* s = static_cast<LoadSync*>(self);
    s->connected_ = true;
    Log(LogLevel::kInfo, "NATS {}: connected, sharing load on {}", s->options_.nats_url,
        s->subject());
  };
  Nats& n = *nats_;
  natsStatus st = natsOptions_Create(&n.options);
  if (st == NATS_OK) st = natsOptions_SetURL(n.options, options_.nats_url.c_str());
  if (st == NATS_OK) st = natsOptions_SetMaxReconnect(n.options, -1);  // forever
  if (st == NATS_OK) st = natsOptions_SetReconnectWait(n.options, 500);
  if (st == NATS_OK) st = natsOptions_SetNoEcho(n.options, true);  // not our own messages
  if (st == NATS_OK) st = natsOptions_SetPingInterval(n.options, 1000);
  if (st == NATS_OK) st = natsOptions_SetMaxPingsOut(n.options, 2);
  if (st == NATS_OK) st = natsOptions_SetDisconnectedCB(n.options, on_disconnected, this);
  if (st == NATS_OK) st = natsOptions_SetReconnectedCB(n.options, on_connected, this);
  if (st == NATS_OK) st = natsOptions_SetClosedCB(n.options, Nats::OnClosed, &n);
  // Down at start: keep trying in the background instead of failing the gateway.
  if (st == NATS_OK) st = natsOptions_SetRetryOnFailedConnect(n.options, true, on_connected, this);
  if (st != NATS_OK) {
    return Status::InvalidArgument(
        fmt::format("NATS options for '{}': {}", options_.nats_url, natsStatus_GetText(st)));
  }
  st = natsConnection_Connect(&n.connection, n.options);
  if (st == NATS_OK) {
    on_connected(nullptr, this);
  } else if (st != NATS_NOT_YET_CONNECTED) {
    return Status::Error(fmt::format("NATS {}: {}", options_.nats_url, natsStatus_GetText(st)));
  } else {
    Log(LogLevel::kWarn, "NATS {} is not reachable yet: routing on local load, retrying",
        options_.nats_url);
  }
  receive_ = [this](std::string_view data) { Receive(data); };
  st = natsConnection_Subscribe(&n.subscription, n.connection, subject().c_str(), OnMessage,
                                &receive_);
  if (st == NATS_OK) {
    st = natsSubscription_SetOnCompleteCB(n.subscription, Nats::OnSubscriptionDone, &n);
  }
  if (st != NATS_OK) {
    return Status::Error(fmt::format("NATS subscribe {}: {}", subject(), natsStatus_GetText(st)));
  }
  view_.SetLocalListener(this);
  heartbeat_ = std::thread([this] { HeartbeatLoop(); });
  return Status::Ok();
}

void LoadSync::Stop() {
  {
    std::lock_guard lock(stop_mu_);
    if (stop_) return;
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
  view_.SetLocalListener(nullptr);
  std::lock_guard lock(publish_mu_);
  nats_.reset();  // closes the connection: no callback runs after this
}

void LoadSync::Publish(LoadDelta delta) {
  delta.instance = instance_;
  delta.origin = view_.local_origin();
  std::lock_guard lock(publish_mu_);
  if (nats_ == nullptr || nats_->connection == nullptr) return;
  delta.seq = next_seq_++;
  const std::string text = EncodeDelta(delta);
  // Buffered by cnats while disconnected (sent on reconnect, in order); an error means the
  // buffer is full, and the gap in seq tells the peers.
  const natsStatus st = natsConnection_Publish(nats_->connection, subject().c_str(), text.data(),
                                               static_cast<int>(text.size()));
  ++(st == NATS_OK ? sent_ : send_errors_);
}

void LoadSync::OnLocalChange(const routing::LoadChange& c) {
  LoadDelta d;
  d.kind = static_cast<DeltaKind>(c.kind);  // the same order (load_delta.h)
  d.request = c.id;
  if (c.kind == routing::LoadChange::Kind::kRouted) {
    d.worker = names_.id_of(c.worker.worker);
    d.dp_rank = c.worker.dp_rank;
    d.prefill_tokens = c.prefill_tokens;
    d.decode_blocks = c.decode_blocks;
    d.prefix_blocks = c.prefix.blocks;
    d.prefix_hashes = c.prefix.hashes;
  }
  Publish(std::move(d));
}

void LoadSync::Receive(std::string_view data) {
  LoadDelta d;
  if (!DecodeDelta(data, &d).ok() || d.instance == instance_) {
    ++bad_messages_;
    return;
  }
  if (d.origin == view_.local_origin()) {
    // Two replicas drew the same origin: their request ids could collide.
    if (bad_messages_++ == 0) {
      Log(LogLevel::kError,
          "replica {} uses this replica's request-id origin {}: set distinct "
          "cluster.replica_id values",
          d.replica.empty() ? "?" : d.replica, d.origin);
    }
    return;
  }
  // A request of another origin must not be counted as this replica's.
  const bool about_a_request = d.kind != DeltaKind::kHeartbeat && d.kind != DeltaKind::kUsage;
  if (about_a_request && routing::RequestOrigin(d.request) != d.origin) {
    ++bad_messages_;
    return;
  }
  ++received_;
  {
    std::lock_guard lock(peers_mu_);
    if (peers_.OnMessage(d.origin, d.seq, Peers::Clock::now()) == Peers::Verdict::kResetThenApply) {
      ++peer_resets_;
      ForgetOrigin(d.origin);
    }
    peer_count_ = peers_.size();
  }
  if (d.kind == DeltaKind::kHeartbeat) return;
  if (d.kind == DeltaKind::kUsage) {
    if (ledger_ != nullptr) ledger_->ApplyPeerUsage(d.origin, d.usage);
    return;
  }
  routing::LoadChange change{
      static_cast<routing::LoadChange::Kind>(d.kind), d.request, {}, 0, 0, {}};
  if (d.kind == DeltaKind::kRouted) {
    const std::optional<uint32_t> slot = names_.slot_of(d.worker);
    if (!slot) {
      ++unknown_workers_;
      return;
    }
    change.worker = {*slot, d.dp_rank};
    change.prefill_tokens = d.prefill_tokens;
    change.decode_blocks = d.decode_blocks;
    // (Marks that do not fit their block count are dropped by the view, the load kept.)
    change.prefix = {d.prefix_blocks, std::move(d.prefix_hashes)};
  }
  view_.Apply(change);
}

void LoadSync::ForgetOrigin(uint16_t origin) {
  view_.RemoveOrigin(origin);
  if (ledger_ != nullptr) ledger_->ForgetPeer(origin);
}

void LoadSync::HeartbeatLoop() {
  std::unique_lock lock(stop_mu_);
  auto next_beat = Peers::Clock::now();
  while (!stop_) {
    const auto now = Peers::Clock::now();
    const bool beat_due = now >= next_beat;
    if (beat_due) {
      LoadDelta beat;
      beat.kind = DeltaKind::kHeartbeat;
      beat.replica = options_.replica_name;
      beat.in_flight = view_.InFlight();
      Publish(std::move(beat));
      next_beat = now + options_.heartbeat;
    }
    if (ledger_ != nullptr) {
      LoadDelta usage;
      usage.kind = DeltaKind::kUsage;
      usage.usage = ledger_->TakeLocalUsage(/*full=*/beat_due);
      if (!usage.usage.empty()) Publish(std::move(usage));
    }
    {
      std::lock_guard peers_lock(peers_mu_);
      for (uint16_t origin : peers_.Expire(now, options_.peer_timeout)) {
        ++peers_expired_;
        ForgetOrigin(origin);
        Log(LogLevel::kInfo, "peer replica with origin {} fell silent: its load is dropped",
            origin);
      }
      peer_count_ = peers_.size();
    }
    stop_cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stop_; });
  }
}

LoadSyncStats LoadSync::Stats() const {
  return {connected_,     peer_count_,      sent_,         received_,   disconnects_, peer_resets_,
          peers_expired_, unknown_workers_, bad_messages_, send_errors_};
}

}  // namespace kvgate::cluster
