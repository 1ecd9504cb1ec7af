#include "gateway/wait_queue.h"

#include <utility>
#include <vector>

namespace kvgate::gateway {

WaitQueue::WaitQueue(Options options) : options_(options) {
  sweeper_ = std::thread([this] { Sweep(); });
}

void WaitQueue::Close() {
  std::vector<Leave> left;
  {
    std::lock_guard lock(mu_);
    if (stop_) return;
    stop_ = true;
    for (auto& [priority, level] : levels_) {
      for (auto& [tenant, queue] : level.queues) {
        for (Waiting& w : queue) left.push_back(std::move(w.ticket.leave));
      }
    }
    levels_.clear();
    size_ = 0;
  }
  stop_cv_.notify_all();
  sweeper_.join();
  for (Leave& leave : left) leave(Exit::kStopped);
}

bool WaitQueue::Push(Ticket ticket) {
  std::lock_guard lock(mu_);
  if (stop_ || size_ >= options_.max_size) return false;
  Level& level = levels_[ticket.priority];
  auto& queue = level.queues[ticket.tenant];
  if (queue.empty()) {
    // A tenant that had nothing waiting is sparse: it used less than its share, so it takes
    // the next turn rather than the last (as FQ-CoDel's new flows do); the tenant whose
    // turn it interrupts resumes after it.
    if (!level.new_turn && !level.turn.empty()) level.interrupted.insert(level.turn.front());
    level.turn.push_front(ticket.tenant);
    level.new_turn = true;
  }
  queue.push_back({std::move(ticket), Clock::now()});
  ++size_;
  return true;
}

size_t WaitQueue::size() const {
  std::lock_guard lock(mu_);
  return size_;
}

std::map<uint32_t, size_t> WaitQueue::WaitingByTenant() const {
  std::lock_guard lock(mu_);
  std::map<uint32_t, size_t> waiting;
  for (const auto& [priority, level] : levels_) {
    for (const auto& [tenant, queue] : level.queues) {
      if (!queue.empty()) waiting[tenant] += queue.size();
    }
  }
  return waiting;
}

void WaitQueue::Drop(Level& level, uint32_t tenant) {
  if (!level.turn.empty() && level.turn.front() == tenant) level.new_turn = true;
  level.queues.erase(tenant);
  level.deficit.erase(tenant);  // an idle tenant keeps no credit (DRR)
  level.interrupted.erase(tenant);
  std::erase(level.turn, tenant);
}

void WaitQueue::Pump() {
  if (pumping_thread_.load() == std::this_thread::get_id()) {
    // A request this very pump started ended at once and pumps: the pump goes round again
    // (taking the lock here would deadlock).
    pump_again_ = true;
    return;
  }
  std::vector<Leave> left;  // clients that left, told outside the lock
  {
    // Waits for a push, a sweep or another pump to finish: a pump that gave up instead could
    // leave a request waiting beside a free worker until the next sweep. (Callers hold no
    // lock that a start() takes.)
    std::lock_guard lock(mu_);
    pumping_thread_ = std::this_thread::get_id();
    do {
      pump_again_ = false;
      PumpLocked(left);
    } while (pump_again_);
    pumping_thread_ = std::thread::id();
  }
  for (Leave& leave : left) leave(Exit::kClientLeft);
}

void WaitQueue::PumpLocked(std::vector<Leave>& left) {
  {
    for (auto level_it = levels_.begin(); level_it != levels_.end();) {
      Level& level = level_it->second;
      bool blocked = false;
      // Deficit round robin: each turn adds a quantum to the tenant's deficit; it starts
      // requests while the deficit covers them, then the next tenant's turn begins.
      while (!level.turn.empty() && !blocked) {
        const uint32_t tenant = level.turn.front();
        std::deque<Waiting>& queue = level.queues[tenant];
        Waiting& head = queue.front();
        if (head.ticket.gone && *head.ticket.gone) {
          left.push_back(std::move(head.ticket.leave));
          queue.pop_front();
          --size_;
          if (queue.empty()) Drop(level, tenant);
          continue;
        }
        uint64_t& deficit = level.deficit[tenant];
        if (level.new_turn) {
          // An interrupted turn resumes with what was left of it.
          if (!level.interrupted.erase(tenant)) deficit += options_.quantum_tokens;
          level.new_turn = false;
        }
        if (deficit < head.ticket.tokens) {
          level.turn.push_back(tenant);  // its turn ends
          level.turn.pop_front();
          level.new_turn = true;
          continue;
        }
        if (!head.ticket.start()) {
          blocked = true;  // no free worker: nothing behind it can start either
          break;
        }
        deficit -= head.ticket.tokens;
        queue.pop_front();
        --size_;
        if (queue.empty()) Drop(level, tenant);
      }
      if (blocked) break;  // lower priorities wait behind
      level_it = level.turn.empty() ? levels_.erase(level_it) : std::next(level_it);
    }
  }
}

void WaitQueue::Sweep() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    stop_cv_.wait_for(lock, std::chrono::milliseconds(10), [this] { return stop_; });
    if (stop_) break;
    std::vector<std::pair<Leave, Exit>> left;
    const auto deadline = Clock::now() - options_.timeout;
    for (auto& [priority, level] : levels_) {
      for (auto it = level.queues.begin(); it != level.queues.end();) {
        std::deque<Waiting>& queue = it->second;
        std::erase_if(queue, [&](Waiting& w) {
          const bool gone = w.ticket.gone && *w.ticket.gone;
          if (!gone && w.arrived > deadline) return false;
          left.emplace_back(std::move(w.ticket.leave), gone ? Exit::kClientLeft : Exit::kTimedOut);
          --size_;
          return true;
        });
        const uint32_t tenant = it->first;
        ++it;
        if (queue.empty()) Drop(level, tenant);
      }
    }
    std::erase_if(levels_, [](const auto& entry) { return entry.second.turn.empty(); });
    const bool waiting = size_ > 0;
    lock.unlock();
    for (auto& [leave, why] : left) leave(why);
    // Workers also come free without a pump (a peer replica's request ends): pump every
    // tick while requests wait.
    if (waiting) Pump();
    lock.lock();
  }
}

}  // namespace kvgate::gateway
