#include "events/stream_state.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvgate::events {
namespace {

struct Recorder : StreamActions {
  std::vector<std::string> log;
  void Apply(uint64_t seq, std::string_view payload) override {
    log.push_back("apply " + std::to_string(seq) + " " + std::string(payload));
  }
  void Restart() override { log.push_back("restart"); }
  void RequestReplay(uint64_t from) override { log.push_back("replay " + std::to_string(from)); }
};

using Log = std::vector<std::string>;

TEST(StreamState, InOrderBatchesApplyDirectly) {
  Recorder r;
  StreamState s(r, true);
  s.OnLive(0, "a");
  s.OnLive(1, "b");
  EXPECT_EQ(r.log, (Log{"apply 0 a", "apply 1 b"}));
  EXPECT_EQ(s.counters().batches, 2u);
}

TEST(StreamState, GapReplaysThenAppliesBufferedLiveInOrder) {
  Recorder r;
  StreamState s(r, true);
  s.OnLive(0, "a");
  s.OnLive(3, "d");  // 1 and 2 missed
  s.OnLive(4, "e");
  s.OnReplay(1, "b");
  s.OnReplay(2, "c");
  s.OnReplay(3, "d");  // the replay overlaps what we buffered: that copy is the duplicate
  s.OnReplayEnd();
  EXPECT_EQ(r.log,
            (Log{"apply 0 a", "replay 1", "apply 1 b", "apply 2 c", "apply 3 d", "apply 4 e"}));
  EXPECT_EQ(s.counters().gaps, 1u);
  EXPECT_EQ(s.counters().replayed_batches, 2u);
  EXPECT_EQ(s.counters().duplicates, 1u);
  EXPECT_EQ(s.counters().lost_batches, 0u);
  EXPECT_FALSE(s.replaying());
}

TEST(StreamState, ReplayThatCannotFillTheGapCountsLostBatches) {
  Recorder r;
  StreamState s(r, true);
  s.OnLive(0, "a");
  s.OnLive(5, "f");
  s.OnReplayEnd();  // engine had nothing (or timeout)
  EXPECT_EQ(r.log, (Log{"apply 0 a", "replay 1", "apply 5 f"}));
  EXPECT_EQ(s.counters().lost_batches, 4u);
}

TEST(StreamState, ABogusReplaySeqPastTheGapIsNotARestart) {
  Recorder r;
  StreamState s(r, true);
  s.OnLive(0, "a");
  s.OnLive(2, "c");
  s.OnReplay(1, "b");
  s.OnReplay(uint64_t{1} << 62, "bogus");  // past the gap [1, 2): ignored
  s.OnReplayEnd();
  s.OnLive(3, "d");
  EXPECT_EQ(r.log, (Log{"apply 0 a", "replay 1", "apply 1 b", "apply 2 c", "apply 3 d"}));
  EXPECT_EQ(s.counters().restarts, 0u);
}

TEST(StreamState, LostBatchesSaturateInsteadOfWrapping) {
  Recorder r;
  StreamState s(r, false);
  s.OnLive(0, "a");
  s.OnLive(UINT64_MAX - 1, "far");
  s.OnLive(UINT64_MAX, "next");
  EXPECT_EQ(s.counters().lost_batches, UINT64_MAX - 2);
  StreamState t(r, false);
  t.OnLive(0, "a");
  t.OnLive(UINT64_MAX / 2 + 10, "x");
  t.OnLive(0, "restart");  // the engine restarted: seq 0 again
  t.OnLive(UINT64_MAX - 1, "y");
  EXPECT_EQ(t.counters().lost_batches, UINT64_MAX) << "saturated, not wrapped";
}

TEST(StreamState, WithoutReplayGapsAreCountedAndSkipped) {
  Recorder r;
  StreamState s(r, false);
  s.OnLive(0, "a");
  s.OnLive(2, "c");
  EXPECT_EQ(r.log, (Log{"apply 0 a", "apply 2 c"}));
  EXPECT_EQ(s.counters().gaps, 1u);
  EXPECT_EQ(s.counters().lost_batches, 1u);
}

TEST(StreamState, LateJoinerAsksForHistory) {
  Recorder r;
  StreamState s(r, true);
  s.OnLive(7, "h");
  s.OnReplay(5, "f");
  s.OnReplay(6, "g");
  s.OnReplayEnd();
  EXPECT_EQ(r.log, (Log{"replay 0", "apply 5 f", "apply 6 g", "apply 7 h"}));
  EXPECT_EQ(s.counters().gaps, 0u);
}

TEST(StreamState, SequenceGoingBackMeansRestart) {
  Recorder r;
  StreamState s(r, true);
  s.OnLive(0, "a");
  s.OnLive(1, "b");
  s.OnLive(0, "A");
  s.OnLive(1, "B");
  EXPECT_EQ(r.log, (Log{"apply 0 a", "apply 1 b", "restart", "apply 0 A", "apply 1 B"}));
  EXPECT_EQ(s.counters().restarts, 1u);
}

TEST(StreamState, RestartDuringReplayAbandonsIt) {
  Recorder r;
  StreamState s(r, true);
  s.OnLive(0, "a");
  s.OnLive(1, "b");
  s.OnLive(4, "e");
  s.OnLive(0, "A");  // engine restarted while we waited for the replay
  s.OnReplay(2, "c");
  s.OnReplayEnd();
  EXPECT_EQ(r.log, (Log{"apply 0 a", "apply 1 b", "replay 2", "restart", "apply 0 A"}));
}

}  // namespace
}  // namespace kvgate::events
