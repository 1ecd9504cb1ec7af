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

TEST(Engines, TraitsTableNamesEveryEngineOnce) {
  for (const engines::Traits& t : engines::AllEngines()) {
    EXPECT_EQ(engines::ParseEngineKind(t.name), t.kind) << t.name;
    EXPECT_EQ(engines::EngineName(t.kind), t.name);
    EXPECT_NE(engines::EngineNames().find(t.name), std::string_view::npos) << t.name;
  }
  EXPECT_EQ(engines::ParseEngineKind("trtllm"), std::nullopt);
  EXPECT_EQ(engines::TraitsOf(engines::EngineKind::kSglang).event_format,
            wire::EventFormat::kSglang);
  EXPECT_EQ(engines::TraitsOf(engines::EngineKind::kVllmLists).experts_form,
            engines::ExpertsForm::kJsonLists);
}

}  // namespace
}  // namespace kvgate
