#include "api/request.h"

#include <fmt/format.h>

#include <boost/json.hpp>

#include "api/request_fields.h"

namespace kvgate::api {
namespace {

namespace json = boost::json;

std::optional<uint32_t> PositiveCount(const json::object& o, std::string_view key) {
  const json::value* v = Field(o, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_int64() || v->as_int64() < 1 || v->as_int64() > UINT32_MAX) {
    throw BadField{fmt::format("'{}' must be a positive integer", key)};
  }
  return static_cast<uint32_t>(v->as_int64());
}

void ReadNvext(const json::object& nvext, InferenceRequest* r) {
  if (const json::value* fields = Field(nvext, "extra_fields")) {
    if (!fields->is_array()) throw BadField{"'nvext.extra_fields' must be a list"};
    for (const json::value& f : fields->as_array()) {
      if (!f.is_string()) throw BadField{"'nvext.extra_fields' must hold strings"};
      const std::string_view name = f.as_string();
      r->extra.worker_id |= name == "worker_id";
      r->extra.cached_blocks |= name == "cached_blocks";
      r->extra.routed_experts |= name == "routed_experts";
      r->extra.prefill_worker_id |= name == "prefill_worker_id";
    }
  }
  if (const json::value* s = Field(nvext, "routed_experts_start")) {
    if (!s->is_int64() || s->as_int64() < 0) {
      throw BadField{"'nvext.routed_experts_start' must be a non-negative integer"};
    }
    r->routed_experts_start = static_cast<uint64_t>(s->as_int64());
  }
}

void ReadFields(Api api, const json::object& o, InferenceRequest* r) {
  r->model = std::string(StringField(o, "model"));
  r->stream = BoolField(o, "stream");
  if (const json::value* so = Field(o, "stream_options"); so && so->is_object()) {
    r->include_usage = BoolField(so->as_object(), "include_usage");
  }
  r->cache_salt = std::string(StringField(o, "cache_salt"));
  r->extra.routed_experts = BoolField(o, "return_routed_experts");
  // An engine's own start field (SGLang's routed_experts_start_len, vLLM's
  // routed_experts_prompt_start) is what the engine will apply; nvext's, read later, wins.
  for (const char* native : {"routed_experts_start_len", "routed_experts_prompt_start"}) {
    const json::value* s = Field(o, native);
    if (s && s->is_int64() && s->as_int64() > 0) {
      r->routed_experts_start = static_cast<uint64_t>(s->as_int64());
    }
  }
  if (api != Api::kGenerate) r->n = PositiveCount(o, "n").value_or(1);
  switch (api) {
    case Api::kCompletions:
      r->max_tokens = PositiveCount(o, "max_tokens");
      break;
    case Api::kChat:
      r->max_tokens = PositiveCount(o, "max_completion_tokens");
      if (!r->max_tokens) r->max_tokens = PositiveCount(o, "max_tokens");
      break;
    case Api::kGenerate:
      if (const json::value* sp = Field(o, "sampling_params")) {
        if (!sp->is_object()) throw BadField{"'sampling_params' must be an object"};
        r->max_tokens = PositiveCount(sp->as_object(), "max_new_tokens");
      }
      break;
  }
  if (const json::value* nv = Field(o, "nvext")) {
    if (!nv->is_object()) throw BadField{"'nvext' must be an object"};
    r->has_nvext = true;
    ReadNvext(nv->as_object(), r);
  }
}

}  // namespace

Status ParseInferenceRequest(Api api, const json::value& body, const PromptModel& model,
                             InferenceRequest* out, PromptFailure on_failure) {
  *out = InferenceRequest{};
  out->api = api;
  if (!body.is_object()) return Status::InvalidArgument("the body must be a JSON object");
  try {
    ReadFields(api, body.as_object(), out);
  } catch (const BadField& e) {
    return Status::InvalidArgument(e.message);
  }
  PromptPartial note;
  if (Status s = PromptTokens(api, body, model, &out->prompt, &note); !s.ok()) {
    if (s.code() == StatusCode::kFailedPrecondition && on_failure == PromptFailure::kFallBack) {
      out->prompt.clear();
      out->prompt_fallback = note.failed;
      out->prompt_error = s.message();
      return Status::Ok();
    }
    return Status::InvalidArgument(s.message());
  }
  if (!note.partial.empty() && on_failure == PromptFailure::kFallBack) {
    out->prompt_fallback = note.partial;
    out->prompt_error = "the prompt has media parts: routed on the text before the first";
    return Status::Ok();  // (empty when the media part comes first: routed on load alone)
  }
  if (out->prompt.empty()) return Status::InvalidArgument("the prompt is empty");
  return Status::Ok();
}

}  // namespace kvgate::api
