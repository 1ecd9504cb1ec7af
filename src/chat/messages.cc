#include "chat/messages.h"

#include <fmt/format.h>

#include <boost/json.hpp>
#include <string>
#include <string_view>

#include "chat/python_ops.h"

namespace kvgate::chat {
namespace {

namespace json = boost::json;

// One content part: its text (text-like parts), or its modality (media parts).
struct Part {
  bool is_text = false;
  std::string_view text;
  std::string_view modality;  // "image", "audio", "video"
};

std::string_view MediaModality(std::string_view type) {
  if (type == "image_url" || type == "input_image" || type == "image_pil" ||
      type == "image_embeds") {
    return "image";
  }
  if (type == "audio_url" || type == "input_audio" || type == "audio_embeds") return "audio";
  if (type == "video_url") return "video";
  return {};
}

// false: the part is skipped (a text part without text); errors as vLLM rejects them.
Status ReadPart(const json::value& v, Part* part, bool* keep) {
  *keep = true;
  if (v.is_string()) {
    *part = {true, v.get_string(), {}};
    return Status::Ok();
  }
  const json::object* o = v.if_object();
  if (o == nullptr) return Status::InvalidArgument("a content part must be a string or an object");
  const json::value* type = o->if_contains("type");
  if (type == nullptr || type->is_null()) {
    for (std::string_view key : {"image_url", "audio_url", "video_url", "input_audio"}) {
      if (o->contains(key)) {
        *part = {false, {}, MediaModality(key)};
        return Status::Ok();
      }
    }
    return Status::InvalidArgument("Missing 'type' field in multimodal part.");
  }
  if (!type->is_string())
    return Status::InvalidArgument("Invalid 'type' field in multimodal part.");
  const std::string_view t = type->get_string();
  std::string_view field;
  if (t == "text" || t == "input_text" || t == "output_text") field = "text";
  if (t == "refusal") field = "refusal";
  if (t == "thinking") field = "thinking";
  if (!field.empty()) {
    const json::value* text = o->if_contains(field);
    if (text == nullptr || !text->is_string()) {
      *keep = false;  // (vLLM skips a text part whose text is missing)
      return Status::Ok();
    }
    *part = {true, text->get_string(), {}};
    return Status::Ok();
  }
  if (std::string_view modality = MediaModality(t); !modality.empty()) {
    *part = {false, {}, modality};
    return Status::Ok();
  }
  return Status::InvalidArgument(fmt::format("Unsupported chat content part type: '{}'", t));
}

Value TextPart(Heap& heap, std::string_view text) {
  Value d = heap.MakeDict(2);
  d.Set("type", Value::StringView("text"));
  d.Set("text", Value::StringView(text));
  return d;
}

std::string JoinTexts(const std::vector<Part>& parts) {
  std::string out;
  bool first = true;
  for (const Part& p : parts) {
    if (!p.is_text) continue;
    if (!first) out += '\n';
    out += p.text;
    first = false;
  }
  return out;
}

// Tool-call arguments given as a JSON string become the object they hold (an unparsable
// string, or anything but an object or a list, becomes {}).
void ParseArguments(Heap& heap, Value& calls, std::deque<json::value>& parsed) {
  for (Value& call : *calls.list()) {
    Value fn = call.Get("function");
    if (fn.kind != Value::Kind::kDict) continue;
    const Value args = fn.Get("arguments");
    if (args.is_string()) {
      boost::system::error_code ec;
      json::parse_options deep;
      deep.max_depth = 256;  // as the request itself may nest (api/request_fields.h)
      json::value v = json::parse(args.text, ec, {}, deep);
      fn.Set("arguments",
             ec ? heap.MakeDict() : Value::FromJson(heap, parsed.emplace_back(std::move(v))));
    } else if (args.kind != Value::Kind::kDict && args.kind != Value::Kind::kList) {
      fn.Set("arguments", heap.MakeDict());
    }
  }
}

}  // namespace

Status TemplateMessages(Heap& heap, const json::value& messages, bool content_as_parts,
                        MediaMarker* media, std::deque<json::value>& parsed, Value* out) {
  const json::array& in = messages.as_array();
  List list;
  list.reserve(in.size());
  for (const json::value& mv : in) {
    const json::object* m = mv.if_object();
    if (m == nullptr) return Status::InvalidArgument("each message must be an object");
    const json::value* role_v = m->if_contains("role");
    if (role_v == nullptr || !role_v->is_string()) {
      return Status::InvalidArgument("each message needs a 'role' string");
    }
    const std::string_view role = role_v->get_string();
    // Content as parts.
    std::vector<Part> parts;
    const json::value* content = m->if_contains("content");
    if (content != nullptr && content->is_string()) {
      parts.push_back({true, content->get_string(), {}});
    } else if (content != nullptr && content->is_array()) {
      for (const json::value& pv : content->get_array()) {
        Part p;
        bool keep;
        if (Status s = ReadPart(pv, &p, &keep); !s.ok()) return s;
        if (!p.is_text && media != nullptr) {
          p = {true, media->text, {}};
          media->used = true;
        }
        if (keep) parts.push_back(p);
      }
    } else if (content != nullptr && !content->is_null()) {
      return Status::InvalidArgument("a message's content must be a string or a list of parts");
    }
    Value msg = heap.MakeDict(8);
    msg.Set("role", Value::StringView(role));
    bool text_only = true;
    for (const Part& p : parts) text_only &= p.is_text;
    // Tool results made of text parts are a string even for templates that loop over parts.
    if (!content_as_parts || (role == "tool" && text_only)) {
      msg.Set("content", heap.MakeString(JoinTexts(parts)));
    } else {
      List items;
      for (const Part& p : parts) {
        if (p.is_text) {
          items.push_back(TextPart(heap, p.text));
        } else {
          Value media = heap.MakeDict(1);
          media.Set("type", Value::StringView(p.modality));
          items.push_back(media);
        }
      }
      msg.Set("content", heap.MakeList(std::move(items)));
    }
    if (role == "assistant") {
      if (const json::value* calls = m->if_contains("tool_calls"); calls && !calls->is_null()) {
        Value v = Value::FromJson(heap, *calls);
        if (v.kind == Value::Kind::kList) {  // (FromJson made it: ours to change)
          ParseArguments(heap, v, parsed);
          if (!v.list()->empty()) msg.Set("tool_calls", v);  // (empty: the plain path)
        } else {
          msg.Set("tool_calls", v);
        }
      }
      if (const json::value* r = m->if_contains("reasoning"); r && !r->is_null()) {
        msg.Set("reasoning", Value::FromJson(heap, *r));
        msg.Set("reasoning_content", Value::FromJson(heap, *r));
      }
    } else if (role == "tool") {
      if (const json::value* id = m->if_contains("tool_call_id")) {
        msg.Set("tool_call_id", Value::FromJson(heap, *id));
      }
    }
    for (std::string_view key : {"name", "task"}) {
      if (const json::value* v = m->if_contains(key); v && v->is_string()) {
        msg.Set(key == "name" ? "name" : "task", Value::StringView(v->get_string()));
      }
    }
    if (role == "developer") {
      const json::value* tools = m->if_contains("tools");
      msg.Set("tools", tools ? Value::FromJson(heap, *tools) : Value::None());
    }
    list.push_back(msg);
  }
  *out = heap.MakeList(std::move(list));
  return Status::Ok();
}

}  // namespace kvgate::chat
