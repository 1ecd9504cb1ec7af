// Where one render's values live. The strings, lists, dicts and macros a render makes are
// carved from one growing buffer and released together when the render ends, so values are
// plain data: nothing is counted, and nothing is freed one by one. The price: memory a
// render stops using comes back only when the render ends, so a heap has a ceiling (a
// template that grows a string quadratically must not take the process down).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <memory_resource>
#include <string>
#include <string_view>
#include <utility>

#include "chat/template.h"
#include "chat/value.h"

namespace kvgate::chat {

// A macro, a {% call %} body, or a global function named as a value (`strftime_now is
// defined`, `f = raise_exception`), called like a function.
struct Callable {
  const Template::Node* node;  // the kMacro node, or the body of a kCallBlock; null: global
  bool is_caller;
  size_t scope;     // the renderer's scope (frame) it was defined in: what its body sees
  int global = -1;  // a global's id (builtins.h), when node is null
};

// Thrown when a render's values would pass the heap's ceiling.
struct HeapExhausted {
  size_t limit;
  std::string message() const {
    return "rendering the chat template took more than " + std::to_string(limit >> 20) +
           " MiB of values";
  }
};

class Heap {
 public:
  static constexpr size_t kDefaultLimit = size_t{1} << 30;

  explicit Heap(size_t limit = kDefaultLimit)
      : upstream_(limit), memory_(first_block_.data(), first_block_.size(), &upstream_) {}
  Heap(const Heap&) = delete;
  Heap& operator=(const Heap&) = delete;

  // A string value whose characters are copied into the heap.
  Value MakeString(std::string_view s) { return Concat(s, {}); }
  // The string a + b, made in the heap in one piece.
  Value Concat(std::string_view a, std::string_view b) {
    if (a.empty() && b.empty()) return Value::StringView({});
    char* chars = static_cast<char*>(memory_.allocate(a.size() + b.size(), 1));
    std::copy(a.begin(), a.end(), chars);
    std::copy(b.begin(), b.end(), chars + a.size());
    return Value::StringView({chars, a.size() + b.size()});
  }
  // A new empty list or dict with room for `capacity` items.
  Value MakeList(size_t capacity = 0) { return Value::Of(NewList(capacity)); }
  Value MakeDict(size_t capacity = 0) { return Value::Of(NewDict(capacity)); }
  // A list holding `items` (moved when they already live here, else copied).
  Value MakeList(List&& items) { return Value::Of(New<List>(std::move(items), &memory_)); }
  Value MakeTuple(List&& items) {
    Value v = MakeList(std::move(items));
    v.is_tuple = true;
    return v;
  }
  Value MakeCallable(Callable c) { return Value::Of(New<Callable>(c)); }

  // For temporaries (argument lists) that are not worth a malloc.
  std::pmr::memory_resource* resource() { return &memory_; }

  List* NewList(size_t capacity) {
    List* list = New<List>(&memory_);
    list->reserve(capacity);
    return list;
  }
  Dict* NewDict(size_t capacity) {
    Dict* dict = New<Dict>(&memory_);
    dict->reserve(capacity);
    return dict;
  }

 private:
  // Objects here are never destroyed: their memory goes with the heap's, and the containers
  // among them allocate only from the heap, whose deallocation does nothing.
  template <class T, class... Args>
  T* New(Args&&... args) {
    return new (memory_.allocate(sizeof(T), alignof(T))) T(std::forward<Args>(args)...);
  }

  // Where blocks after the first come from: operator new, up to the ceiling.
  class CappedResource : public std::pmr::memory_resource {
   public:
    explicit CappedResource(size_t limit) : limit_(limit) {}

   private:
    void* do_allocate(size_t bytes, size_t alignment) override {
      if (bytes > limit_ - used_) throw HeapExhausted{limit_};
      used_ += bytes;
      return std::pmr::new_delete_resource()->allocate(bytes, alignment);
    }
    void do_deallocate(void* p, size_t bytes, size_t alignment) override {
      used_ -= bytes;
      std::pmr::new_delete_resource()->deallocate(p, bytes, alignment);
    }
    bool do_is_equal(const memory_resource& other) const noexcept override {
      return this == &other;
    }
    const size_t limit_;
    size_t used_ = 0;
  };

  // Enough for a typical chat request, so most renders never call malloc for values. (A Heap
  // lives on its render's stack.)
  alignas(std::max_align_t) std::array<std::byte, 16384> first_block_;
  CappedResource upstream_;
  std::pmr::monotonic_buffer_resource memory_;
};

}  // namespace kvgate::chat
