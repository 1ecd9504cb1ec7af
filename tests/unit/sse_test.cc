// api/sse: writing and splitting server-sent events.
#include "api/sse.h"

#include <gtest/gtest.h>

namespace kvgate {
namespace {

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

TEST(SseEvent, WritesOneDataLineAndABlankLine) {
  EXPECT_EQ(api::SseEvent("{\"a\":1}"), "data: {\"a\":1}\n\n");
  api::SseSplitter splitter;
  std::vector<std::string> data;
  splitter.Feed(api::SseEvent("x") + std::string(api::kSseDone),
                [&](std::string_view e) { data.push_back(api::SseData(e)); });
  EXPECT_EQ(data, (std::vector<std::string>{"x", "[DONE]"}));
}

}  // namespace
}  // namespace kvgate
