#include "http/event_loop.h"

#include "http/event_loop_impl.h"

namespace kvgate::http {

EventLoops::EventLoops(int threads) : impl_(std::make_unique<Impl>()) {
  const int n = threads < 1 ? 1 : threads;
  for (int i = 0; i < n; ++i) {
    auto loop = std::make_unique<Impl::Loop>();
    loop->index = static_cast<size_t>(i);
    impl_->loops.push_back(std::move(loop));
  }
  for (auto& loop : impl_->loops) {
    impl_->threads.emplace_back([l = loop.get()] {
      Impl::Current() = l;
      l->ioc.run();
    });
  }
}

EventLoops::~EventLoops() { Stop(); }

void EventLoops::Stop() {
  for (auto& loop : impl_->loops) {
    loop->work.reset();
    loop->ioc.stop();
  }
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
}

}  // namespace kvgate::http
