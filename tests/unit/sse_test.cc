// api/sse: writing and splitting server-sent events.
#include "api/sse.h"

#include <gtest/gtest.h>

#include <random>

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

// The events of a whole stream, found the plain way (earliest "\n\n" or "\r\n\r\n").
std::vector<std::string> Reference(const std::string& stream, std::string* rest) {
  std::vector<std::string> events;
  size_t begin = 0;
  for (;;) {
    const size_t lf = stream.find("\n\n", begin), crlf = stream.find("\r\n\r\n", begin);
    const size_t end = std::min(lf, crlf);
    if (end == std::string::npos) break;
    events.push_back(stream.substr(begin, end - begin));
    begin = end + (end == crlf ? 4 : 2);
  }
  *rest = stream.substr(begin);
  return events;
}

TEST(SseSplitter, AnyCutOfAnyStreamGivesThePlainSplit) {
  std::mt19937 rng(7);
  const char alphabet[] = {'a', ':', '\n', '\r'};
  for (int round = 0; round < 2000; ++round) {
    std::string stream;
    const size_t length = rng() % 60;
    for (size_t i = 0; i < length; ++i) stream += alphabet[rng() % 4];
    std::string rest;
    const std::vector<std::string> want = Reference(stream, &rest);
    api::SseSplitter splitter;
    std::vector<std::string> got;
    for (size_t i = 0; i < stream.size();) {
      const size_t piece = 1 + rng() % 5;
      splitter.Feed(std::string_view(stream).substr(i, piece),
                    [&](std::string_view e) { got.emplace_back(e); });
      i += piece;
    }
    EXPECT_EQ(got, want) << testing::PrintToString(stream);
    EXPECT_EQ(splitter.pending(), rest);
  }
}

}  // namespace
}  // namespace kvgate
