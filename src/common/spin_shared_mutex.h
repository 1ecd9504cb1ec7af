// A shared mutex for very short critical sections: waiters spin briefly before sleeping,
// since a futex sleep/wake costs tens of microseconds on a busy machine, far longer than the
// section they wait for.
#pragma once

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
    for (int i = 0; i < kSpins; ++i) {
      if (mu_.try_lock()) return;
      CpuRelax();
    }
    mu_.lock();
  }
  void unlock() { mu_.unlock(); }
  bool try_lock() { return mu_.try_lock(); }

  void lock_shared() {
    for (int i = 0; i < kSpins; ++i) {
      if (mu_.try_lock_shared()) return;
      CpuRelax();
    }
    mu_.lock_shared();
  }
  void unlock_shared() { mu_.unlock_shared(); }
  bool try_lock_shared() { return mu_.try_lock_shared(); }

 private:
  static constexpr int kSpins = 2000;  // a few microseconds
  std::shared_mutex mu_;
};

}  // namespace kvgate
