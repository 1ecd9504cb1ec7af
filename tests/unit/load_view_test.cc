// routing/load_view: load from this process's decisions and from peers'.
#include "routing/load_view.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvgate::routing {
namespace {

TEST(LoadView, PrefillUntilFirstTokenDecodeUntilFinished) {
  LoadView v(1);
  const kv::WorkerKey w{0, 0};
  v.OnRouted(MakeRequestId(1, 1), w, 100, 8);
  v.OnRouted(MakeRequestId(1, 2), w, 50, 4);
  EXPECT_EQ(v.Load(w).prefill_tokens, 150u);
  v.OnFirstToken(MakeRequestId(1, 1));
  v.OnFirstToken(MakeRequestId(1, 1));  // once only
  EXPECT_EQ(v.Load(w).prefill_tokens, 50u);
  EXPECT_EQ(v.Load(w).decode_blocks, 12u);
  v.OnFinished(MakeRequestId(1, 1));
  v.OnFinished(MakeRequestId(1, 1));
  EXPECT_EQ(v.Load(w).requests, 1u);
  EXPECT_EQ(v.Load(w).decode_blocks, 4u);
  EXPECT_EQ(v.InFlight(), 1u);
}

TEST(LoadView, PeersCountApartAndLeaveTogether) {
  LoadView v(1);
  const kv::WorkerKey w{2, 0};
  v.OnRouted(MakeRequestId(1, 1), w, 10, 1);
  v.OnRouted(MakeRequestId(7, 1), w, 20, 2);  // same sequence, another process: no clash
  v.OnRouted(MakeRequestId(7, 2), w, 30, 3);
  EXPECT_EQ(v.LocalLoad(w).requests, 1u);
  EXPECT_EQ(v.PeersLoad(w).requests, 2u);
  EXPECT_EQ(v.Load(w).prefill_tokens, 60u);
  v.RemoveOrigin(7);  // a peer went silent
  EXPECT_EQ(v.PeersLoad(w).requests, 0u);
  EXPECT_EQ(v.Load(w).prefill_tokens, 10u);
  EXPECT_EQ(v.InFlight(), 1u);
  v.RemoveWorker(w);
  EXPECT_EQ(v.Load(w).requests, 0u);
  EXPECT_EQ(v.InFlight(), 0u);
}

TEST(LoadView, RequestIdsCarryTheirOrigin) {
  EXPECT_EQ(RequestOrigin(MakeRequestId(513, 42)), 513);
  EXPECT_NE(MakeRequestId(1, 42), MakeRequestId(2, 42));
}

// Records what the view tells its listener, as one line per call.
class RecordingListener : public LocalLoadListener {
 public:
  void OnRouted(RequestId id, kv::WorkerKey w, uint32_t prefill, uint32_t decode) override {
    calls.push_back("routed " + std::to_string(id & 0xffff) + " w" + std::to_string(w.worker) +
                    " " + std::to_string(prefill) + " " + std::to_string(decode));
  }
  void OnFirstToken(RequestId id) override {
    calls.push_back("first " + std::to_string(id & 0xffff));
  }
  void OnFinished(RequestId id) override {
    calls.push_back("finished " + std::to_string(id & 0xffff));
  }
  std::vector<std::string> calls;
};

TEST(LoadView, OnlyLocalChangesReachTheListenerAndOnlyOnce) {
  LoadView v(1);
  RecordingListener l;
  v.SetLocalListener(&l);
  const kv::WorkerKey w{3, 0};
  v.OnRouted(MakeRequestId(1, 1), w, 64, 5);
  v.OnRouted(MakeRequestId(1, 1), w, 64, 5);  // already in flight: no change, no call
  v.OnRouted(MakeRequestId(9, 1), w, 32, 2);  // a peer's: applied, not echoed back
  v.OnFirstToken(MakeRequestId(1, 1));
  v.OnFirstToken(MakeRequestId(1, 1));
  v.OnFirstToken(MakeRequestId(9, 1));
  v.OnFinished(MakeRequestId(1, 1));
  v.OnFinished(MakeRequestId(1, 1));
  v.OnFinished(MakeRequestId(1, 42));  // never routed
  EXPECT_EQ(l.calls, (std::vector<std::string>{"routed 1 w3 64 5", "first 1", "finished 1"}));
  EXPECT_EQ(v.PeersLoad(w).requests, 1u);
  v.SetLocalListener(nullptr);
  v.OnRouted(MakeRequestId(1, 2), w, 1, 1);
  EXPECT_EQ(l.calls.size(), 3u);
}

}  // namespace
}  // namespace kvgate::routing
