#include "mocker/disaggregation.h"

#include <fmt/format.h>

#include <boost/json.hpp>
#include <charconv>

#include "http/server.h"

namespace kvgate::mocker {
namespace {

namespace json = boost::json;

Status Bad(std::string message) { return Status::InvalidArgument(std::move(message)); }

}  // namespace

Status ReadTransferAsk(const json::object& body, engines::EngineKind engine,
                       const TransferConfig& config, uint32_t prompt_blocks, TransferAsk* ask) {
  *ask = TransferAsk{};
  if (engine == engines::EngineKind::kSglang) {
    const json::value* room = body.if_contains("bootstrap_room");
    if (room == nullptr || room->is_null() || config.role == Role::kBoth) return Status::Ok();
    if (!room->is_int64() && !room->is_uint64()) return Bad("'bootstrap_room' must be an integer");
    ask->room = room->is_int64() ? room->as_int64() : static_cast<int64_t>(room->as_uint64());
    if (config.role == Role::kPrefill) return Status::Ok();
    const json::value* host = body.if_contains("bootstrap_host");
    const json::value* port = body.if_contains("bootstrap_port");
    if (host == nullptr || !host->is_string() || port == nullptr || !port->is_int64() ||
        port->as_int64() <= 0 || port->as_int64() > 65535) {
      return Bad("a decode request with a bootstrap_room needs bootstrap_host and bootstrap_port");
    }
    ask->bootstrap =
        http::Endpoint{std::string(host->as_string()), static_cast<uint16_t>(port->as_int64())};
    ask->imported_blocks = prompt_blocks;
    return Status::Ok();
  }
  const json::value* params = body.if_contains("kv_transfer_params");
  if (params == nullptr || params->is_null()) return Status::Ok();
  if (!params->is_object()) return Bad("'kv_transfer_params' must be an object");
  const json::object& p = params->as_object();
  auto flag = [&](std::string_view key) {
    const json::value* v = p.if_contains(key);
    return v != nullptr && v->is_bool() && v->as_bool();
  };
  ask->remote_decode = flag("do_remote_decode");
  if (flag("do_remote_prefill")) {
    const json::value* ids = p.if_contains("remote_block_ids");
    if (ids == nullptr || !ids->is_array()) {
      return Bad("'kv_transfer_params.remote_block_ids' must be a list");
    }
    ask->imported_blocks =
        std::min<uint32_t>(static_cast<uint32_t>(ids->as_array().size()), prompt_blocks);
  }
  return Status::Ok();
}

json::object TransferParamsAnswer(const std::string& engine_id, const std::string& host,
                                  uint16_t port, uint32_t blocks) {
  json::array ids;
  for (uint32_t i = 0; i < blocks; ++i) ids.push_back(i);
  return {{"do_remote_prefill", true},
          {"do_remote_decode", false},
          {"remote_engine_id", engine_id},
          {"remote_block_ids", std::move(ids)},
          {"remote_host", host},
          {"remote_port", port},
          {"tp_size", 1}};
}

BootstrapServer::BootstrapServer() = default;
BootstrapServer::~BootstrapServer() {
  if (server_) server_->Stop(std::chrono::milliseconds(100));
}

Status BootstrapServer::Start(const std::string& host, uint16_t port) {
  http::ServerOptions so;
  so.host = host;
  so.port = port == kAnyPort ? 0 : port;
  so.threads = 1;
  server_ = std::make_unique<http::Server>(so, [this](const http::Request& req,
                                                      std::shared_ptr<http::Responder> r) {
    constexpr std::string_view kPrefix = "/rooms/";
    int64_t room = 0;
    const std::string_view rest =
        std::string_view(req.path).substr(std::min(req.path.size(), kPrefix.size()));
    const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), room);
    if (!req.path.starts_with(kPrefix) || ec != std::errc() || end != rest.data() + rest.size()) {
      return r->Send(404, "application/json", R"({"error":"no such route"})");
    }
    std::lock_guard lock(mu_);
    if (!ready_.contains(room)) return r->Send(404, "application/json", R"({"ready":false})");
    r->Send(200, "application/json", R"({"ready":true})");
  });
  return server_->Start();
}

uint16_t BootstrapServer::port() const { return server_ ? server_->port() : 0; }

void BootstrapServer::Ready(int64_t room) {
  constexpr size_t kKept = 100'000;
  std::lock_guard lock(mu_);
  if (!ready_.insert(room).second) return;
  order_.push_back(room);
  if (order_.size() > kKept) {
    ready_.erase(order_.front());
    order_.pop_front();
  }
}

RoomWaiter::RoomWaiter() : client_(std::make_unique<http::Client>()) {
  thread_ = std::thread([this] { Run(); });
}

RoomWaiter::~RoomWaiter() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void RoomWaiter::Wait(const http::Endpoint& prefill, int64_t room,
                      std::chrono::milliseconds timeout, Done done) {
  std::lock_guard lock(mu_);
  waiting_.push_back({prefill, room, std::chrono::steady_clock::now() + timeout, std::move(done)});
  cv_.notify_one();
}

void RoomWaiter::Run() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    if (waiting_.empty()) {
      cv_.wait(lock);
      continue;
    }
    Waiting w = std::move(waiting_.front());
    waiting_.pop_front();
    lock.unlock();
    http::ClientRequest ask;
    ask.method = "GET";
    ask.target = fmt::format("/rooms/{}", w.room);
    ask.timeouts = {std::chrono::milliseconds(1000), std::chrono::milliseconds(1000),
                    std::chrono::milliseconds(1000)};
    bool ready = false;
    auto answer = http::FetchWhole(*client_, w.prefill, std::move(ask), 1024);
    if (answer.wait_for(std::chrono::seconds(3)) == std::future_status::ready) {
      const http::WholeResponse r = answer.get();
      ready = r.status.ok() && r.code == 200;
      w.unreachable = r.status.ok() ? 0 : w.unreachable + 1;
    }
    constexpr uint32_t kGone = 5;
    if (ready) {
      w.done(Status::Ok());
    } else if (w.unreachable >= kGone) {
      w.done(Status(
          StatusCode::kUnavailable,
          fmt::format("the bootstrap server {} of room {} is gone", w.prefill.key(), w.room)));
    } else if (std::chrono::steady_clock::now() > w.deadline) {
      w.done(Status(
          StatusCode::kDeadlineExceeded,
          fmt::format("bootstrap room {} never became ready on {}", w.room, w.prefill.key())));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      lock.lock();
      waiting_.push_back(std::move(w));
      continue;
    }
    lock.lock();
  }
}

}  // namespace kvgate::mocker
