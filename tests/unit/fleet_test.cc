// Fleet mode's pure parts: worker records, the replicas' load deltas and peer tracking.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <tuple>

#include "cluster/load_delta.h"
#include "cluster/peers.h"
#include "discovery/worker_record.h"

namespace kvgate {
namespace {

using discovery::ParseWorkerRecord;
using discovery::WorkerRecord;

TEST(WorkerRecord, EveryFieldRoundTripsThroughJson) {
  WorkerRecord r;
  const std::string text =
      R"({"id":"w1","url":"http://10.0.0.1:8000","engine":"sglang","kv_events":"tcp://10.0.0.1:5557",)"
      R"("kv_replay":"tcp://10.0.0.1:5558","dp_size":2,"role":"prefill","bootstrap_port":8998,)"
      R"("model":"qwen3","block_size":16})";
  ASSERT_TRUE(ParseWorkerRecord(text, &r).ok());
  EXPECT_EQ(r.id, "w1");
  EXPECT_EQ(r.engine, engines::EngineKind::kSglang);
  EXPECT_EQ(r.role, discovery::WorkerRole::kPrefill);
  EXPECT_EQ(std::tuple(r.dp_size, r.bootstrap_port, r.block_size),
            std::tuple(2u, uint16_t{8998}, 16u));
  EXPECT_EQ(boost::json::parse(discovery::ToJsonText(r)), boost::json::parse(text));
  WorkerRecord again;
  ASSERT_TRUE(ParseWorkerRecord(discovery::ToJsonText(r), &again).ok());
  EXPECT_EQ(again, r);
}

TEST(WorkerRecord, TheIdDefaultsToAStableNameThatHidesTheAddress) {
  WorkerRecord a, b, c;
  ASSERT_TRUE(ParseWorkerRecord(R"({"url":"http://10.0.0.1:8000"})", &a).ok());
  ASSERT_TRUE(ParseWorkerRecord(R"({"url":"http://10.0.0.1:8000/"})", &b).ok());
  ASSERT_TRUE(ParseWorkerRecord(R"({"url":"http://10.0.0.1:8001"})", &c).ok());
  EXPECT_EQ(a.id, b.id);  // the same worker, however its url is written
  EXPECT_NE(a.id, c.id);
  EXPECT_EQ(a.id.size(), 10u);
  EXPECT_EQ(a.id.substr(0, 2), "w-");
  EXPECT_EQ(a.id.find("10.0.0.1"), std::string::npos);
  EXPECT_EQ(std::tuple(a.engine, a.role, a.dp_size),
            std::tuple(engines::EngineKind::kVllm, discovery::WorkerRole::kBoth, 1u));
}

TEST(WorkerRecord, MistakesAreErrorsThatNameTheField) {
  const std::pair<const char*, const char*> bad[] = {
      {R"({"url":"http://h:1","colour":"red"})", "colour"},
      {R"({"id":"w1"})", "url"},
      {R"({"url":"ftp://h:1"})", "url"},
      {R"({"url":"http://h:1","engine":"tgi"})", "engine"},
      {R"({"url":"http://h:1","role":"leader"})", "role"},
      {R"({"url":"http://h:1","dp_size":0})", "dp_size"},
      {R"({"url":"http://h:1","dp_size":-1})", "dp_size"},
      {R"({"url":"http://h:1","bootstrap_port":70000})", "bootstrap_port"},
      {R"({"url":"http://h:1","id":"a/b"})", "id"},
      {R"({"url":"http://h:1","block_size":"16"})", "block_size"},
      {R"([1,2])", "object"},
      {R"({"url":)", "JSON"},
  };
  for (const auto& [text, field] : bad) {
    WorkerRecord r;
    const Status s = ParseWorkerRecord(text, &r);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(s.message().find(field), std::string::npos) << text << ": " << s.message();
  }
}

TEST(LoadDelta, EveryKindRoundTrips) {
  using cluster::DeltaKind;
  cluster::LoadDelta routed;
  routed.kind = DeltaKind::kRouted;
  routed.instance = 0xfeedfacecafebeefull;
  routed.origin = 65535;
  routed.seq = 41;
  routed.request = (uint64_t{65535} << 48) | 7;
  routed.worker = "w-0a1b2c3d";
  routed.dp_rank = 3;
  routed.prefill_tokens = 4000;
  routed.decode_blocks = 250;
  routed.prefix_blocks = 5;
  routed.prefix_hashes = {0xffffffffffffffffull, 1, 2, 3};  // blocks 0, 1, 3 and 4
  cluster::LoadDelta beat;
  beat.kind = DeltaKind::kHeartbeat;
  beat.replica = "10.0.0.9:8000";
  beat.in_flight = 12;
  cluster::LoadDelta first = routed, finished = routed;
  first.kind = DeltaKind::kFirstToken;
  finished.kind = DeltaKind::kFinished;
  cluster::LoadDelta usage;
  usage.kind = DeltaKind::kUsage;
  usage.usage = {{"team-a", 3, -700, 2}, {"team-b", 0, 0, 0}};
  for (const cluster::LoadDelta& d : {routed, first, finished, beat, usage}) {
    cluster::LoadDelta back;
    ASSERT_TRUE(cluster::DecodeDelta(cluster::EncodeDelta(d), &back).ok());
    EXPECT_EQ(cluster::EncodeDelta(back), cluster::EncodeDelta(d));
    EXPECT_EQ(std::tuple(back.kind, back.instance, back.origin, back.seq),
              std::tuple(d.kind, d.instance, d.origin, d.seq));
  }
  cluster::LoadDelta back;
  ASSERT_TRUE(cluster::DecodeDelta(cluster::EncodeDelta(usage), &back).ok());
  EXPECT_EQ(back.usage, usage.usage);
  ASSERT_TRUE(cluster::DecodeDelta(cluster::EncodeDelta(routed), &back).ok());
  EXPECT_EQ(
      std::tuple(back.request, back.worker, back.dp_rank, back.prefill_tokens, back.decode_blocks),
      std::tuple(routed.request, routed.worker, routed.dp_rank, routed.prefill_tokens,
                 routed.decode_blocks));
  EXPECT_EQ(std::tuple(back.prefix_blocks, back.prefix_hashes),
            std::tuple(routed.prefix_blocks, routed.prefix_hashes));
  // Without a prompt (a policy that keeps none) there is no "prefix" at all.
  routed.prefix_blocks = 0;
  routed.prefix_hashes.clear();
  EXPECT_EQ(cluster::EncodeDelta(routed).find("prefix"), std::string::npos);
}

TEST(LoadDelta, MalformedMessagesAreRefused) {
  for (const char* text : {
           "",
           "[]",
           R"({"kind":"routed"})",
           R"({"kind":"gossip","instance":1,"origin":1,"seq":1})",
           R"({"kind":"finished","instance":1,"origin":1,"seq":1})",  // no request
           R"({"kind":"finished","instance":1,"origin":70000,"seq":1,"request":5})",
           R"({"kind":"routed","instance":1,"origin":1,"seq":1,"request":5,"worker":"w",)"
           R"("dp_rank":0,"prefill_tokens":-4,"decode_blocks":1})",
           R"({"kind":"routed","instance":1,"origin":1,"seq":1,"request":5,"worker":"w",)"
           R"("dp_rank":0,"prefill_tokens":4,"decode_blocks":1,"prefix":{"blocks":2,)"
           R"("hashes":[1,"two"]}})",
           R"({"kind":"routed","instance":1,"origin":1,"seq":1,"request":5,"worker":"w",)"
           R"("dp_rank":0,"prefill_tokens":4,"decode_blocks":1,"prefix":[1,2]})",
           R"({"kind":"usage","instance":1,"origin":1,"seq":1})",  // no usage
           R"({"kind":"usage","instance":1,"origin":1,"seq":1,"usage":[{"tenant":"a"}]})",
           R"({"kind":"usage","instance":1,"origin":1,"seq":1,"usage":[{"tenant":"a",)"
           R"("requests":1,"tokens":"many","in_flight":0}]})",
       }) {
    cluster::LoadDelta d;
    EXPECT_FALSE(cluster::DecodeDelta(text, &d).ok()) << text;
  }
}

TEST(Peers, InOrderMessagesApplyAndAGapOrRestartResetsThePeer) {
  using V = cluster::Peers::Verdict;
  cluster::Peers peers;
  const auto t0 = cluster::Peers::Clock::now();
  EXPECT_EQ(peers.OnMessage(5, 100, t0), V::kApply);  // first heard mid-stream: fine
  EXPECT_EQ(peers.OnMessage(5, 101, t0), V::kApply);
  EXPECT_EQ(peers.OnMessage(5, 103, t0), V::kResetThenApply);  // 102 was lost
  EXPECT_EQ(peers.OnMessage(5, 104, t0), V::kApply);
  EXPECT_EQ(peers.OnMessage(5, 0, t0), V::kResetThenApply);  // restarted under the same origin
  EXPECT_EQ(peers.OnMessage(9, 0, t0), V::kApply);
  EXPECT_EQ(peers.size(), 2u);
}

TEST(Peers, ASilentPeerExpiresAndComesBackAsNew) {
  using namespace std::chrono_literals;
  cluster::Peers peers;
  const auto t0 = cluster::Peers::Clock::now();
  (void)peers.OnMessage(1, 0, t0);
  (void)peers.OnMessage(2, 0, t0 + 2s);
  EXPECT_TRUE(peers.Expire(t0 + 3s, 3s).empty());
  EXPECT_EQ(peers.Expire(t0 + 3s + 1ms, 3s), std::vector<uint16_t>{1});
  EXPECT_EQ(peers.size(), 1u);
  EXPECT_EQ(peers.OnMessage(1, 57, t0 + 4s), cluster::Peers::Verdict::kApply);
}

}  // namespace
}  // namespace kvgate
