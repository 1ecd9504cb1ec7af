// An append-only table whose entries keep their address and index for the table's life, read
// without locks while it grows: for things numbered once and looked up on every request
// (workers that join at run time). Appends must not race each other; reads may race appends.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

namespace kvgate {

template <typename T>
class SlotTable {
 public:
  explicit SlotTable(size_t capacity)
      : slots_(std::make_unique<std::unique_ptr<T>[]>(capacity)), capacity_(capacity) {}

  // The new entry's index; nullopt when the table is full.
  std::optional<uint32_t> Append(std::unique_ptr<T> entry) {
    const size_t n = size_.load(std::memory_order_relaxed);
    if (n == capacity_) return std::nullopt;
    slots_[n] = std::move(entry);
    size_.store(n + 1, std::memory_order_release);  // publishes the entry
    return static_cast<uint32_t>(n);
  }

  size_t size() const { return size_.load(std::memory_order_acquire); }
  size_t capacity() const { return capacity_; }
  // `i` < size().
  T& operator[](size_t i) const { return *slots_[i]; }

 private:
  const std::unique_ptr<std::unique_ptr<T>[]> slots_;
  const size_t capacity_;
  std::atomic<size_t> size_{0};
};

}  // namespace kvgate
