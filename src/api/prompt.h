// The prompt token ids of an OpenAI / SGLang request, computed the way the engine does:
// chat renders the template and tokenizes without adding special tokens (the template
// placed them); completions tokenize text with special tokens; token-id prompts are used
// as they are. The gateway hashes these ids to route; the mocker serves them.
#pragma once

#include <boost/json/fwd.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kvgate::chat {
class ChatTemplate;
}
namespace kvgate::tokenizer {
class Tokenizer;
class PrefixCache;
}  // namespace kvgate::tokenizer

namespace kvgate::api {

enum class Api : uint8_t { kChat, kCompletions, kGenerate };

// Without a tokenizer, text is its UTF-8 bytes as ids; without a template, chat is a fixed
// plain format ("<|role|>\ncontent\n" per message, then "<|assistant|>\n"). Both sides of
// a test setup without a model dir therefore still agree.
struct PromptModel {
  const tokenizer::Tokenizer* tokenizer = nullptr;
  const chat::ChatTemplate* chat_template = nullptr;
  // Rendered chats go through it when given (long conversations tokenized past what an
  // earlier turn shares); its ids are the tokenizer's.
  tokenizer::PrefixCache* prefix_cache = nullptr;
};

// A model directory's tokenizer.json and chat template, loaded once and shared by whoever
// serves the model (the gateway and its in-process mock workers).
struct ModelFiles {
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer;
  std::shared_ptr<const chat::ChatTemplate> chat_template;  // null: the model has none
  std::shared_ptr<tokenizer::PrefixCache> prefix_cache;     // null: none
  PromptModel prompt_model() const {
    return {tokenizer.get(), chat_template.get(), prefix_cache.get()};
  }
};
// Fails when tokenizer.json cannot be loaded or the chat template does not parse; a missing
// template is logged and left null (chat then routes on a plain rendering).
Status LoadModelFiles(const std::string& dir, ModelFiles* out);

// What the prompt's ids are when they are not simply the whole prompt.
struct PromptPartial {
  // "media": the ids stop before the first media part (its tokens are the engine's own).
  std::string_view partial;
  // "template" or "tokenize": which step failed, when the error is kFailedPrecondition.
  std::string_view failed;
};

// A batch of completion prompts yields the first prompt's ids.
// Fails (the message is a 400 for the client) on a missing or ill-typed prompt field, an
// invalid token id or a template error on a malformed conversation (kInvalidArgument); a
// template that fails on a well-formed one, or text the tokenizer cannot take, is
// kFailedPrecondition (`note->failed` says which). An empty prompt is not an error here.
Status PromptTokens(Api api, const boost::json::value& body, const PromptModel& model,
                    std::vector<uint32_t>* ids, PromptPartial* note = nullptr);

}  // namespace kvgate::api
