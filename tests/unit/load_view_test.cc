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
  void OnLocalChange(const LoadChange& c) override {
    const std::string id = std::to_string(c.id & 0xffff);
    switch (c.kind) {
      case LoadChange::Kind::kRouted:
        calls.push_back("routed " + id + " w" + std::to_string(c.worker.worker) + " " +
                        std::to_string(c.prefill_tokens) + " " + std::to_string(c.decode_blocks));
        break;
      case LoadChange::Kind::kFirstToken:
        calls.push_back("first " + id);
        break;
      case LoadChange::Kind::kFinished:
        calls.push_back("finished " + id);
        break;
    }
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

// Two replicas' views: what `peer` changes reaches `mine` when delivered, as over NATS.
struct Replicas {
  struct Collect : LocalLoadListener {
    std::vector<LoadChange> sent;
    void OnLocalChange(const LoadChange& c) override { sent.push_back(c); }
  } collect;
  LoadView mine{1}, peer{2};
  size_t delivered = 0;
  Replicas() { peer.SetLocalListener(&collect); }
  void Deliver() {
    for (; delivered < collect.sent.size(); ++delivered) mine.Apply(collect.sent[delivered]);
  }
};

TEST(LoadView, APeersChangesApplyAsTheyWereMade) {
  Replicas r;
  const kv::WorkerKey w{4, 1};
  r.peer.OnRouted(MakeRequestId(2, 1), w, 300, 20);
  r.peer.OnRouted(MakeRequestId(2, 2), w, 100, 7);
  r.peer.OnFirstToken(MakeRequestId(2, 1));
  r.Deliver();
  EXPECT_EQ(r.mine.PeersLoad(w).prefill_tokens, r.peer.LocalLoad(w).prefill_tokens);
  EXPECT_EQ(r.mine.PeersLoad(w).decode_blocks, 27u);
  EXPECT_EQ(r.mine.PeersLoad(w).requests, 2u);
  EXPECT_EQ(r.mine.LocalLoad(w).requests, 0u);
  r.peer.OnFinished(MakeRequestId(2, 2));
  r.Deliver();
  EXPECT_EQ(r.mine.PeersLoad(w).requests, 1u);
}

// A peer's request in flight counts as soon-cached where it went, as this replica's own do,
// until it finishes or the peer goes silent.
TEST(LoadView, APeersPromptsInFlightAreMatchedUntilTheyEnd) {
  Replicas r;
  const kv::WorkerKey w{4, 1};
  const std::vector<uint64_t> prompt = {11, 12, 13, 14, 15, 16};  // (chained hashes)
  const std::vector<uint64_t> next_turn = {11, 12, 13, 14, 15, 16, 17, 18};
  r.peer.OnRouted(MakeRequestId(2, 1), w, 96, 6, PrefixMarks::Of(prompt));
  r.peer.OnRouted(MakeRequestId(2, 2), w, 16, 1, PrefixMarks::Of({{11}}));
  r.Deliver();
  std::vector<std::pair<kv::WorkerKey, uint32_t>> m;
  r.mine.MatchInFlight(next_turn, m);
  EXPECT_EQ(m, (std::vector<std::pair<kv::WorkerKey, uint32_t>>{{w, 6}}));
  r.peer.OnFinished(MakeRequestId(2, 1));
  r.Deliver();
  r.mine.MatchInFlight(next_turn, m);
  EXPECT_EQ(m, (std::vector<std::pair<kv::WorkerKey, uint32_t>>{{w, 1}}));
  r.mine.RemoveOrigin(2);  // the peer went silent
  r.mine.MatchInFlight(next_turn, m);
  EXPECT_TRUE(m.empty());
}

}  // namespace
}  // namespace kvgate::routing
