// api/response_rewriter: engine responses turned into the client's, with nvext.
#include "api/response_rewriter.h"

#include <gtest/gtest.h>

#include "common/base64.h"

namespace kvgate::api {
namespace {

namespace json = boost::json;

RewriteOptions Options() {
  RewriteOptions o;
  o.extra.worker_id = o.extra.cached_blocks = o.extra.routed_experts = true;
  o.experts_layers = 1;
  o.experts_top_k = 1;
  o.worker_id = "w3";
  o.dp_rank = 1;
  o.cached_blocks = 5;
  return o;
}

std::string Int32Base64(std::initializer_list<int32_t> v) {
  std::string bytes;
  for (int32_t x : v) bytes.append(reinterpret_cast<const char*>(&x), 4);
  return Base64Encode(bytes);
}

// Feeds `stream` in pieces of every size; returns what the client got for each.
std::vector<std::string> Rewrite(const std::string& stream, RewriteOptions options) {
  std::vector<std::string> outputs;
  for (size_t piece = 1; piece <= stream.size(); piece += 7) {
    ResponseRewriter rewriter(options);
    std::string out;
    auto write = [&](std::string s) { out += s; };
    for (size_t i = 0; i < stream.size(); i += piece) {
      rewriter.Feed(std::string_view(stream).substr(i, piece), write);
    }
    rewriter.Finish(true, write);
    EXPECT_TRUE(rewriter.experts_problem().empty()) << rewriter.experts_problem();
    outputs.push_back(out);
  }
  return outputs;
}

TEST(ResponseRewriter, SglangExpertsAfterTheFinishReasonLandInTheFinalChunk) {
  const std::string experts = Int32Base64({7, 8});  // prompt 2 + completion 1: 2 rows
  const std::string stream =
      SseEvent(R"({"choices":[{"delta":{"content":"a"},"finish_reason":null}]})") +
      SseEvent(R"({"choices":[{"delta":{},"finish_reason":"length"}]})") +
      SseEvent(R"({"choices":[],"sglext":{"routed_experts":")" + experts +
               R"(","routed_experts_start_len":0}})") +
      SseEvent(R"({"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":1}})") +
      std::string(kSseDone);
  RewriteOptions o = Options();
  o.drop_usage = true;
  for (const std::string& out : Rewrite(stream, o)) {
    SseSplitter splitter;
    std::vector<std::string> data;
    splitter.Feed(out, [&](std::string_view e) { data.push_back(SseData(e)); });
    ASSERT_EQ(data.size(), 3u) << out;  // first chunk, final chunk with nvext, [DONE]
    const json::object final_chunk = json::parse(data[1]).as_object();
    EXPECT_EQ(final_chunk.at("choices").at(0).at("finish_reason"), "length");
    const json::object& nvext = final_chunk.at("nvext").as_object();
    EXPECT_EQ(nvext.at("worker_id"), "w3");
    EXPECT_EQ(nvext.at("dp_rank"), 1);
    EXPECT_EQ(nvext.at("cached_blocks"), 5);
    EXPECT_EQ(nvext.at("routed_experts").at("data").as_string(), experts);  // the very same string
    EXPECT_EQ(nvext.at("routed_experts").at("shape"), json::parse("[2,1,1]"));
    EXPECT_EQ(data[2], "[DONE]");
    EXPECT_EQ(out.find("usage"), std::string::npos) << "the client did not ask for usage";
  }
}

TEST(ResponseRewriter, WholeBodyGetsNvextAndMissingExpertsAreAProblem) {
  ResponseRewriter rewriter(Options());
  const json::value body = json::parse(rewriter.RewriteBody(
      R"({"choices":[{"text":"a"}],"usage":{"prompt_tokens":2,"completion_tokens":1}})"));
  EXPECT_TRUE(body.at("nvext").at("routed_experts").is_null());
  EXPECT_EQ(body.at("nvext").at("worker_id"), "w3");
  EXPECT_NE(rewriter.experts_problem().find("no routed experts"), std::string::npos);
  ResponseRewriter passthrough(Options());
  EXPECT_EQ(passthrough.RewriteBody("not json"), "not json");
}

TEST(ResponseRewriter, StreamCutShortBeforeItsFinalChunkGetsNoFinalChunk) {
  ResponseRewriter rewriter(Options());
  std::string out;
  auto write = [&](std::string s) { out += s; };
  rewriter.Feed(SseEvent(R"({"choices":[{"text":"a","finish_reason":null}]})") + "data: {\"cho",
                write);
  rewriter.Finish(/*complete=*/false, write);
  EXPECT_EQ(out, SseEvent(R"({"choices":[{"text":"a","finish_reason":null}]})"));
  EXPECT_TRUE(rewriter.experts_problem().empty()) << "a failed response is counted as such";
}

}  // namespace
}  // namespace kvgate::api
