// routing/load_view: load from this process's decisions and from peers'.
#include "routing/load_view.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace kvgate::routing
