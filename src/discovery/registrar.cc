#include "discovery/registrar.h"

#include <thread>

#include "common/log.h"
#include "discovery/etcd_client.h"
#include "http/client.h"

namespace kvgate::discovery {
namespace {

using Clock = std::chrono::steady_clock;

bool EngineHealthy(http::Client& client, const http::Endpoint& engine,
                   std::chrono::milliseconds timeout) {
  http::ClientRequest probe;
  probe.method = "GET";
  probe.target = "/health";
  probe.timeouts = {timeout, timeout, timeout};
  auto future = http::FetchWhole(client, engine, std::move(probe), 4096);
  if (future.wait_for(timeout * 2) != std::future_status::ready) return false;
  const http::WholeResponse r = future.get();
  return r.status.ok() && r.code == 200;
}

// The registration's state: the lease the record lives under, 0 while not registered.
class Registration {
 public:
  Registration(EtcdClient& etcd, const RegistrarOptions& o)
      : etcd_(etcd),
        o_(o),
        key_(o.prefix + "/workers/" + o.record.id),
        value_(ToJsonText(o.record)) {}

  bool registered() const { return lease_ != 0; }

  void Register() {
    int64_t lease = 0;
    Status s = etcd_.GrantLease(o_.ttl_seconds, &lease);
    if (s.ok()) s = etcd_.Put(key_, value_, lease);
    if (!s.ok()) {
      Log(LogLevel::kWarn, "register {}: {} (retrying)", o_.record.id, s.message());
      return;
    }
    lease_ = lease;
    next_keepalive_ = Clock::now() + KeepAliveEvery();
    Log(LogLevel::kInfo, "registered worker {} ({}) at {} with a {} s lease", o_.record.id,
        o_.record.url, key_, o_.ttl_seconds);
  }

  // Renews the lease when due; registers again if etcd lost it (it expired meanwhile).
  void KeepAlive() {
    if (Clock::now() < next_keepalive_) return;
    next_keepalive_ = Clock::now() + KeepAliveEvery();
    bool alive = false;
    if (Status s = etcd_.KeepAlive(lease_, &alive); !s.ok()) {
      Log(LogLevel::kWarn, "register {}: keep-alive failed: {}", o_.record.id, s.message());
      return;  // the next one may pass before the TTL runs out
    }
    if (!alive) {
      Log(LogLevel::kWarn, "register {}: the lease expired; registering again", o_.record.id);
      lease_ = 0;
      Register();
    }
  }

  void Withdraw(std::string_view why) {
    if (lease_ == 0) return;
    Status s = etcd_.Delete(key_);
    if (s.ok()) s = etcd_.Revoke(lease_);
    Log(s.ok() ? LogLevel::kInfo : LogLevel::kWarn, "withdrew worker {} ({}){}", o_.record.id, why,
        s.ok() ? "" : ": " + s.message() + " (the lease will expire)");
    lease_ = 0;
  }

 private:
  std::chrono::milliseconds KeepAliveEvery() const {
    return std::chrono::milliseconds(std::max<int64_t>(o_.ttl_seconds * 1000 / 3, 200));
  }

  EtcdClient& etcd_;
  const RegistrarOptions& o_;
  const std::string key_, value_;
  int64_t lease_ = 0;
  Clock::time_point next_keepalive_{};
};

}  // namespace

Status RunRegistrar(const RegistrarOptions& o, const std::atomic<bool>& stop) {
  http::Endpoint etcd_endpoint, engine;
  if (Status s = EtcdClient::Parse(o.etcd_url, &etcd_endpoint); !s.ok()) return s;
  if (Status s = http::ParseBaseUrl(o.record.url, &engine); !s.ok()) return s;
  if (o.ttl_seconds <= 0) return Status::InvalidArgument("--ttl-s must be positive");
  http::Client client;
  EtcdClient etcd(client, etcd_endpoint);
  Registration registration(etcd, o);
  uint32_t failures = 0;
  while (!stop) {
    const auto next = Clock::now() + o.health_interval;
    if (EngineHealthy(client, engine, o.health_interval)) {
      failures = 0;
      if (!registration.registered()) registration.Register();
    } else if (++failures >= o.unhealthy_after) {
      registration.Withdraw(fmt::format("its engine failed {} health checks", failures));
    }
    if (registration.registered()) registration.KeepAlive();
    while (!stop && Clock::now() < next) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  registration.Withdraw("stopping");
  return Status::Ok();
}

}  // namespace kvgate::discovery
