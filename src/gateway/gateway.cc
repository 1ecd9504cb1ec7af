#include "gateway/gateway.h"

#include <fmt/format.h>

#include <atomic>
#include <boost/json.hpp>
#include <charconv>
#include <functional>
#include <string_view>

#include "api/error.h"
#include "common/log.h"
#include "events/subscriber.h"
#include "gateway/canary.h"
#include "gateway/fidelity.h"
#include "gateway/gateway_metrics.h"
#include "gateway/inference_call.h"
#include "gateway/worker_pool.h"
#include "http/client.h"
#include "http/event_loop.h"
#include "http/server.h"
#include "kv/prefix_index.h"
#include "routing/router.h"

namespace kvgate::gateway {
namespace {

namespace json = boost::json;

using Responder = std::shared_ptr<http::Responder>;
using RouteHandler = std::function<void(http::Request&, Responder)>;

// Who may call a route: anyone (/health, /ready and /metrics stay open for probes and
// scrapers), holders of an API key, or of an admin key.
enum class Access { kOpen, kApiKey, kAdmin };

// One entry of the route table. A path ending in '/' is a prefix (its rest: an argument).
struct Route {
  std::string_view path;
  std::string_view method;
  Access access;
  RouteHandler handle;
  bool Matches(std::string_view request_path) const {
    return path.ends_with('/') ? request_path.starts_with(path) && request_path.size() > path.size()
                               : request_path == path;
  }
};

// Compares every byte whatever the first difference, so the time taken says nothing about
// how much of a key was right.
bool SameKey(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

bool HasApiKey(const std::vector<std::string>& keys, const http::Request& req) {
  if (keys.empty()) return true;
  std::string_view auth = req.Header("authorization");
  constexpr std::string_view kBearer = "bearer ";  // the scheme is case-insensitive
  if (auth.size() < kBearer.size()) return false;
  for (size_t i = 0; i < kBearer.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(auth[i])) != kBearer[i]) return false;
  }
  auth.remove_prefix(kBearer.size());
  while (!auth.empty() && auth.front() == ' ') auth.remove_prefix(1);
  bool found = false;
  for (const std::string& key : keys) found |= SameKey(auth, key);
  return found;
}

}  // namespace

struct Gateway::Impl {
  GatewayConfig config;
  ServedModel model;
  std::unique_ptr<kv::PrefixIndex> index;
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
  std::unique_ptr<CallServices> calls;
  std::vector<Route> routes;
  std::unique_ptr<http::Server> server;
  std::atomic<bool> block_size_warned{false};

  Status LoadModel() {
    model.block_size = config.block_size;
    model.experts_layers = config.moe_layers;
    model.experts_top_k = config.moe_top_k;
    for (const std::string& m : config.models) model.names.insert(m);
    for (const std::string& a : config.lora_adapters) model.adapters.insert(a);
    if (config.model_dir.empty() || model.files.tokenizer) return Status::Ok();
    return api::LoadModelFiles(config.model_dir, &model.files);
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
           const MetricsSources sources{calls->in_flight, *workers, *router,
                                        *subscriber,      *index,   *fidelity};
           r->Send(200, "text/plain; version=0.0.4; charset=utf-8", MetricsText(metrics, sources));
         }},
        {"/admin/workers", "GET", Access::kAdmin,
         [this](http::Request&, Responder r) { r->Send(200, "application/json", WorkersBody()); }},
        // POST /admin/workers/{id}/probe: runs the canary, answers with its result.
        {"/admin/workers/", "POST", Access::kAdmin,
         [this](http::Request& req, Responder r) { Probe(req.path, std::move(r)); }},
    };
  }

  bool MayCall(const Route& route, const http::Request& req) const {
    switch (route.access) {
      case Access::kOpen:
        return true;
      case Access::kApiKey:
        return HasApiKey(config.api_keys, req);
      case Access::kAdmin:
        // Without admin keys the admin API is open only on a gateway without any key.
        return config.admin_api_keys.empty() ? config.api_keys.empty()
                                             : HasApiKey(config.admin_api_keys, req);
    }
    return false;
  }

  std::string ReadyBody(size_t up) const {
    // Flagged workers serve, but the gateway's view of them is wrong: say which and why.
    json::array flagged;
    for (uint32_t id = 0; id < fidelity->size(); ++id) {
      const WorkerFidelity f = fidelity->Get(id);
      if (!f.flag.empty()) flagged.push_back(json::object{{"worker", id}, {"reason", f.flag}});
    }
    return json::serialize(json::object{{"ready", up > 0},
                                        {"healthy_workers", up},
                                        {"workers", workers->size()},
                                        {"flagged", std::move(flagged)}});
  }

  json::object WorkerRecord(uint32_t id) const {
    const Worker& w = workers->worker(id);
    json::object record{{"id", std::to_string(id)},
                        {"url", w.config.url},
                        {"engine", engines::EngineName(w.config.engine)},
                        {"kv_events", w.config.kv_events},
                        {"kv_replay", w.config.kv_replay},
                        {"dp_size", w.config.dp_size},
                        {"role", "both"},
                        {"model", config.models.empty() ? "" : config.models.front()},
                        {"block_size", config.block_size}};
    uint64_t local = 0, peers = 0;
    for (uint32_t rank = 0; rank < w.config.dp_size; ++rank) {
      local += router->loads().LocalLoad({id, rank}).requests;
      peers += router->loads().PeersLoad({id, rank}).requests;
    }
    const WorkerFidelity f = fidelity->Get(id);
    record["source"] = "static";
    record["healthy"] = workers->healthy(id);
    record["active_requests"] = json::object{{"local", local}, {"peers", peers}};
    record["canary"] = f.canary.empty() ? json::value(nullptr) : json::value(f.canary);
    record["fidelity"] = json::object{{"requests", f.requests},
                                      {"prompt_tokens_mismatch", f.prompt_tokens_mismatch},
                                      {"predicted_cached_tokens", f.predicted_cached_tokens},
                                      {"reported_cached_tokens", f.reported_cached_tokens}};
    record["flagged"] = f.flag.empty() ? json::value(nullptr) : json::value(f.flag);
    return record;
  }

  std::string WorkersBody() const {
    json::array list;
    for (uint32_t id = 0; id < workers->size(); ++id) list.push_back(WorkerRecord(id));
    return json::serialize(json::object{{"workers", std::move(list)}});
  }

  void Probe(std::string_view path, Responder r) {
    // /admin/workers/{id}/probe
    std::string_view rest = path.substr(std::string_view("/admin/workers/").size());
    const size_t slash = rest.find('/');
    const std::string_view id_text = rest.substr(0, slash);
    uint32_t id = 0;
    const auto [end, ec] = std::from_chars(id_text.data(), id_text.data() + id_text.size(), id);
    if (slash == std::string_view::npos || rest.substr(slash) != "/probe") {
      return Reply(*r, "/admin/workers",
                   Status::NotFound(fmt::format("no route for POST {}", path)));
    }
    if (ec != std::errc() || end != id_text.data() + id_text.size() || id >= workers->size()) {
      return Reply(*r, "/admin/workers", Status::NotFound(fmt::format("no worker '{}'", id_text)));
    }
    canaries->Queue(id, /*wait_until_up=*/false, [this, id, r](const std::string& result) {
      metrics.requests.Add({"/admin/workers", "200"});
      r->Send(200, "application/json",
              json::serialize(json::object{{"worker", std::to_string(id)}, {"canary", result}}));
    });
  }

  // Before the body is read: unknown routes, wrong methods and missing API keys cost the
  // client's body nothing.
  std::optional<http::HeadRejection> CheckHead(const http::Request& head) const {
    for (const Route& route : routes) {
      if (!route.Matches(head.path)) continue;
      if (!MayCall(route, head)) return http::HeadRejection{401, "missing or invalid API key"};
      return std::nullopt;
    }
    return std::nullopt;  // answered 404 by Handle
  }

  void Handle(http::Request& req, Responder r) {
    for (const Route& route : routes) {
      if (!route.Matches(req.path)) continue;
      if (!MayCall(route, req)) {
        return Reply(*r, std::string(route.path),
                     {StatusCode::kUnauthenticated, "missing or invalid API key"});
      }
      // HEAD is GET without the body (the server drops it): health probes use it.
      if (route.method != req.method && !(req.method == "HEAD" && route.method == "GET")) {
        return Reply(*r, req.path,
                     {StatusCode::kUnimplemented, fmt::format("use {}", route.method)});
      }
      return route.handle(req, std::move(r));
    }
    Reply(*r, "other", Status::NotFound(fmt::format("no route for {} {}", req.method, req.path)));
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
  g.router = std::make_unique<routing::Router>(c.routing, g.index.get());
  g.subscriber = std::make_unique<events::Subscriber>(
      g.index.get(), events::SubscriberOptions{},
      [&g](uint32_t worker, uint64_t, const wire::DecodedBatch& batch) {
        g.ObserveBatch(worker, batch);
      });
  g.loops = std::make_shared<http::EventLoops>(c.threads);
  g.client = std::make_unique<http::Client>(http::ClientOptions{}, g.loops);
  g.workers = std::make_unique<WorkerPool>(*g.router, *g.subscriber, *g.client, c.limits);
  for (const WorkerConfig& w : c.workers) {
    if (Status s = g.workers->Add(w); !s.ok()) return s;
  }
  g.workers->StartHealthChecks();
  g.fidelity = std::make_unique<Fidelity>(g.workers->size());
  CanaryOptions canary;
  canary.block_size = c.block_size;
  canary.model = c.models.empty() ? "" : c.models.front();
  g.canaries = std::make_unique<CanaryRunner>(canary, *g.client, *g.index, *g.subscriber,
                                              *g.workers, *g.fidelity);
  // Every worker joins now: each gets its canary once it is up.
  for (uint32_t id = 0; id < g.workers->size(); ++id) g.canaries->Queue(id, /*wait_until_up=*/true);
  g.prompt_workers = std::make_unique<WorkQueue>(std::max(1, c.threads));
  g.calls.reset(new CallServices{g.model, *g.router, *g.workers, *g.client, g.metrics, *g.fidelity,
                                 c.limits, *g.prompt_workers});
  g.BuildRoutes();

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

std::vector<std::string> Gateway::worker_urls() const {
  std::vector<std::string> urls;
  for (const WorkerConfig& w : impl_->config.workers) urls.push_back(w.url);
  return urls;
}

void Gateway::Stop() {
  Impl& g = *impl_;
  if (g.canaries) g.canaries->Stop();  // a running canary stops waiting
  if (g.server) g.server->Stop(g.config.limits.shutdown_grace);
  // Nothing runs once the loops stop; what they still hold (abandoned calls, whose
  // destructors reach the router) goes with them, before the router does.
  if (g.loops) g.loops->Stop();
  g.prompt_workers.reset();  // finishes what it holds; their calls reach no loop any more
  g.canaries.reset();
  g.workers.reset();  // joins the health checker
  g.client.reset();
  g.server.reset();
  g.loops.reset();
  g.subscriber.reset();
}

}  // namespace kvgate::gateway
