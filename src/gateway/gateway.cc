#include "gateway/gateway.h"

#include <fmt/format.h>

#include <atomic>
#include <boost/json.hpp>
#include <charconv>
#include <functional>
#include <random>
#include <string_view>

#include "api/error.h"
#include "cluster/load_sync.h"
#include "common/log.h"
#include "discovery/etcd_discovery.h"
#include "events/subscriber.h"
#include "gateway/canary.h"
#include "gateway/dashboard.h"
#include "gateway/fidelity.h"
#include "gateway/gateway_metrics.h"
#include "gateway/inference_call.h"
#include "gateway/route_explain.h"
#include "gateway/worker_pool.h"
#include "http/client.h"
#include "http/event_loop.h"
#include "http/server.h"
#include "kv/prefix_index.h"
#include "routing/router.h"
#include "tokenizer/prefix_cache.h"

namespace kvgate::gateway {
namespace {

namespace json = boost::json;

using Responder = std::shared_ptr<http::Responder>;
using RouteHandler = std::function<void(http::Request&, Responder)>;

// Who may call a route: anyone (/health, /ready and /metrics stay open for probes and
// scrapers), holders of an API key, or of an admin key. Admin calls that change the gateway
// are, on a gateway without any key, open to loopback clients only.
enum class Access { kOpen, kApiKey, kAdmin, kAdminChange };

// One entry of the route table. A path ending in '/' is a prefix (its rest: an argument).
struct Route {
  std::string_view path;
  std::string_view method;
  Access access;
  RouteHandler handle;
  // HEAD is GET without the body (the server drops it): health probes use it.
  bool Serves(std::string_view request_method) const {
    return method == request_method || (request_method == "HEAD" && method == "GET");
  }
  bool Matches(std::string_view request_path) const {
    return path.ends_with('/') ? request_path.starts_with(path) && request_path.size() > path.size()
                               : request_path == path;
  }
};

// This replica's request-id origin: configured, or drawn when load is shared (0 alone).
uint16_t RequestOrigin(const FleetConfig& fleet) {
  if (fleet.replica_id != "auto") return static_cast<uint16_t>(std::stoul(fleet.replica_id));
  if (fleet.nats_url.empty()) return 0;
  std::random_device rd;
  return static_cast<uint16_t>(1 + rd() % 65535);
}

}  // namespace

struct Gateway::Impl {
  GatewayConfig config;
  ServedModel model;
  std::unique_ptr<kv::PrefixIndex> index;
  std::shared_ptr<routing::LoadView> loads;
  std::unique_ptr<routing::Router> router;
  std::unique_ptr<events::Subscriber> subscriber;
  // The server's threads also run the upstream client: one thread serves a request end to end.
  std::shared_ptr<http::EventLoops> loops;
  std::unique_ptr<http::Client> client;
  std::unique_ptr<WorkerPool> workers;
  std::unique_ptr<Fidelity> fidelity;
  std::unique_ptr<CanaryRunner> canaries;
  GatewayMetrics metrics;
  std::unique_ptr<WorkQueue> prompt_workers;
  std::unique_ptr<Tenants> tenants;
  std::unique_ptr<WaitQueue> queue;
  DecisionLog decisions;
  std::unique_ptr<CallServices> calls;
  std::vector<Route> routes;
  std::unique_ptr<http::Server> server;
  std::atomic<bool> block_size_warned{false};
  std::unique_ptr<discovery::EtcdDiscovery> etcd;
  std::unique_ptr<cluster::LoadSync> sync;
  std::mutex membership_mu;  // one worker joins or leaves at a time

  Status LoadModel() {
    model.block_size = config.block_size;
    model.experts_layers = config.moe_layers;
    model.experts_top_k = config.moe_top_k;
    for (const std::string& m : config.models) model.names.insert(m);
    for (const std::string& a : config.lora_adapters) model.adapters.insert(a);
    if (!config.model_dir.empty() && !model.files.tokenizer) {
      if (Status s = api::LoadModelFiles(config.model_dir, &model.files); !s.ok()) return s;
    }
    // Its own cache (in-process mock workers share the files, not the gateway's cache).
    model.files.prefix_cache.reset();
    if (model.files.tokenizer && config.limits.prompt_cache_bytes > 0) {
      model.files.prefix_cache = std::make_shared<tokenizer::PrefixCache>(
          *model.files.tokenizer, config.limits.prompt_cache_bytes);
    }
    return Status::Ok();
  }

  // Called on the subscriber thread for every applied batch.
  void ObserveBatch(uint32_t worker, const wire::DecodedBatch& batch) {
    for (const wire::Event& e : batch.events) {
      if (e.kind == wire::EventKind::kStored && e.block_size != 0 &&
          e.block_size != config.block_size && !block_size_warned.exchange(true)) {
        Log(LogLevel::kWarn,
            "worker {} stores blocks of {} tokens but the gateway hashes blocks of {}: set "
            "block_size to the engines' value (these events are skipped)",
            worker, e.block_size, config.block_size);
      }
    }
  }

  // A worker joins from the admin API or etcd (static ones are added at start). Refused when
  // its model or block size is not the gateway's: routing on it would be wrong. `replace`:
  // a record with the id of a worker from the same source replaces it (etcd puts).
  Status PutWorker(WorkerConfig record, WorkerSource source, bool replace) {
    if (Status s = discovery::FinishWorkerRecord(&record); !s.ok()) return s;
    std::string_view refused;
    if (record.block_size != 0 && record.block_size != config.block_size) {
      refused = "block_size";
    } else if (!record.model.empty() && !model.names.contains(record.model)) {
      refused = "model";
    }
    if (!refused.empty()) {
      metrics.discovery_refused.Add({std::string(SourceName(source)), std::string(refused)});
      const std::string why = fmt::format(
          "worker {} ({}) refused: its {} is {}, the gateway's {}", record.id, record.url, refused,
          refused == "model" ? record.model : std::to_string(record.block_size),
          refused == "model" ? "models are " + fmt::format("{}", fmt::join(config.models, ", "))
                             : "is " + std::to_string(config.block_size));
      Log(LogLevel::kWarn, "{}", why);
      return {StatusCode::kFailedPrecondition, why};
    }
    std::lock_guard lock(membership_mu);
    if (std::optional<uint32_t> slot = workers->Find(record.id)) {
      const Worker& old = workers->worker(*slot);
      if (!replace || old.source != source) {
        return {StatusCode::kAlreadyExists,
                fmt::format("worker '{}' exists (source {})", record.id, SourceName(old.source))};
      }
      if (old.config == record) return Status::Ok();  // the same record again
      (void)workers->Remove(record.id);
    }
    uint32_t slot = 0;
    if (Status s = workers->Add(record, source, /*routable_at_once=*/false, &slot); !s.ok()) {
      return s;
    }
    fidelity->Grow(workers->size());
    canaries->Queue(slot, /*wait_until_up=*/true);
    Log(LogLevel::kInfo, "worker {} ({}) joins from {}", record.id, record.url, SourceName(source));
    return Status::Ok();
  }

  // Removes a worker; with `only_from`, only one that came from there.
  Status RemoveWorker(std::string_view id, std::optional<WorkerSource> only_from) {
    std::lock_guard lock(membership_mu);
    const std::optional<uint32_t> slot = workers->Find(id);
    if (!slot || (only_from && workers->worker(*slot).source != *only_from)) {
      return Status::NotFound(fmt::format("no worker '{}'", id));
    }
    return workers->Remove(id);
  }

  // Fleet mode (docs/design.md §11): workers from etcd, load shared with peers over NATS.
  Status StartFleet() {
    const FleetConfig& f = config.fleet;
    if (!f.nats_url.empty()) {
      cluster::LoadSyncOptions o;
      o.nats_url = f.nats_url;
      o.cluster = f.cluster_name;
      o.replica_name = fmt::format("{}:{}", config.host, config.port);
      cluster::WorkerNames names{[this](uint32_t slot) { return workers->worker(slot).config.id; },
                                 [this](std::string_view id) { return workers->Find(id); }};
      sync = std::make_unique<cluster::LoadSync>(o, *loads, std::move(names));
      sync->SetUsageLedger(tenants.get());
      if (Status s = sync->Start(); !s.ok()) return s;
    }
    if (!f.etcd_url.empty()) {
      discovery::DiscoveryHandler handler{
          [this](const WorkerConfig& record) {
            return PutWorker(record, WorkerSource::kEtcd, /*replace=*/true);
          },
          [this](const std::string& id) { (void)RemoveWorker(id, WorkerSource::kEtcd); }};
      discovery::EtcdDiscoveryOptions o;
      o.url = f.etcd_url;
      o.prefix = f.etcd_prefix;
      etcd = std::make_unique<discovery::EtcdDiscovery>(o, handler);
      if (Status s = etcd->Start(); !s.ok()) return s;
    }
    return Status::Ok();
  }

  void Reply(http::Responder& r, const std::string& route, const Status& status) {
    const int code = api::HttpStatus(status.code());
    metrics.requests.Add({route, std::to_string(code)});
    r.Send(code, "application/json", api::ErrorBody(status));
  }

  RouteHandler Infer(api::Api api) {
    return [this, api](http::Request& req, Responder r) {
      InferenceCall::Start(*calls, api, std::move(req), std::move(r));
    };
  }

  void BuildRoutes() {
    routes = {
        {"/v1/chat/completions", "POST", Access::kApiKey, Infer(api::Api::kChat)},
        {"/v1/completions", "POST", Access::kApiKey, Infer(api::Api::kCompletions)},
        {"/generate", "POST", Access::kApiKey, Infer(api::Api::kGenerate)},
        {"/v1/models", "GET", Access::kApiKey,
         [this](http::Request&, Responder r) { r->Send(200, "application/json", ModelsBody()); }},
        {"/v1/models/", "GET", Access::kApiKey,
         [this](http::Request& req, Responder r) { Model(req.path, std::move(r)); }},
        {"/health", "GET", Access::kOpen,
         [](http::Request&, Responder r) {
           r->Send(200, "application/json", R"({"status":"ok"})");
         }},
        {"/ready", "GET", Access::kOpen,
         [this](http::Request&, Responder r) {
           const size_t up = workers->healthy_count();
           r->Send(up ? 200 : 503, "application/json", ReadyBody(up));
         }},
        {"/metrics", "GET", Access::kOpen,
         [this](http::Request&, Responder r) {
           const MetricsSources sources{calls->in_flight,
                                        *workers,
                                        *router,
                                        *subscriber,
                                        *index,
                                        *fidelity,
                                        *tenants,
                                        *queue,
                                        sync.get(),
                                        etcd.get(),
                                        model.files.prefix_cache.get()};
           r->Send(200, "text/plain; version=0.0.4; charset=utf-8", MetricsText(metrics, sources));
         }},
        {"/admin/workers", "GET", Access::kAdmin,
         [this](http::Request&, Responder r) { r->Send(200, "application/json", WorkersBody()); }},
        {"/admin/workers", "POST", Access::kAdminChange,
         [this](http::Request& req, Responder r) { AddFromApi(req.body, std::move(r)); }},
        {"/admin/workers/", "DELETE", Access::kAdminChange,
         [this](http::Request& req, Responder r) { RemoveFromApi(req.path, std::move(r)); }},
        // POST /admin/workers/{id}/probe: runs the canary, answers with its result.
        {"/admin/workers/", "POST", Access::kAdmin,
         [this](http::Request& req, Responder r) { Probe(req.path, std::move(r)); }},
        {"/admin/route/explain", "POST", Access::kAdmin,
         [this](http::Request& req, Responder r) { Explain(req, std::move(r)); }},
        {"/admin/decisions", "GET", Access::kAdmin,
         [this](http::Request&, Responder r) {
           r->Send(200, "application/json", decisions.Json(100));
         }},
        // The page is static; its data comes from the admin API (with the admin key the
        // page is given, if any).
        {"/dashboard", "GET", Access::kOpen,
         [](http::Request&, Responder r) {
           r->Send(200, "text/html; charset=utf-8", std::string(DashboardHtml()));
         }},
    };
  }

  // Why the caller may not call `route`; nullopt: it may.
  std::optional<Status> Denied(const Route& route, const http::Request& req) const {
    const Status no_key{StatusCode::kUnauthenticated, "missing or invalid API key"};
    switch (route.access) {
      case Access::kOpen:
        return std::nullopt;
      case Access::kApiKey:
        return tenants->Find(req.Header("authorization")) ? std::nullopt : std::optional(no_key);
      case Access::kAdmin:
      case Access::kAdminChange:
        if (!config.admin_api_keys.empty()) {
          return HasBearerKey(config.admin_api_keys, req.Header("authorization"))
                     ? std::nullopt
                     : std::optional(no_key);
        }
        // Without admin keys the admin API is open only on a gateway without any key, and
        // what changes the gateway only to clients on this machine.
        if (tenants->keyed()) return no_key;
        if (route.access == Access::kAdminChange && !req.from_loopback) {
          return Status(StatusCode::kPermissionDenied,
                        "admin changes need an admin key (admin_api_keys) from another machine");
        }
        return std::nullopt;
    }
    return no_key;
  }

  // The route for the request's path and method; else one for its path alone (to answer
  // 405), else null (404).
  const Route* FindRoute(const http::Request& req) const {
    const Route* path_only = nullptr;
    for (const Route& route : routes) {
      if (!route.Matches(req.path)) continue;
      if (route.Serves(req.method)) return &route;
      if (path_only == nullptr) path_only = &route;
    }
    return path_only;
  }

  std::string ReadyBody(size_t up) const {
    // Flagged workers serve, but the gateway's view of them is wrong: say which and why.
    json::array flagged;
    size_t members = 0;
    for (uint32_t slot = 0; slot < workers->size(); ++slot) {
      if (!workers->present(slot)) continue;
      ++members;
      const WorkerFidelity f = fidelity->Get(slot);
      if (!f.flag.empty()) {
        flagged.push_back(
            json::object{{"worker", workers->worker(slot).config.id}, {"reason", f.flag}});
      }
    }
    return json::serialize(json::object{{"ready", up > 0},
                                        {"healthy_workers", up},
                                        {"workers", members},
                                        {"flagged", std::move(flagged)}});
  }

  // A worker as GET /admin/workers lists it: its record (the gateway's model and block
  // size where it names none), where it came from, and the gateway's view of it.
  json::object WorkerEntry(uint32_t slot) const {
    const Worker& w = workers->worker(slot);
    json::object entry = discovery::ToJson(w.config);
    if (w.config.model.empty()) entry["model"] = config.models.front();
    if (w.config.block_size == 0) entry["block_size"] = config.block_size;
    uint64_t local = 0, peers = 0;
    for (uint32_t rank = 0; rank < w.config.dp_size; ++rank) {
      local += loads->LocalLoad({slot, rank}).requests;
      peers += loads->PeersLoad({slot, rank}).requests;
    }
    const WorkerFidelity f = fidelity->Get(slot);
    entry["source"] = SourceName(w.source);
    entry["healthy"] = workers->healthy(slot);
    entry["active_requests"] = json::object{{"local", local}, {"peers", peers}};
    entry["canary"] = f.canary.empty() ? json::value(nullptr) : json::value(f.canary);
    entry["fidelity"] = json::object{{"requests", f.requests},
                                     {"prompt_tokens_mismatch", f.prompt_tokens_mismatch},
                                     {"predicted_cached_tokens", f.predicted_cached_tokens},
                                     {"reported_cached_tokens", f.reported_cached_tokens},
                                     {"prompt_tokens", f.prompt_tokens}};
    entry["flagged"] = f.flag.empty() ? json::value(nullptr) : json::value(f.flag);
    return entry;
  }

  void Explain(const http::Request& req, Responder r) {
    std::string body;
    const Status st = ExplainRoute(
        *calls, req, [this](uint32_t slot) { return workers->worker(slot).config.id; }, &body);
    if (!st.ok()) return Reply(*r, "/admin/route/explain", st);
    metrics.requests.Add({"/admin/route/explain", "200"});
    r->Send(200, "application/json", body);
  }

  std::string WorkersBody() const {
    // Blocks per tier, summed over each worker's dp ranks (one scan of the index).
    std::vector<std::array<uint64_t, wire::kNumTiers>> blocks(workers->size());
    for (const auto& [key, tiers] : index->BlocksByTier()) {
      if (key.worker >= blocks.size()) continue;
      for (int t = 0; t < wire::kNumTiers; ++t) blocks[key.worker][t] += tiers[t];
    }
    json::array list;
    for (uint32_t slot = 0; slot < workers->size(); ++slot) {
      if (!workers->present(slot)) continue;
      json::object entry = WorkerEntry(slot);
      json::object tiers;
      for (int t = 0; t < wire::kNumTiers; ++t) {
        tiers[wire::TierName(static_cast<wire::Tier>(t))] = blocks[slot][t];
      }
      entry["blocks"] = std::move(tiers);
      list.push_back(std::move(entry));
    }
    return json::serialize(json::object{{"workers", std::move(list)}});
  }

  // POST /admin/workers: a worker record -> 201 with the stored record.
  void AddFromApi(const std::string& body, Responder r) {
    WorkerConfig record;
    Status s = discovery::ParseWorkerRecord(body, &record);
    if (s.ok()) s = PutWorker(record, WorkerSource::kApi, /*replace=*/false);
    if (!s.ok()) return Reply(*r, "/admin/workers", s);
    const std::optional<uint32_t> slot = workers->Find(record.id);
    metrics.requests.Add({"/admin/workers", "201"});
    r->Send(201, "application/json", json::serialize(slot ? WorkerEntry(*slot) : ToJson(record)));
  }

  // DELETE /admin/workers/{id} -> 204.
  void RemoveFromApi(std::string_view path, Responder r) {
    const std::string_view id = path.substr(std::string_view("/admin/workers/").size());
    if (Status s = RemoveWorker(id, std::nullopt); !s.ok()) return Reply(*r, "/admin/workers", s);
    metrics.requests.Add({"/admin/workers", "204"});
    r->Send(204, "application/json", "");
  }

  void Probe(std::string_view path, Responder r) {
    // /admin/workers/{id}/probe
    std::string_view rest = path.substr(std::string_view("/admin/workers/").size());
    const size_t slash = rest.find('/');
    if (slash == std::string_view::npos || rest.substr(slash) != "/probe") {
      return Reply(*r, "/admin/workers",
                   Status::NotFound(fmt::format("no route for POST {}", path)));
    }
    const std::string id(rest.substr(0, slash));
    const std::optional<uint32_t> slot = workers->Find(id);
    if (!slot)
      return Reply(*r, "/admin/workers", Status::NotFound(fmt::format("no worker '{}'", id)));
    canaries->Queue(*slot, /*wait_until_up=*/false, [this, id, r](const std::string& result) {
      metrics.requests.Add({"/admin/workers", "200"});
      r->Send(200, "application/json",
              json::serialize(json::object{{"worker", id}, {"canary", result}}));
    });
  }

  // Before the body is read: unknown routes, wrong methods and missing API keys cost the
  // client's body nothing.
  std::optional<http::HeadRejection> CheckHead(const http::Request& head) const {
    const Route* route = FindRoute(head);
    if (route == nullptr) return std::nullopt;  // answered 404 by Handle
    if (std::optional<Status> no = Denied(*route, head)) {
      return http::HeadRejection{api::HttpStatus(no->code()), no->message()};
    }
    return std::nullopt;
  }

  void Handle(http::Request& req, Responder r) {
    const Route* route = FindRoute(req);
    if (route == nullptr) {
      return Reply(*r, "other",
                   Status::NotFound(fmt::format("no route for {} {}", req.method, req.path)));
    }
    if (std::optional<Status> no = Denied(*route, req)) {
      return Reply(*r, std::string(route->path), *no);
    }
    if (!route->Serves(req.method)) {
      return Reply(*r, req.path,
                   {StatusCode::kUnimplemented, fmt::format("use {}", route->method)});
    }
    route->handle(req, std::move(r));
  }

  // The served models and LoRA adapters, as OpenAI's model objects.
  json::array ModelEntries() const {
    auto entry = [](const std::string& id) {
      return json::object{{"id", id}, {"object", "model"}, {"created", 0}, {"owned_by", "kvgate"}};
    };
    json::array data;
    for (const std::string& m : config.models) data.push_back(entry(m));
    for (const std::string& a : config.lora_adapters) {
      json::object adapter = entry(a);
      adapter["parent"] = config.models.front();
      data.push_back(std::move(adapter));
    }
    return data;
  }

  std::string ModelsBody() const {
    return json::serialize(json::object{{"object", "list"}, {"data", ModelEntries()}});
  }

  // GET /v1/models/{id}: ids may hold '/' (e.g. "org/model").
  void Model(std::string_view path, Responder r) {
    const std::string_view id = path.substr(std::string_view("/v1/models/").size());
    for (const json::value& m : ModelEntries()) {
      if (m.as_object().at("id").as_string() == id) {
        metrics.requests.Add({"/v1/models", "200"});
        return r->Send(200, "application/json", json::serialize(m));
      }
    }
    Reply(*r, "/v1/models", Status::NotFound(fmt::format("the model '{}' does not exist", id)));
  }
};

Gateway::Gateway(GatewayConfig config, api::ModelFiles model_files)
    : impl_(std::make_unique<Impl>()) {
  impl_->config = std::move(config);
  impl_->model.files = std::move(model_files);
}

Gateway::~Gateway() { Stop(); }

Status Gateway::Start() {
  Impl& g = *impl_;
  GatewayConfig& c = g.config;
  if (Status s = g.LoadModel(); !s.ok()) return s;

  g.index = std::make_unique<kv::PrefixIndex>(c.block_size);
  c.routing.block_size = c.block_size;
  c.routing.request_origin = RequestOrigin(c.fleet);
  c.routing.worker_max_requests = c.limits.worker_max_requests;
  c.routing.worker_max_prefill_tokens = c.limits.worker_max_prefill_tokens;
  g.loads = std::make_shared<routing::LoadView>(c.routing.request_origin);
  g.router = std::make_unique<routing::Router>(c.routing, g.index.get(), g.loads);
  g.subscriber = std::make_unique<events::Subscriber>(
      g.index.get(), events::SubscriberOptions{},
      [&g](uint32_t worker, uint64_t, const wire::DecodedBatch& batch) {
        g.ObserveBatch(worker, batch);
      });
  g.loops = std::make_shared<http::EventLoops>(c.threads);
  g.client = std::make_unique<http::Client>(http::ClientOptions{}, g.loops);
  g.workers = std::make_unique<WorkerPool>(*g.router, *g.subscriber, *g.client, c.limits);
  for (const WorkerConfig& w : c.workers) {
    uint32_t slot = 0;
    if (Status s = g.workers->Add(w, WorkerSource::kStatic, /*routable_at_once=*/true, &slot);
        !s.ok()) {
      return s;
    }
  }
  g.workers->StartHealthChecks();
  g.fidelity = std::make_unique<Fidelity>(WorkerPool::kMaxSlots);
  g.fidelity->Grow(g.workers->size());
  CanaryOptions canary;
  canary.block_size = c.block_size;
  canary.model = c.models.empty() ? "" : c.models.front();
  g.canaries = std::make_unique<CanaryRunner>(canary, *g.client, *g.index, *g.subscriber,
                                              *g.workers, *g.fidelity);
  // Every worker joins now: each gets its canary once it is up.
  for (uint32_t id = 0; id < g.workers->size(); ++id) g.canaries->Queue(id, /*wait_until_up=*/true);
  g.prompt_workers = std::make_unique<WorkQueue>(std::max(1, c.threads));
  g.tenants = std::make_unique<Tenants>(c.tenants);
  g.queue = std::make_unique<WaitQueue>(
      WaitQueue::Options{c.limits.queue_size, c.limits.queue_timeout, 4096});
  g.calls.reset(new CallServices{g.model, *g.router, *g.workers, *g.client, g.metrics, *g.fidelity,
                                 c.limits, c.pd, *g.tenants, *g.queue, *g.prompt_workers,
                                 g.decisions});
  g.BuildRoutes();
  if (Status s = g.StartFleet(); !s.ok()) return s;

  http::ServerOptions so;
  so.host = c.host;
  so.port = c.port;
  so.threads = c.threads;
  so.max_body_bytes = c.limits.max_body_bytes;
  so.header_timeout = c.limits.client_header_timeout;
  so.idle_timeout = c.limits.client_idle_timeout;
  so.write_timeout = c.limits.client_write_timeout;
  so.max_connections = c.limits.max_connections;
  so.max_body_bytes_in_flight = c.limits.max_body_bytes_in_flight;
  so.error_formatter = api::OpenAiErrorResponse;
  so.check_head = [&g](const http::Request& head) { return g.CheckHead(head); };
  so.cors_allow_origin = c.cors_allow_origin;
  g.server = std::make_unique<http::Server>(
      so, [&g](http::Request req, Responder r) { g.Handle(req, std::move(r)); }, g.loops);
  return g.server->Start();
}

uint16_t Gateway::port() const { return impl_->server ? impl_->server->port() : 0; }

void Gateway::Stop() {
  Impl& g = *impl_;
  if (g.etcd) g.etcd->Stop();          // no worker joins or leaves from here on
  if (g.canaries) g.canaries->Stop();  // a running canary stops waiting
  if (g.server) g.server->Stop(g.config.limits.shutdown_grace);
  if (g.queue) g.queue->Close();  // what still waits is answered 503 (the gateway stops)
  // Nothing runs once the loops stop; what they still hold (abandoned calls, whose
  // destructors reach the router) goes with them, before the router does.
  if (g.loops) g.loops->Stop();
  g.prompt_workers.reset();  // finishes what it holds; their calls reach no loop any more
  // Peers' deltas look workers up: the sync goes before them (and after the loops, so
  // nothing reports local load any more).
  g.sync.reset();
  g.canaries.reset();
  g.workers.reset();  // joins the health checker
  g.client.reset();
  g.server.reset();
  g.loops.reset();
  g.subscriber.reset();
  g.etcd.reset();
}

}  // namespace kvgate::gateway
