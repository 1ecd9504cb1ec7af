#include "mocker/event_publisher.h"

#include <fmt/format.h>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "wire/seq_frame.h"
#include "wire/zmq_poll.h"

namespace kvgate::mocker {
namespace {

constexpr size_t kReplayBuffer = 10000;

}  // namespace

struct EventPublisher::Sockets {
  zmq::context_t context{1};
  zmq::socket_t pub{context, zmq::socket_type::pub};
  std::unique_ptr<zmq::socket_t> router;
};

EventPublisher::EventPublisher() : sockets_(std::make_unique<Sockets>()) {
  sockets_->pub.set(zmq::sockopt::linger, 0);
  sockets_->pub.set(zmq::sockopt::sndhwm, 100000);
}

EventPublisher::~EventPublisher() {
  stop_ = true;
  if (replay_thread_.joinable()) replay_thread_.join();
}

Status EventPublisher::Bind(const std::string& endpoint, const std::string& replay_endpoint) {
  try {
    sockets_->pub.bind(endpoint);
    if (!replay_endpoint.empty()) {
      sockets_->router =
          std::make_unique<zmq::socket_t>(sockets_->context, zmq::socket_type::router);
      sockets_->router->set(zmq::sockopt::linger, 0);
      sockets_->router->bind(replay_endpoint);
      replay_thread_ = std::thread([this] { ServeReplay(); });
    }
  } catch (const zmq::error_t& e) {
    return Status::Error(fmt::format("cannot bind KV event sockets ({}, {}): {}", endpoint,
                                     replay_endpoint, e.what()));
  }
  return Status::Ok();
}

void EventPublisher::Publish(const std::string& payload, bool send_live) {
  uint64_t seq;
  {
    std::lock_guard lock(mu_);
    seq = next_seq_++;
    buffer_.emplace_back(seq, payload);
    if (buffer_.size() > kReplayBuffer) buffer_.pop_front();
  }
  if (!send_live) return;
  const std::string seq_bytes = wire::SeqFrame(seq);
  const std::array<zmq::const_buffer, 3> frames = {zmq::str_buffer("kv-events"),
                                                   zmq::buffer(seq_bytes), zmq::buffer(payload)};
  (void)zmq::send_multipart(sockets_->pub, frames, zmq::send_flags::dontwait);
}

void EventPublisher::ResetSequence() {
  std::lock_guard lock(mu_);
  next_seq_ = 0;
  buffer_.clear();
}

void EventPublisher::ServeReplay() {
  zmq::socket_t& router = *sockets_->router;
  std::vector<zmq::message_t> frames;
  while (!stop_) {
    zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
    wire::PollIgnoringSignals(&item, 1, std::chrono::milliseconds(100));
    if (!(item.revents & ZMQ_POLLIN)) continue;
    frames.clear();
    if (!zmq::recv_multipart(router, std::back_inserter(frames), zmq::recv_flags::dontwait))
      continue;
    // [identity, empty, start seq]
    if (frames.size() != 3 || frames[2].size() != 8) continue;
    uint64_t start = 0;
    wire::ParseSeqFrame(frames[2].to_string_view(), &start);
    std::vector<std::pair<uint64_t, std::string>> items;
    {
      std::lock_guard lock(mu_);
      for (const auto& entry : buffer_) {
        if (entry.first >= start) items.push_back(entry);
      }
    }
    const std::string identity = frames[0].to_string();
    for (const auto& [seq, payload] : items) {
      const std::string seq_bytes = wire::SeqFrame(seq);
      const std::array<zmq::const_buffer, 4> reply = {zmq::buffer(identity), zmq::str_buffer(""),
                                                      zmq::buffer(seq_bytes), zmq::buffer(payload)};
      (void)zmq::send_multipart(router, reply);
    }
    const std::string end = wire::SeqFrame(wire::kReplayEndSeq);
    const std::array<zmq::const_buffer, 4> marker = {zmq::buffer(identity), zmq::str_buffer(""),
                                                     zmq::buffer(end), zmq::str_buffer("")};
    (void)zmq::send_multipart(router, marker);
  }
}

}  // namespace kvgate::mocker
