// A worker record: what kvgate knows of one engine worker, in the one JSON shape the YAML
// config, the admin API and etcd all use (docs/design.md §11). Unknown fields are errors,
// so a typo never silently means a default.
#pragma once

#include <boost/json/fwd.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "discovery/worker_role.h"
#include "engines/engines.h"

namespace kvgate::discovery {

struct WorkerRecord {
  std::string id;   // defaults to DefaultWorkerId(url)
  std::string url;  // http://host:port of the engine's HTTP server
  engines::EngineKind engine = engines::EngineKind::kVllm;
  std::string kv_events;  // ZMQ PUB endpoint; empty: route on load alone for this worker
  std::string kv_replay;  // ZMQ ROUTER endpoint; empty: gaps cannot be repaired
  uint32_t dp_size = 1;   // data-parallel ranks behind this URL (each is routed to alone)
  WorkerRole role = WorkerRole::kBoth;
  uint16_t bootstrap_port = 0;  // SGLang's disaggregation bootstrap server; 0: none
  std::string model;            // served model; empty: the gateway's
  uint32_t block_size = 0;      // tokens per KV block; 0: the gateway's

  bool operator==(const WorkerRecord&) const = default;
};

// A stable name for the worker at `url`, the same in every replica: "w-" and 8 hex digits
// of a hash of its host:port. It names the worker to clients (nvext.worker_id, errors)
// without telling them where it lives.
std::string DefaultWorkerId(std::string_view url);

// Fills `record` from a JSON object's text: `url` is required, `id` defaults from it.
Status ParseWorkerRecord(std::string_view json_text, WorkerRecord* record);
// Every field, defaults included (ids and urls are what a reader looks for first).
boost::json::object ToJson(const WorkerRecord& record);
std::string ToJsonText(const WorkerRecord& record);

// Checks what a parser cannot see field by field: a url the HTTP client accepts, an id that
// fits a URL path segment and an etcd key, a positive dp_size. Fills a missing id.
Status FinishWorkerRecord(WorkerRecord* record);

}  // namespace kvgate::discovery
