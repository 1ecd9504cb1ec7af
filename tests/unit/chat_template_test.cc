// The chat layer's own behaviour around a render: how request values live through it. The
// output text itself is checked against Python Jinja2 by tests/py/test_template*.py.
#include "chat/chat_template.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>

#include "chat/heap.h"
#include "chat/template.h"

namespace kvgate::chat {
namespace {

std::unique_ptr<ChatTemplate> Load(const std::string& source) {
  const auto dir =
      std::filesystem::temp_directory_path() /
      ("kvgate_chat_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
       ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "chat_template.jinja") << source;
  std::unique_ptr<ChatTemplate> t;
  EXPECT_TRUE(ChatTemplate::Load(dir.string(), &t).ok());
  std::filesystem::remove_all(dir);
  return t;
}

std::string Render(const ChatTemplate& t, const std::string& request) {
  std::string prompt;
  const Status s = t.Render(boost::json::parse(request), &prompt);
  EXPECT_TRUE(s.ok()) << s.message();
  return prompt;
}

// Tool-call arguments sent as a JSON string are parsed for the template; the values it reads
// come from that parse (long strings, so a dangling view is a real read of freed memory
// under ASan).
TEST(ChatTemplate, ParsedToolArgumentsLiveThroughTheRender) {
  const auto t = Load(
      "{% for m in messages %}{% for c in m.tool_calls or [] %}"
      "{{ c.function.arguments.query }}|{{ c.function.arguments | tojson }}"
      "{% endfor %}{% endfor %}");
  const std::string query(100, 'q');
  const std::string request =
      R"({"messages": [{"role": "assistant", "content": "", "tool_calls": [{"type": "function",)"
      R"( "function": {"name": "f", "arguments": "{\"query\": \")" +
      query + R"(\"}"}}]}]})";
  EXPECT_EQ(Render(*t, request), query + "|{\"query\": \"" + query + "\"}");
}

// Request strings are viewed, not copied: they must survive `set`, loops, slicing, method
// calls and sums, and strings the template makes must outlive the expressions that made
// them.
TEST(ChatTemplate, StringsFromTheRequestAndFromTheTemplate) {
  const auto t = Load(
      "{% set first = messages[0].content %}{% set ns = namespace(parts=[]) %}"
      "{% for m in messages[::-1] %}{% set s = m.content.strip() + '!' %}"
      "{% set ns.parts = ns.parts + [s] %}{% endfor %}"
      "{{ first }}/{{ ns.parts | join(',') }}/{{ messages[1].content.split(' ')[-1] }}");
  const std::string a(40, 'a'), b = std::string(30, 'b') + " tail";
  const std::string request = R"({"messages": [{"role": "user", "content": " )" + a +
                              R"( "}, {"role": "user", "content": ")" + b + R"("}]})";
  EXPECT_EQ(Render(*t, request), " " + a + " /" + b + "!," + a + "!/tail");
}

// A long conversation makes far more values than the heap's first block holds: lists grown by
// append, strings made per message, a namespace rebound each turn. Every one of them must
// stay readable to the end of the render (ASan reads freed memory as an error).
TEST(ChatTemplate, ValuesOutliveTheHeapsFirstBlock) {
  const auto t = Load(
      "{% set ns = namespace(parts=[], last='') %}"
      "{% for m in messages %}{% set line = m.role ~ ':' ~ m.content.upper() %}"
      "{% set ns.last = line %}{% set _ = ns.parts.append(line) %}{% endfor %}"
      "{{ ns.parts | join('|') }}#{{ ns.last }}");
  std::string request = R"({"messages": [)", expected, last;
  for (int i = 0; i < 2000; ++i) {
    const std::string content = "message number " + std::to_string(i);
    request += (i ? "," : "") + std::string(R"({"role": "user", "content": ")") + content + "\"}";
    std::string upper = content;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    last = "user:" + upper;
    expected += (i ? "|" : "") + last;
  }
  request += "]}";
  EXPECT_EQ(Render(*t, request), expected + "#" + last);
}

// A template that grows a string quadratically keeps every intermediate copy in the render's
// heap; past the heap's ceiling the render fails with a clear error instead of exhausting
// memory, and a render within it is unaffected.
TEST(ChatTemplate, HeapCeilingStopsARunawayRender) {
  std::unique_ptr<Template> t;
  ASSERT_TRUE(Template::Parse("{% set ns = namespace(s='') %}{% for i in range(n) %}"
                              "{% set ns.s = ns.s ~ 'xxxxxxxxxx' %}{% endfor %}{{ ns.s|length }}",
                              &t)
                  .ok());
  auto render = [&](int64_t n, std::string* out) {
    Heap heap(1 << 20);
    Value vars = heap.MakeDict();
    vars.Set("n", Value::Int(n));
    return t->Render(vars, heap, out);
  };
  std::string out;
  ASSERT_TRUE(render(100, &out).ok());  // 50 KB in all
  EXPECT_EQ(out, "1000");
  const Status s = render(1000, &out);  // 5 MB in all
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), HeapExhausted{1 << 20}.message());
}

}  // namespace
}  // namespace kvgate::chat

namespace kvgate::chat {
namespace {

bool LoopsOverContent(std::string_view source) {
  std::unique_ptr<Template> t;
  EXPECT_TRUE(Template::Parse(source, &t).ok()) << source;
  return t && t->IteratesMessageContent();
}

TEST(ContentFormat, TemplatesThatLoopOverAMessagesContentWantParts) {
  EXPECT_TRUE(
      LoopsOverContent("{% for m in messages %}{% for p in m['content'] %}{% endfor %}"
                       "{% endfor %}"));
  EXPECT_TRUE(
      LoopsOverContent("{% for m in messages %}{% for p in m.content %}{% endfor %}"
                       "{% endfor %}"));
  EXPECT_TRUE(
      LoopsOverContent("{% set rest = messages[1:] %}{% for m in rest %}{% set c = "
                       "m.content %}{% for p in c %}{% endfor %}{% endfor %}"));
  EXPECT_FALSE(LoopsOverContent("{% for m in messages %}{{ m['content'] }}{% endfor %}"));
  EXPECT_FALSE(
      LoopsOverContent("{% for m in messages %}{% for x in m.tool_calls %}{% endfor %}"
                       "{% endfor %}"));
  EXPECT_FALSE(LoopsOverContent("{% for p in other.content %}{% endfor %}"));
}

}  // namespace
}  // namespace kvgate::chat
