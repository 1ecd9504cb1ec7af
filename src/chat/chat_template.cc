#include "chat/chat_template.h"

#include <fmt/format.h>

#include <boost/json.hpp>
#include <deque>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "chat/heap.h"
#include "chat/messages.h"

namespace kvgate::chat {
namespace {

namespace json = boost::json;

bool ReadFile(const std::filesystem::path& path, std::string* out) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream s;
  s << in.rdbuf();
  *out = s.str();
  return true;
}

// A special token is a string or an AddedToken object ({"content": ...}); none: None.
std::optional<std::string> TokenString(const json::object& config, std::string_view key) {
  const json::value* v = config.if_contains(key);
  if (v == nullptr || v->is_null()) return std::nullopt;
  if (v->is_string()) return std::string(v->as_string());
  if (v->is_object() && v->as_object().contains("content") &&
      v->as_object().at("content").is_string()) {
    return std::string(v->as_object().at("content").as_string());
  }
  return std::nullopt;
}

}  // namespace

Status ChatTemplate::Load(const std::string& model_dir, std::unique_ptr<ChatTemplate>* out) {
  const std::filesystem::path dir(model_dir);
  std::string source, tool_use_source, config_text;
  json::object config;
  if (ReadFile(dir / "tokenizer_config.json", &config_text)) {
    boost::system::error_code ec;
    json::value v = json::parse(config_text, ec);
    if (ec || !v.is_object()) return Status::Error("tokenizer_config.json is not a JSON object");
    config = v.as_object();
  }
  if (const json::value* t = config.if_contains("chat_template")) {
    if (t->is_string()) {
      source = std::string(t->as_string());
    } else if (t->is_array()) {
      for (const json::value& named : t->as_array()) {
        const json::object* o = named.if_object();
        if (o == nullptr || !o->contains("name") || !o->contains("template") ||
            !o->at("template").is_string()) {
          continue;
        }
        const std::string_view text = o->at("template").as_string();
        if (o->at("name") == "tool_use") tool_use_source = text;
        if (source.empty() || o->at("name") == "default") source = text;
      }
    }
  }
  if (source.empty() && !ReadFile(dir / "chat_template.jinja", &source)) {
    return Status::NotFound(fmt::format("{} has no chat template", model_dir));
  }
  auto ct = std::make_unique<ChatTemplate>();
  if (Status s = Template::Parse(source, &ct->template_); !s.ok()) return s;
  if (!tool_use_source.empty() && tool_use_source != source) {
    Status s = Template::Parse(tool_use_source, &ct->tool_use_template_);
    if (!s.ok()) return Status::Error("the tool_use chat template: " + s.message());
    ct->tool_use_parts_ = ct->tool_use_template_->IteratesMessageContent();
  }
  ct->parts_ = ct->template_->IteratesMessageContent();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    ct->special_tokens_.emplace_back(key, TokenString(config, key));
  }
  *out = std::move(ct);
  return Status::Ok();
}

namespace {

// Stands for each media part in RenderBeforeMedia: text no conversation holds (C0 controls
// around a name), so its first occurrence in the output is where the first media part went.
constexpr std::string_view kMediaMarker = "\x01\x02kvgate-media\x02\x01";

}  // namespace

Status ChatTemplate::Render(const json::value& request, std::string* prompt) const {
  return ApplyTo(request, nullptr, prompt);
}

Status ChatTemplate::RenderBeforeMedia(const json::value& request, std::string* prompt,
                                       bool* cut) const {
  MediaMarker media{kMediaMarker};
  Status s = ApplyTo(request, &media, prompt);
  // (Only a conversation with media is searched: most have none.)
  const size_t at = s.ok() && media.used ? prompt->find(kMediaMarker) : std::string::npos;
  *cut = at != std::string::npos;
  if (*cut) prompt->resize(at);
  return s;
}

Status ChatTemplate::ApplyTo(const json::value& request, MediaMarker* media,
                             std::string* prompt) const {
  const json::object* body_ptr = request.if_object();
  if (body_ptr == nullptr) return Status::InvalidArgument("the request must be a JSON object");
  const json::object& body = *body_ptr;
  const json::value* messages = body.if_contains("messages");
  if (messages == nullptr || !messages->is_array()) {
    return Status::InvalidArgument("'messages' must be a list");
  }
  Heap heap;
  try {
    return ApplyTo(body, *messages, heap, media, prompt);
  } catch (const HeapExhausted& e) {  // (the template's own render catches it itself)
    return Status::Error(e.message());
  }
}

Status ChatTemplate::ApplyTo(const json::object& body, const json::value& messages, Heap& heap,
                             MediaMarker* media, std::string* prompt) const {
  Value vars = heap.MakeDict(16);
  const json::value* tools = body.if_contains("tools");
  const bool use_tools_template = tool_use_template_ && tools && !tools->is_null();
  const Template& tmpl = use_tools_template ? *tool_use_template_ : *template_;
  // Values view the JSON's strings: parsed tool arguments are kept here until the end.
  std::deque<json::value> parsed_arguments;
  Value msgs;
  if (Status s = TemplateMessages(heap, messages, use_tools_template ? tool_use_parts_ : parts_,
                                  media, parsed_arguments, &msgs);
      !s.ok()) {
    return s;
  }
  vars.Set("messages", msgs);
  vars.Set("tools", tools && !tools->is_null() ? Value::FromJson(heap, *tools) : Value::None());
  vars.Set("documents", Value::None());
  const json::value* agp = body.if_contains("add_generation_prompt");
  vars.Set("add_generation_prompt", Value::Bool(agp && agp->is_bool() ? agp->as_bool() : true));
  for (const auto& [key, text] : special_tokens_) {
    vars.Set(key, text ? Value::StringView(*text) : Value::None());
  }
  if (const json::value* kwargs = body.if_contains("chat_template_kwargs");
      kwargs && kwargs->is_object()) {
    for (const auto& [key, value] : kwargs->as_object()) {
      vars.Set(key, Value::FromJson(heap, value));
    }
  }
  return tmpl.Render(vars, heap, prompt);
}

}  // namespace kvgate::chat
