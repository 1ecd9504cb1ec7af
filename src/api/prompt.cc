#include "api/prompt.h"

#include <fmt/format.h>

#include <boost/json.hpp>

#include "api/request_fields.h"
#include "chat/chat_template.h"
#include "common/log.h"
#include "tokenizer/prefix_cache.h"
#include "tokenizer/tokenizer.h"

namespace kvgate::api {
namespace {

namespace json = boost::json;

Status TextTokens(std::string_view text, bool add_special_tokens, const PromptModel& model,
                  std::vector<uint32_t>* ids, PromptPartial* note) {
  if (model.tokenizer == nullptr) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
    ids->assign(bytes, bytes + text.size());
    return Status::Ok();
  }
  Status s;
  if (model.prefix_cache != nullptr) {
    // A long completions prompt that grows (a conversation rendered by the client) reuses
    // its last version's ids like a chat's; the BOS and such go around them after.
    s = model.prefix_cache->Encode(text, ids);
    if (s.ok() && add_special_tokens) model.tokenizer->AddSpecialTokens(ids);
  } else {
    s = model.tokenizer->Encode(text, add_special_tokens, ids);
  }
  if (s.ok()) return s;
  if (note != nullptr) note->failed = "tokenize";
  return Status(StatusCode::kFailedPrecondition, fmt::format("tokenizer: {}", s.message()));
}

Status TokenIds(const json::array& a, std::string_view what, std::vector<uint32_t>* ids) {
  ids->clear();
  ids->reserve(a.size());
  for (const json::value& v : a) {
    if (!v.is_int64() || v.as_int64() < 0 || v.as_int64() > UINT32_MAX) {
      return Status::InvalidArgument(
          fmt::format("'{}' must be token ids (non-negative integers)", what));
    }
    ids->push_back(static_cast<uint32_t>(v.as_int64()));
  }
  return Status::Ok();
}

std::string ContentText(const json::value& content) {
  if (content.is_string()) return std::string(content.as_string());
  std::string text;
  if (content.is_array()) {
    for (const json::value& part : content.as_array()) {
      const json::object* o = part.if_object();
      if (o && o->contains("text") && o->at("text").is_string()) {
        text += std::string(o->at("text").as_string());
      }
    }
  }
  return text;
}

Status PlainChat(const json::array& messages, std::string* text) {
  for (const json::value& m : messages) {
    const json::object* mo = m.if_object();
    if (mo == nullptr || !mo->contains("role") || !mo->at("role").is_string()) {
      return Status::InvalidArgument("each message needs a 'role' string");
    }
    *text += fmt::format("<|{}|>\n{}\n", std::string_view(mo->at("role").as_string()),
                         mo->contains("content") ? ContentText(mo->at("content")) : "");
  }
  *text += "<|assistant|>\n";
  return Status::Ok();
}

}  // namespace

Status PromptTokens(Api api, const json::value& request, const PromptModel& model,
                    std::vector<uint32_t>* ids, PromptPartial* note) {
  ids->clear();
  if (!request.is_object()) return Status::InvalidArgument("the body must be a JSON object");
  const json::object& body = request.as_object();
  switch (api) {
    case Api::kCompletions: {
      const json::value* prompt = Field(body, "prompt");
      if (prompt == nullptr) return Status::InvalidArgument("'prompt' is required");
      if (prompt->is_string()) return TextTokens(prompt->as_string(), true, model, ids, note);
      if (prompt->is_array()) {
        const json::array& a = prompt->as_array();
        // A batch of prompts: the engine serves them together; the first one routes.
        if (!a.empty() && a[0].is_string())
          return TextTokens(a[0].as_string(), true, model, ids, note);
        if (!a.empty() && a[0].is_array()) return TokenIds(a[0].as_array(), "prompt", ids);
        return TokenIds(a, "prompt", ids);
      }
      return Status::InvalidArgument("'prompt' must be a string or a list of token ids");
    }
    case Api::kChat: {
      const json::value* messages = Field(body, "messages");
      if (messages == nullptr || !messages->is_array() || messages->as_array().empty()) {
        return Status::InvalidArgument("'messages' must be a non-empty list");
      }
      std::string text;
      bool media_cut = false;
      if (model.chat_template != nullptr) {
        // kInvalidArgument: the messages are malformed; anything else: the template failed
        // on a well-formed conversation (kFailedPrecondition).
        if (Status s = model.chat_template->RenderBeforeMedia(request, &text, &media_cut);
            !s.ok()) {
          if (s.code() == StatusCode::kInvalidArgument) return s;
          if (note != nullptr) note->failed = "template";
          return Status(StatusCode::kFailedPrecondition, s.message());
        }
      } else if (Status s = PlainChat(messages->as_array(), &text); !s.ok()) {
        return s;
      }
      if (Status s = TextTokens(text, false, model, ids, note); !s.ok() || !media_cut) return s;
      // The text ends where a media part's own text began; its last token could have merged
      // with what follows there (" " + "<image>"...): only the ids before it are sure.
      if (!ids->empty()) ids->pop_back();
      if (note != nullptr) note->partial = "media";
      return Status::Ok();
    }
    case Api::kGenerate: {
      if (const json::value* input_ids = Field(body, "input_ids")) {
        if (!input_ids->is_array())
          return Status::InvalidArgument("'input_ids' must be a list of token ids");
        return TokenIds(input_ids->as_array(), "input_ids", ids);
      }
      if (const json::value* text = Field(body, "text"); text && text->is_string()) {
        return TextTokens(text->as_string(), true, model, ids, note);
      }
      return Status::InvalidArgument("'input_ids' or 'text' is required");
    }
  }
  return Status::InvalidArgument("unknown API");
}

Status LoadModelFiles(const std::string& dir, ModelFiles* out) {
  std::unique_ptr<tokenizer::Tokenizer> tok;
  if (Status s = tokenizer::Tokenizer::Load(dir + "/tokenizer.json", &tok); !s.ok()) return s;
  out->tokenizer = std::move(tok);
  std::unique_ptr<chat::ChatTemplate> tmpl;
  Status s = chat::ChatTemplate::Load(dir, &tmpl);
  if (s.code() == StatusCode::kNotFound) {
    Log(LogLevel::kWarn, "{}; chat requests use a plain rendering", s.message());
    return Status::Ok();
  }
  // A template the engine cannot use either: refuse to start rather than fail every request.
  if (!s.ok()) return Status::Error(fmt::format("{}: chat template: {}", dir, s.message()));
  out->chat_template = std::move(tmpl);
  return Status::Ok();
}

}  // namespace kvgate::api
