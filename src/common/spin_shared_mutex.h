// A shared mutex for very short critical sections: waiters spin briefly before sleeping,
// since a futex sleep/wake costs tens of microseconds on a busy machine, far longer than the
// section they wait for. Readers that are waiting go before a writer's next section: a
// writer applying events back to back would otherwise re-take the lock before a spinning
// reader ever finds it free.
#pragma once

#include <atomic>
#include <shared_mutex>

namespace kvgate {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

class SpinSharedMutex {
 public:
  void lock() {
    for (int i = 0; i < kSpins && waiting_readers_.load(std::memory_order_acquire) != 0; ++i) {
      CpuRelax();
    }
    for (int i = 0; i < kSpins; ++i) {
      if (mu_.try_lock()) return;
      CpuRelax();
    }
    mu_.lock();
  }
  void unlock() { mu_.unlock(); }
  bool try_lock() { return mu_.try_lock(); }

  void lock_shared() {
    if (mu_.try_lock_shared()) return;
    waiting_readers_.fetch_add(1, std::memory_order_acq_rel);
    bool acquired = false;
    for (int i = 0; i < kSpins && !acquired; ++i) {
      CpuRelax();
      acquired = mu_.try_lock_shared();
    }
    if (!acquired) mu_.lock_shared();
    waiting_readers_.fetch_sub(1, std::memory_order_acq_rel);
  }
  void unlock_shared() { mu_.unlock_shared(); }
  bool try_lock_shared() { return mu_.try_lock_shared(); }

 private:
  static constexpr int kSpins = 2000;  // a few microseconds
  std::shared_mutex mu_;
  std::atomic<int> waiting_readers_{0};
};

}  // namespace kvgate
