#include "gateway/route_explain.h"

#include "api/request_fields.h"
#include "wire/event.h"

namespace kvgate::gateway {

namespace json = boost::json;

json::object OverlapJson(const kv::Overlap& overlap) {
  json::object o;
  for (int t = 0; t < wire::kNumTiers; ++t) {
    o[wire::TierName(static_cast<wire::Tier>(t))] = overlap.blocks[t];
  }
  return o;
}

json::object LoadJson(const routing::WorkerLoad& load) {
  return {{"requests", load.requests},
          {"prefill_tokens", load.prefill_tokens},
          {"decode_blocks", load.decode_blocks}};
}

Status ExplainRoute(CallServices& s, const http::Request& req,
                    const std::function<std::string(uint32_t slot)>& worker_id, std::string* out) {
  boost::system::error_code ec;
  json::value body = api::ParseJson(req.body, ec);
  if (ec || !body.is_object()) {
    return Status::InvalidArgument("the body must be a chat or completions request (JSON)");
  }
  const api::Api api =
      body.as_object().contains("messages") ? api::Api::kChat : api::Api::kCompletions;
  CallPlan plan;
  if (Status st =
          PlanCall(s.model, s.router.wants_eagle_hashes(), api, req, std::move(body), &plan);
      !st.ok()) {
    return st;
  }
  const routing::RouteExplanation e =
      s.router.Explain(RouteRequestOf(plan, routing::FairShare::kNotShared));
  auto entry = [&](const routing::Candidate& c, bool busy, bool chosen) {
    return json::object{{"worker", worker_id(c.worker.worker)},
                        {"dp_rank", c.worker.dp_rank},
                        {"overlap", OverlapJson(c.overlap)},
                        {"cached_blocks", c.overlap.total()},
                        {"in_flight_blocks", c.in_flight_blocks},
                        {"load", LoadJson(c.load)},
                        {"cost", busy ? json::value(nullptr) : json::value(c.cost)},
                        {"busy", busy},
                        {"chosen", chosen}};
  };
  json::array candidates;
  for (size_t i = 0; i < e.candidates.size(); ++i) {
    candidates.push_back(entry(e.candidates[i], false, e.chosen == i));
  }
  for (const routing::Candidate& c : e.busy) candidates.push_back(entry(c, true, false));
  json::object result{
      {"policy", routing::PolicyName(s.router.config().policy)},
      {"prompt_tokens", plan.request.prompt.size()},
      {"blocks", plan.local_hashes.size()},
      {"candidates", std::move(candidates)},
      {"chosen", e.chosen ? json::value(worker_id(e.candidates[*e.chosen].worker.worker))
                          : json::value(nullptr)},
      {"chosen_dp_rank",
       e.chosen ? json::value(e.candidates[*e.chosen].worker.dp_rank) : json::value(nullptr)}};
  *out = json::serialize(result);
  return Status::Ok();
}

}  // namespace kvgate::gateway
