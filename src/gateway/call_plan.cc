#include "gateway/call_plan.h"

#include <fmt/format.h>

#include "api/request_fields.h"
#include "kv/block_hash.h"

namespace kvgate::gateway {
namespace {

namespace json = boost::json;

// A stream must end with its usage chunk: the gateway checks the engine's token counts
// against its own (docs/design.md §14), and they size the routed-experts array. When the
// client did not ask for it, it is asked for here (the client's other stream options stay)
// and dropped from the client's stream later.
bool ForceUsageChunk(json::object& body) {
  json::value* so = body.if_contains("stream_options");
  if (so && so->is_object()) {
    const json::value* usage = so->as_object().if_contains("include_usage");
    if (usage && *usage == true) return false;
  }
  if (so == nullptr || !so->is_object()) so = &(body["stream_options"] = json::object{});
  so->as_object()["include_usage"] = true;
  return true;
}

}  // namespace

std::string CallPlan::EngineBody(engines::EngineKind engine) const {
  if (!request.extra.routed_experts) return body_;
  json::object body = experts_body_;
  engines::AskForRoutedExperts(engine, request.routed_experts_start, body);
  return json::serialize(body);
}

Status PlanCall(const ServedModel& model, bool eagle_hashes, api::Api api, const http::Request& req,
                CallPlan* plan) {
  boost::system::error_code ec;
  json::value body = api::ParseJson(req.body, ec);
  if (ec)
    return Status::InvalidArgument(fmt::format("the body is not valid JSON: {}", ec.message()));
  return PlanCall(model, eagle_hashes, api, req, std::move(body), plan);
}

Status PlanCall(const ServedModel& model, bool eagle_hashes, api::Api api, const http::Request& req,
                json::value body, CallPlan* plan) {
  plan->api = api;
  plan->path = req.path;
  for (const char* name : {"x-request-id", "traceparent", "tracestate"}) {
    if (std::string_view v = req.Header(name); !v.empty()) {
      plan->forward_headers.emplace_back(name, std::string(v));
    }
  }
  api::InferenceRequest& r = plan->request;
  // A template that fails where the engine's may not must not turn the request away.
  if (Status s = api::ParseInferenceRequest(api, body, model.files.prompt_model(), &r,
                                            api::PromptFailure::kFallBack);
      !s.ok()) {
    return s;
  }
  std::string_view lora_name;
  if (!r.model.empty()) {
    if (model.adapters.contains(r.model)) {
      lora_name = r.model;
    } else if (!model.names.contains(r.model)) {
      return Status::NotFound(fmt::format("the model '{}' does not exist", r.model));
    }
  }
  const uint64_t seed = kv::BlockHashSeed(lora_name, r.cache_salt);
  kv::AppendLocalBlockHashes(r.prompt, model.block_size, seed, false, plan->local_hashes);
  if (eagle_hashes) {
    kv::AppendLocalBlockHashes(r.prompt, model.block_size, seed, true, plan->eagle_hashes);
  }

  json::object& o = body.as_object();
  if (r.has_nvext) o.erase("nvext");
  // (SGLang's /generate reports counts in every chunk's meta_info.)
  if (r.stream && api != api::Api::kGenerate) plan->drop_usage = ForceUsageChunk(o);
  if (r.extra.routed_experts) {
    plan->experts_body_ = std::move(o);
  } else {
    plan->body_ = r.has_nvext || plan->drop_usage ? json::serialize(o) : req.body;
  }
  return Status::Ok();
}

routing::RouteRequest RouteRequestOf(const CallPlan& plan, routing::FairShare fair_share) {
  routing::RouteRequest route;
  route.fair_share = fair_share;
  route.local_hashes = plan.local_hashes;
  route.eagle_hashes = plan.eagle_hashes;
  route.prompt_tokens = static_cast<uint32_t>(plan.request.prompt.size());
  return route;
}

}  // namespace kvgate::gateway
