// api/request: one typed reading of inference requests for the gateway and the mocker.
#include "api/request.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace kvgate::api {
namespace {

namespace json = boost::json;

Status Parse(Api api, std::string_view body, InferenceRequest* r) {
  return ParseInferenceRequest(api, json::parse(body), PromptModel{}, r);
}

TEST(Request, ReadsWhatSteersServing) {
  InferenceRequest r;
  ASSERT_TRUE(Parse(Api::kChat,
                    R"({"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,
                        "stream_options":{"include_usage":true},"max_tokens":9,
                        "max_completion_tokens":7,"cache_salt":"s",
                        "nvext":{"extra_fields":["worker_id","routed_experts"],
                                 "routed_experts_start":3}})",
                    &r)
                  .ok());
  EXPECT_EQ(r.api, Api::kChat);
  EXPECT_EQ(r.model, "m");
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.max_tokens, 7u);  // max_completion_tokens wins, as in OpenAI's API
  EXPECT_EQ(r.cache_salt, "s");
  EXPECT_TRUE(r.has_nvext);
  EXPECT_TRUE(r.extra.worker_id);
  EXPECT_FALSE(r.extra.cached_blocks);
  EXPECT_TRUE(r.extra.routed_experts);
  EXPECT_EQ(r.routed_experts_start, 3u);
  // Without a model dir, chat is a plain rendering tokenized as bytes.
  EXPECT_EQ(std::string(r.prompt.begin(), r.prompt.end()), "<|user|>\nhi\n<|assistant|>\n");
}

TEST(Request, SglangGenerateAndItsRoutedExpertsFlag) {
  InferenceRequest r;
  ASSERT_TRUE(Parse(Api::kGenerate,
                    R"({"input_ids":[5,6,7],"sampling_params":{"max_new_tokens":4},
                        "return_routed_experts":true})",
                    &r)
                  .ok());
  EXPECT_EQ(r.prompt, (std::vector<uint32_t>{5, 6, 7}));
  EXPECT_EQ(r.max_tokens, 4u);
  EXPECT_TRUE(r.extra.routed_experts);
  EXPECT_FALSE(r.has_nvext);
}

TEST(Request, BadInputIsInvalidArgumentWithTheReason) {
  const struct {
    Api api;
    std::string_view body;
    std::string_view reason;
  } cases[] = {
      {Api::kCompletions, R"([1])", "JSON object"},
      {Api::kCompletions, R"({"prompt":"x","stream":"yes"})", "'stream' must be a boolean"},
      {Api::kCompletions, R"({"prompt":"x","model":3})", "'model' must be a string"},
      {Api::kCompletions, R"({"prompt":"x","max_tokens":0})", "'max_tokens' must be a positive"},
      {Api::kCompletions, R"({"prompt":"x","nvext":[]})", "'nvext' must be an object"},
      {Api::kCompletions, R"({"prompt":"x","nvext":{"extra_fields":[1]}})", "hold strings"},
      {Api::kCompletions, R"({"prompt":"x","nvext":{"routed_experts_start":-1}})", "non-negative"},
      {Api::kCompletions, R"({"prompt":[1,-2]})", "token ids"},
      {Api::kCompletions, R"({"prompt":""})", "the prompt is empty"},
      {Api::kChat, R"({"messages":[]})", "'messages' must be a non-empty list"},
      {Api::kGenerate, R"({"sampling_params":3,"input_ids":[1]})", "'sampling_params'"},
  };
  for (const auto& c : cases) {
    InferenceRequest r;
    const Status s = Parse(c.api, c.body, &r);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.body;
    EXPECT_NE(s.message().find(c.reason), std::string::npos) << c.body << ": " << s.message();
  }
}

}  // namespace
}  // namespace kvgate::api
