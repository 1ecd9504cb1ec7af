// gateway/call_plan: a client request read, hashed, and its engine body built.
#include "gateway/call_plan.h"

#include <gtest/gtest.h>

#include "kv/block_hash.h"

namespace kvgate::gateway {
namespace {

namespace json = boost::json;

ServedModel Model() {
  ServedModel m;
  m.names = {"base"};
  m.adapters = {"lora-a"};
  m.block_size = 4;
  return m;
}

http::Request Post(std::string path, std::string body) {
  http::Request r;
  r.method = "POST";
  r.path = r.target = std::move(path);
  r.body = std::move(body);
  r.headers["x-request-id"] = "abc";
  return r;
}

TEST(CallPlan, PlainRequestsReachTheEngineAsTheClientSentThem) {
  const std::string body = R"({"model":"base", "prompt":[1,2,3,4,5,6,7,8,9]})";
  CallPlan plan;
  ASSERT_TRUE(
      PlanCall(Model(), false, api::Api::kCompletions, Post("/v1/completions", body), &plan).ok());
  EXPECT_EQ(plan.EngineBody(engines::EngineKind::kVllm), body);  // the very bytes
  std::vector<uint64_t> expected;
  const std::vector<uint32_t> ids{1, 2, 3, 4, 5, 6, 7, 8, 9};
  kv::AppendLocalBlockHashes(ids, 4, kv::BlockHashSeed(), false, expected);
  EXPECT_EQ(plan.local_hashes, expected);  // two full blocks
  EXPECT_TRUE(plan.eagle_hashes.empty());
  ASSERT_EQ(plan.forward_headers.size(), 1u);
  EXPECT_EQ(plan.forward_headers[0].second, "abc");
}

TEST(CallPlan, AdaptersSeedTheHashesUnknownModelsAreNotFound) {
  CallPlan plan;
  ASSERT_TRUE(PlanCall(Model(), true, api::Api::kCompletions,
                       Post("/v1/completions", R"({"model":"lora-a","prompt":[1,2,3,4,5]})"), &plan)
                  .ok());
  std::vector<uint64_t> expected;
  const std::vector<uint32_t> ids{1, 2, 3, 4, 5};
  kv::AppendLocalBlockHashes(ids, 4, kv::BlockHashSeed("lora-a"), false, expected);
  EXPECT_EQ(plan.local_hashes, expected);
  EXPECT_EQ(plan.eagle_hashes.size(), 1u);  // EAGLE windows: one token wider

  CallPlan unknown;
  const Status s = PlanCall(Model(), false, api::Api::kCompletions,
                            Post("/v1/completions", R"({"model":"nope","prompt":[1]})"), &unknown);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  CallPlan bad;
  EXPECT_EQ(
      PlanCall(Model(), false, api::Api::kCompletions, Post("/v1/completions", "{"), &bad).code(),
      StatusCode::kInvalidArgument);
}

TEST(CallPlan, RoutedExpertsAskedInEachEnginesOwnWayAndNvextRemoved) {
  CallPlan plan;
  ASSERT_TRUE(PlanCall(Model(), false, api::Api::kChat,
                       Post("/v1/chat/completions",
                            R"({"messages":[{"role":"user","content":"x"}],"stream":true,
                                "stream_options":{"continuous_usage_stats":false},
                                "nvext":{"extra_fields":["routed_experts"],
                                         "routed_experts_start":2}})"),
                       &plan)
                  .ok());
  EXPECT_TRUE(plan.drop_usage);
  const json::object vllm = json::parse(plan.EngineBody(engines::EngineKind::kVllm)).as_object();
  EXPECT_FALSE(vllm.contains("nvext"));
  EXPECT_EQ(vllm.at("return_routed_experts"), true);
  EXPECT_EQ(vllm.at("routed_experts_prompt_start"), 2);
  EXPECT_EQ(vllm.at("stream_options"),
            json::parse(R"({"continuous_usage_stats":false,"include_usage":true})"));
  const json::object sglang =
      json::parse(plan.EngineBody(engines::EngineKind::kSglang)).as_object();
  EXPECT_EQ(sglang.at("routed_experts_start_len"), 2);
  EXPECT_FALSE(sglang.contains("routed_experts_prompt_start"));
}

TEST(CallPlan, DeeplyNestedToolSchemasAreReadUpToALimit) {
  auto nested = [](int depth) {
    std::string schema = "{}";
    for (int i = 0; i < depth; ++i)
      schema = R"({"type":"object","properties":{"x":)" + schema + "}}";
    return R"({"prompt":[1,2,3],"tools":[)" + schema + "]}";
  };
  CallPlan real;
  EXPECT_TRUE(
      PlanCall(Model(), false, api::Api::kCompletions, Post("/v1/completions", nested(40)), &real)
          .ok());
  CallPlan absurd;
  EXPECT_EQ(PlanCall(Model(), false, api::Api::kCompletions, Post("/v1/completions", nested(200)),
                     &absurd)
                .code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvgate::gateway
