// engines: the traits table and the response readers.
#include "engines/engines.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace kvgate {
namespace {

namespace json = boost::json;
TEST(Engines, AskAndTakeRoutedExperts) {
  json::object body{{"prompt", "x"}};
  engines::AskForRoutedExperts(engines::EngineKind::kVllm, 5, body);
  EXPECT_EQ(body.at("return_routed_experts"), true);
  EXPECT_EQ(body.at("routed_experts_prompt_start"), 5);
  json::object sg;
  engines::AskForRoutedExperts(engines::EngineKind::kSglang, 2, sg);
  EXPECT_EQ(sg.at("routed_experts_start_len"), 2);

  std::vector<engines::ChoiceExperts> found;
  uint64_t start = 0;
  json::object vllm =
      json::parse(
          R"({"choices":[{"text":"a","routed_experts":"k05V","routed_experts_prompt_start":4}],
          "usage":{"prompt_tokens":9,"completion_tokens":2}})")
          .as_object();
  ASSERT_TRUE(engines::TakeRoutedExperts(vllm, found, &start));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].native, "k05V");
  EXPECT_EQ(found[0].choice, 0u);
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
  found.clear();
  ASSERT_TRUE(engines::TakeRoutedExperts(sglang, found, &start));
  EXPECT_EQ(start, 1u);
  EXPECT_FALSE(sglang.contains("sglext"));
  json::object none = json::parse(R"({"choices":[{"text":"a"}]})").as_object();
  found.clear();
  EXPECT_FALSE(engines::TakeRoutedExperts(none, found, &start));
  // n > 1: each choice's own, by its index (vLLM in the choice, SGLang in its sglext).
  json::object many = json::parse(R"({"choices":[{"index":1,"routed_experts":"B"},
                                 {"index":0,"sglext":{"routed_experts":"A"}}]})")
                          .as_object();
  ASSERT_TRUE(engines::TakeRoutedExperts(many, found, &start));
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].choice, 1u);
  EXPECT_EQ(found[0].native, "B");
  EXPECT_EQ(found[1].choice, 0u);
  EXPECT_EQ(found[1].native, "A");
  EXPECT_FALSE(many.at("choices").as_array()[1].as_object().contains("sglext"));
}

TEST(Engines, TraitsTableNamesEveryEngineOnce) {
  for (const engines::Traits& t : engines::AllEngines()) {
    EXPECT_EQ(engines::ParseEngineKind(t.name), t.kind) << t.name;
    EXPECT_EQ(engines::EngineName(t.kind), t.name);
    EXPECT_NE(engines::EngineNames().find(t.name), std::string_view::npos) << t.name;
  }
  EXPECT_EQ(engines::ParseEngineKind("tgi"), std::nullopt);
  EXPECT_TRUE(engines::TraitsOf(engines::EngineKind::kTrtllm).events_per_rank);
  EXPECT_EQ(engines::OffsetPort("tcp://10.0.0.1:5557", 2), "tcp://10.0.0.1:5559");
  EXPECT_EQ(engines::OffsetPort("ipc:///tmp/kv", 2), "ipc:///tmp/kv");
  // TensorRT-LLM returns no routed experts: asking adds nothing to its body.
  json::object body;
  engines::AskForRoutedExperts(engines::EngineKind::kTrtllm, 3, body);
  EXPECT_TRUE(body.empty());
  EXPECT_EQ(engines::TraitsOf(engines::EngineKind::kSglang).event_format,
            wire::EventFormat::kSglang);
  EXPECT_EQ(engines::TraitsOf(engines::EngineKind::kVllmLists).experts_form,
            engines::ExpertsForm::kJsonLists);
}

}  // namespace
}  // namespace kvgate
