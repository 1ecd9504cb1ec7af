// A model's chat template (from tokenizer_config.json or chat_template.jinja) and the
// variables transformers/vLLM pass it, turning an OpenAI chat request into the prompt text.
#pragma once

#include <boost/json/fwd.hpp>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "chat/template.h"
#include "common/status.h"

namespace kvgate::chat {

struct MediaMarker;

class ChatTemplate {
 public:
  // Reads DIR/tokenizer_config.json (chat_template: a string, or a list of named templates)
  // or DIR/chat_template.jinja. Of named templates, as transformers picks: "tool_use" for a
  // request with tools when there is one, else "default" (else the first). NotFound when the
  // model has no template; a template that does not parse is an error naming its line.
  static Status Load(const std::string& model_dir, std::unique_ptr<ChatTemplate>* out);

  // `request`: an OpenAI chat request body. Errors (bad request, raise_exception, template
  // errors) are a Status with the message the gateway returns as HTTP 400.
  Status Render(const boost::json::value& request, std::string* prompt) const;
  // The prompt as far as kvgate can know it: the rendered text up to where the first media
  // part (image, audio, video) goes, whose tokens only the engine's processor knows.
  // `*cut` says whether there was one (else the whole prompt, as Render).
  Status RenderBeforeMedia(const boost::json::value& request, std::string* prompt, bool* cut) const;

 private:
  // Render's work: the request's shape checked, then the template's variables from it and
  // the render, the values living in one heap; media parts become `media`'s text when it is
  // given. (Not named Render*: the benchmark's callgrind command counts from the outer Render.)
  Status ApplyTo(const boost::json::value& request, MediaMarker* media, std::string* prompt) const;
  Status ApplyTo(const boost::json::object& body, const boost::json::value& messages, Heap& heap,
                 MediaMarker* media, std::string* prompt) const;

  std::unique_ptr<Template> template_;
  std::unique_ptr<Template> tool_use_template_;  // null: template_ for every request
  // Whether each template wants message content as a list of parts (else a string).
  bool parts_ = false;
  bool tool_use_parts_ = false;
  // bos_token, eos_token, unk_token, pad_token; nullopt: None.
  std::vector<std::pair<std::string, std::optional<std::string>>> special_tokens_;
};

}  // namespace kvgate::chat
