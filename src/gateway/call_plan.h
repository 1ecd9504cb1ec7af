// What the gateway decides about a client request before it routes it: the typed request,
// the block hashes it routes on, and the body the engine will get (the client's bytes,
// unless kvgate must add fields, e.g. to ask for routed experts, or remove its own nvext).
#pragma once

#include <boost/json.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "api/request.h"
#include "common/status.h"
#include "engines/engines.h"
#include "http/server.h"
#include "routing/policy.h"

namespace kvgate::gateway {

// The model the gateway serves, as requests name it and as it tokenizes them.
struct ServedModel {
  api::ModelFiles files;
  absl::flat_hash_set<std::string> names;
  absl::flat_hash_set<std::string> adapters;  // LoRA adapters: `model` may name one
  uint32_t block_size = 16;
  uint32_t experts_layers = 0;  // the routed-experts shape
  uint32_t experts_top_k = 0;
};

struct CallPlan {
  api::Api api = api::Api::kCompletions;
  std::string path;  // upstream target, also the metrics route label
  api::InferenceRequest request;
  bool drop_usage = false;  // usage was asked of the engine for the gateway; the client did not
  std::vector<uint64_t> local_hashes;
  std::vector<uint64_t> eagle_hashes;  // only when the router wants them
  // Client headers the engine should see too (request ids, trace context).
  std::vector<std::pair<std::string, std::string>> forward_headers;
  std::chrono::steady_clock::time_point received;

  // The engine's body for a worker of `engine`.
  std::string EngineBody(engines::EngineKind engine) const;

 private:
  friend Status PlanCall(const ServedModel&, bool, api::Api, const http::Request&,
                         boost::json::value, CallPlan*);
  std::string body_;                  // ready as it is ...
  boost::json::object experts_body_;  // ... or finished per engine (routed experts)
};

// What the router needs of the plan (it must outlive the result: spans into it).
routing::RouteRequest RouteRequestOf(const CallPlan& plan, routing::FairShare fair_share);

// Reads `req` to `api`. Errors carry their code (kInvalidArgument, kNotFound for an
// unknown model) and the message the client gets.
Status PlanCall(const ServedModel& model, bool eagle_hashes, api::Api api, const http::Request& req,
                CallPlan* plan);
// The same with `req`'s body already parsed (`body`).
Status PlanCall(const ServedModel& model, bool eagle_hashes, api::Api api, const http::Request& req,
                boost::json::value body, CallPlan* plan);

}  // namespace kvgate::gateway
