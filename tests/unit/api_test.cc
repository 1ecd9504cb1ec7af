// The gateway's pure pieces: SSE splitting, routed-experts normalization (every native
// form, and every way it can be wrong), engine field handling, config and metrics text.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <cstdio>
#include <fstream>

#include "api/routed_experts.h"
#include "api/sse.h"
#include "common/base64.h"
#include "engines/engines.h"
#include "gateway/config.h"
#include "gateway/metrics.h"
#include "tokenizer/pipeline.h"

namespace kvgate {
namespace {

namespace json = boost::json;

TEST(SseSplitter, EventsSplitAcrossArbitraryPieces) {
  const std::string stream =
      "data: {\"a\":1}\n\n: comment\n\ndata: x\r\ndata: y\r\n\r\ndata: [DONE]\n\n";
  for (size_t piece = 1; piece <= stream.size(); ++piece) {
    api::SseSplitter splitter;
    std::vector<std::string> events;
    for (size_t i = 0; i < stream.size(); i += piece) {
      splitter.Feed(std::string_view(stream).substr(i, piece),
                    [&](std::string_view e) { events.emplace_back(e); });
    }
    ASSERT_EQ(events.size(), 4u) << "piece " << piece;
    EXPECT_EQ(api::SseData(events[0]), "{\"a\":1}");
    EXPECT_EQ(api::SseData(events[1]), "");
    EXPECT_EQ(api::SseData(events[2]), "x\ny");
    EXPECT_EQ(api::SseData(events[3]), "[DONE]");
    EXPECT_TRUE(splitter.pending().empty());
  }
}

std::string Int32Bytes(const std::vector<int32_t>& v) {
  std::string out;
  for (int32_t x : v) {
    const auto u = static_cast<uint32_t>(x);
    for (int i = 0; i < 4; ++i) out += static_cast<char>(u >> (8 * i));
  }
  return out;
}

// A .npy v1 file as numpy writes it.
std::string Npy(const std::string& descr, const std::string& shape, const std::string& data) {
  std::string header =
      "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + data;
}

api::ExpertsContext Context(uint64_t prompt, uint64_t completion, uint64_t start = 0) {
  api::ExpertsContext c;
  c.layers = 2;
  c.top_k = 3;
  c.prompt_tokens = prompt;
  c.completion_tokens = completion;
  c.start = start;
  return c;
}

TEST(RoutedExperts, SglangStringPassesThroughUnchanged) {
  std::vector<int32_t> values(4 * 2 * 3);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<int32_t>(i * 7 % 64);
  const json::value native = json::string(Base64Encode(Int32Bytes(values)));
  std::string problem;
  json::value out = api::NormalizeRoutedExperts(native, Context(3, 3, 1), &problem);
  ASSERT_TRUE(out.is_object()) << problem;
  EXPECT_EQ(out.at("data"), native);
  EXPECT_EQ(out.at("dtype"), "int32");
  EXPECT_EQ(out.at("shape"), (json::array{4, 2, 3}));  // 3 + 3 - 1 - 1 rows
  EXPECT_EQ(out.at("start"), 1);
  // One row too few for the token counts: rejected, not guessed.
  out = api::NormalizeRoutedExperts(native, Context(3, 4, 1), &problem);
  EXPECT_TRUE(out.is_null());
  EXPECT_NE(problem.find("rows"), std::string::npos);
}

TEST(RoutedExperts, NpyHeaderStrippedForEveryDtype) {
  for (auto [descr, dtype, size] : {std::tuple{"|u1", "uint8", 1},
                                    {"<u2", "uint16", 2},
                                    {"<i2", "int16", 2},
                                    {"<i4", "int32", 4}}) {
    std::string data;
    for (int i = 0; i < 2 * 2 * 3 * size; ++i) data += static_cast<char>(i);
    const json::value native = json::string(Base64Encode(Npy(descr, "(2, 2, 3)", data)));
    std::string problem;
    const json::value out = api::NormalizeRoutedExperts(native, Context(2, 1), &problem);
    ASSERT_TRUE(out.is_object()) << descr << ": " << problem;
    EXPECT_EQ(out.at("dtype"), dtype);
    EXPECT_EQ(out.at("shape"), (json::array{2, 2, 3}));
    EXPECT_EQ(*Base64Decode(out.at("data").as_string()), data);
  }
}

TEST(RoutedExperts, BadNpyIsNull) {
  std::string problem;
  const std::string data(2 * 2 * 3, '\1');
  for (const std::string& npy :
       {Npy("<f4", "(2, 2, 3)", std::string(48, '\0')), Npy("|u1", "(2, 2)", data),
        Npy("|u1", "(2, 2, 3)", data.substr(1)), std::string("\x93NUMPY\x01\x00\xff\x00", 10)}) {
    const json::value out =
        api::NormalizeRoutedExperts(json::string(Base64Encode(npy)), Context(2, 1), &problem);
    EXPECT_TRUE(out.is_null());
    EXPECT_FALSE(problem.empty());
  }
}

TEST(RoutedExperts, NestedListsBecomeInt32) {
  const json::value lists = json::parse("[[[1,2,3],[4,5,6]],[[7,8,9],[10,11,12]]]");
  std::string problem;
  const json::value out = api::NormalizeRoutedExperts(lists, Context(2, 1), &problem);
  ASSERT_TRUE(out.is_object()) << problem;
  EXPECT_EQ(out.at("dtype"), "int32");
  EXPECT_EQ(out.at("shape"), (json::array{2, 2, 3}));
  EXPECT_EQ(*Base64Decode(out.at("data").as_string()),
            Int32Bytes({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
  for (const char* bad :
       {"[[[1,2,3],[4,5]]]", "[[[1,2,3]],[[4,5,6],[7,8,9]]]", "[[[1.5]]]", "[[1,2]]"}) {
    EXPECT_TRUE(api::NormalizeRoutedExperts(json::parse(bad), Context(1, 1), &problem).is_null())
        << bad;
  }
}

TEST(RoutedExperts, NormalizedObjectPassesAndOtherTypesAreNull) {
  const json::value ready =
      json::parse(R"({"data":"AAAA","dtype":"int32","shape":[1,1,1],"start":0})");
  std::string problem;
  EXPECT_EQ(api::NormalizeRoutedExperts(ready, Context(1, 1), &problem), ready);
  for (const char* bad : {"null", "42", "true", R"({"data":"AAAA"})"}) {
    problem.clear();
    EXPECT_TRUE(api::NormalizeRoutedExperts(json::parse(bad), Context(1, 1), &problem).is_null());
    EXPECT_FALSE(problem.empty()) << bad;
  }
}

TEST(Engines, AskAndTakeRoutedExperts) {
  json::object body{{"prompt", "x"}};
  engines::AskForRoutedExperts(engines::EngineKind::kVllm, 5, body);
  EXPECT_EQ(body.at("return_routed_experts"), true);
  EXPECT_EQ(body.at("routed_experts_prompt_start"), 5);
  json::object sg;
  engines::AskForRoutedExperts(engines::EngineKind::kSglang, 2, sg);
  EXPECT_EQ(sg.at("routed_experts_start_len"), 2);

  json::value holder;
  uint64_t start = 0;
  json::object vllm =
      json::parse(
          R"({"choices":[{"text":"a","routed_experts":"k05V","routed_experts_prompt_start":4}],
          "usage":{"prompt_tokens":9,"completion_tokens":2}})")
          .as_object();
  ASSERT_TRUE(engines::TakeRoutedExperts(vllm, holder, &start));
  EXPECT_EQ(holder, "k05V");
  EXPECT_EQ(start, 4u);
  EXPECT_FALSE(vllm.at("choices").as_array()[0].as_object().contains("routed_experts"));
  engines::TokenCounts counts;
  engines::ReadTokenCounts(vllm, &counts);
  EXPECT_EQ(counts.prompt, 9u);
  EXPECT_EQ(counts.completion, 2u);

  json::object sglang =
      json::parse(
          R"({"choices":[],"sglext":{"routed_experts":"AAAA","routed_experts_start_len":1}})")
          .as_object();
  ASSERT_TRUE(engines::TakeRoutedExperts(sglang, holder, &start));
  EXPECT_EQ(start, 1u);
  EXPECT_FALSE(sglang.contains("sglext"));
  json::object none = json::parse(R"({"choices":[{"text":"a"}]})").as_object();
  EXPECT_FALSE(engines::TakeRoutedExperts(none, holder, &start));
}

TEST(Config, YamlSectionsAndUnknownKeys) {
  const std::string path = ::testing::TempDir() + "/kvgate_config_test.yaml";
  {
    std::ofstream f(path);
    f << "listen: {host: 0.0.0.0, port: 9000}\n"
         "block_size: 32\n"
         "workers:\n"
         "  - url: http://10.0.0.1:8000\n"
         "    engine: sglang\n"
         "    kv_events: tcp://10.0.0.1:5557\n"
         "    dp_size: 2\n"
         "routing: {policy: round_robin, prefill_weight: 4}\n"
         "limits: {max_in_flight: 10, first_byte_timeout_ms: 1500}\n";
  }
  gateway::GatewayConfig c;
  ASSERT_TRUE(gateway::LoadConfigFile(path, &c).ok());
  EXPECT_EQ(c.host, "0.0.0.0");
  EXPECT_EQ(c.port, 9000);
  EXPECT_EQ(c.block_size, 32u);
  ASSERT_EQ(c.workers.size(), 1u);
  EXPECT_EQ(c.workers[0].engine, engines::EngineKind::kSglang);
  EXPECT_EQ(c.workers[0].dp_size, 2u);
  EXPECT_EQ(c.routing.policy, routing::Policy::kRoundRobin);
  EXPECT_EQ(c.routing.kv.prefill_weight, 4);
  EXPECT_EQ(c.limits.first_byte_timeout, std::chrono::milliseconds(1500));
  ASSERT_TRUE(gateway::FinishConfig(&c).ok());
  EXPECT_EQ(c.models, std::vector<std::string>{"kvgate-mock"});

  {
    std::ofstream f(path);
    f << "routing: {polcy: kv}\n";
  }
  gateway::GatewayConfig bad;
  const Status s = gateway::LoadConfigFile(path, &bad);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("routing.polcy"), std::string::npos) << s.message();
  std::remove(path.c_str());
}

TEST(Metrics, CountersAndHistogramsRenderPrometheusText) {
  gateway::CounterFamily c{"x_total", "X.", {"route", "status"}};
  c.Add({"/v1/a\"b", "200"});
  c.Add({"/v1/a\"b", "200"}, 2);
  std::string out;
  c.Render(out);
  EXPECT_EQ(out,
            "# HELP x_total X.\n# TYPE x_total "
            "counter\nx_total{route=\"/v1/a\\\"b\",status=\"200\"} 3\n");
  gateway::HistogramFamily h{"lat_seconds", "L.", {}, {0.1, 1}};
  h.Observe({}, 0.05);
  h.Observe({}, 0.5);
  h.Observe({}, 5);
  out.clear();
  h.Render(out);
  EXPECT_NE(out.find("lat_seconds_bucket{le=\"0.1\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("lat_seconds_bucket{le=\"1\"} 2\n"), std::string::npos);
  EXPECT_NE(out.find("lat_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(out.find("lat_seconds_count 3\n"), std::string::npos);
}

TEST(LossyUtf8, ReplacesMaximalInvalidSubsequences) {
  EXPECT_EQ(tokenizer::LossyUtf8("ok \xC3\xA9"), "ok \xC3\xA9");
  EXPECT_EQ(tokenizer::LossyUtf8("\xEC\x9A!"), "\xEF\xBF\xBD!");            // truncated 3-byte
  EXPECT_EQ(tokenizer::LossyUtf8("\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // lone continuations
  EXPECT_EQ(tokenizer::LossyUtf8("\xED\xA0\x80"),
            "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");                // surrogate
  EXPECT_EQ(tokenizer::LossyUtf8("\xF0\x9F\x98"), "\xEF\xBF\xBD");  // truncated 4-byte
}

}  // namespace
}  // namespace kvgate
