#include "gateway/gateway.h"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <boost/json.hpp>
#include <filesystem>

#include "absl/container/flat_hash_set.h"
#include "api/prompt.h"
#include "api/request_fields.h"
#include "chat/chat_template.h"
#include "common/log.h"
#include "events/subscriber.h"
#include "gateway/gateway_metrics.h"
#include "gateway/proxy_call.h"
#include "gateway/worker_pool.h"
#include "http/client.h"
#include "http/event_loop.h"
#include "http/server.h"
#include "kv/block_hash.h"
#include "kv/prefix_index.h"
#include "mocker/server.h"
#include "routing/router.h"
#include "tokenizer/tokenizer.h"

namespace kvgate::gateway {
namespace {

namespace json = boost::json;

// A client error found while reading a request: the status and the message it gets.
struct Rejection {
  int status;
  std::string message;
  std::string type = "invalid_request_error";
};

using api::BoolField;
using api::Field;
using api::StringField;

// The mock model's MoE shape when nothing else defines one.
constexpr uint32_t kMockMoeLayers = 4;
constexpr uint32_t kMockMoeTopK = 2;

}  // namespace

struct Gateway::Impl {
  GatewayConfig config;
  std::shared_ptr<tokenizer::Tokenizer> tokenizer;
  std::shared_ptr<chat::ChatTemplate> chat_template;
  absl::flat_hash_set<std::string> models, adapters;

  std::unique_ptr<kv::PrefixIndex> index;
  std::unique_ptr<routing::Router> router;
  std::unique_ptr<events::Subscriber> subscriber;
  // The server's threads also run the upstream client: one thread serves a request end to end.
  std::shared_ptr<http::EventLoops> loops;
  std::unique_ptr<http::Client> client;
  std::unique_ptr<WorkerPool> workers;
  std::vector<std::unique_ptr<mocker::MockerServer>> mocks;
  std::vector<std::string> mock_ipc_paths;
  GatewayMetrics metrics;
  std::unique_ptr<ProxyServices> services;
  std::unique_ptr<http::Server> server;
  std::atomic<int64_t> in_flight{0};
  std::atomic<bool> block_size_warned{false};

  Status LoadModel() {
    if (config.model_dir.empty()) return Status::Ok();
    std::unique_ptr<tokenizer::Tokenizer> tok;
    if (Status s = tokenizer::Tokenizer::Load(config.model_dir + "/tokenizer.json", &tok);
        !s.ok()) {
      return s;
    }
    tokenizer = std::move(tok);
    std::unique_ptr<chat::ChatTemplate> tmpl;
    if (Status s = chat::ChatTemplate::Load(config.model_dir, &tmpl); s.ok()) {
      chat_template = std::move(tmpl);
    } else {
      Log(LogLevel::kWarn, "{}; chat requests route on a plain rendering", s.message());
    }
    return Status::Ok();
  }

  Status StartMocks() {
    const MockWorkersConfig& m = config.mock;
    if (m.count == 0) return Status::Ok();
    if (config.moe_layers == 0 || config.moe_top_k == 0) {
      config.moe_layers = kMockMoeLayers;
      config.moe_top_k = kMockMoeTopK;
    }
    const std::string dir = std::filesystem::temp_directory_path().string();
    for (uint32_t i = 0; i < m.count; ++i) {
      mocker::MockerOptions o;
      o.kind = m.engine == engines::EngineKind::kSglang ? mocker::EngineKind::kSglang
                                                        : mocker::EngineKind::kVllm;
      o.model = config.models.front();
      o.engine.block_size = config.block_size;
      o.engine.num_blocks = m.num_blocks;
      o.engine.timing.speedup = m.speedup;
      // ipc endpoints: no TCP ports to find, and nothing outside this machine can connect.
      const std::string base = fmt::format("{}/kvgate-{}-mock{}", dir, getpid(), i);
      o.kv_events = "ipc://" + base + "-events";
      o.kv_replay = "ipc://" + base + "-replay";
      mock_ipc_paths.push_back(base + "-events");
      mock_ipc_paths.push_back(base + "-replay");
      o.event_format.format = m.engine == engines::EngineKind::kSglang
                                  ? wire::EventFormat::kSglang
                                  : wire::EventFormat::kVllmMap;
      o.moe = {config.moe_layers, config.moe_top_k, m.moe_experts};
      o.allow_crash = false;
      o.tokenizer = tokenizer;
      o.chat_template = chat_template;
      auto mock = std::make_unique<mocker::MockerServer>(o);
      if (Status s = mock->Start(); !s.ok()) return s;
      WorkerConfig w;
      w.url = fmt::format("http://127.0.0.1:{}", mock->port());
      w.engine = m.engine;
      w.kv_events = o.kv_events;
      w.kv_replay = o.kv_replay;
      config.workers.push_back(w);
      mocks.push_back(std::move(mock));
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

  // ---------- HTTP ----------
  void Reply(http::Responder& r, const std::string& route, int status, std::string_view message,
             std::string_view type = "invalid_request_error") {
    metrics.requests.Add({route, std::to_string(status)});
    r.Send(status, "application/json", http::OpenAiError(status, message, type));
  }

  bool Authorized(const http::Request& req) const {
    if (config.api_keys.empty()) return true;
    std::string_view auth = req.Header("authorization");
    constexpr std::string_view kBearer = "Bearer ";
    if (auth.substr(0, kBearer.size()) != kBearer) return false;
    auth.remove_prefix(kBearer.size());
    for (const std::string& key : config.api_keys) {
      if (auth == key) return true;
    }
    return false;
  }

  void Handle(const http::Request& req, std::shared_ptr<http::Responder> r) {
    const std::string& path = req.path;
    if (path == "/health" || path == "/ready" || path == "/metrics") {
      if (req.method != "GET") return Reply(*r, path, 405, "use GET");
      if (path == "/health") return r->Send(200, "application/json", R"({"status":"ok"})");
      if (path == "/ready") {
        const size_t up = workers->healthy_count();
        return r->Send(up ? 200 : 503, "application/json",
                       fmt::format(R"({{"ready":{},"healthy_workers":{},"workers":{}}})",
                                   up ? "true" : "false", up, workers->size()));
      }
      return r->Send(200, "text/plain; version=0.0.4; charset=utf-8", MetricsText());
    }
    std::optional<api::Api> api;
    if (path == "/v1/chat/completions") {
      api = api::Api::kChat;
    } else if (path == "/v1/completions") {
      api = api::Api::kCompletions;
    } else if (path == "/generate") {
      api = api::Api::kGenerate;
    } else if (path != "/v1/models") {
      return Reply(*r, "other", 404, fmt::format("no route for {} {}", req.method, path),
                   "not_found_error");
    }
    if (!Authorized(req)) {
      return Reply(*r, path, 401, "missing or invalid API key", "authentication_error");
    }
    if (!api) {  // /v1/models
      if (req.method != "GET") return Reply(*r, path, 405, "use GET");
      return r->Send(200, "application/json", ModelsBody());
    }
    if (req.method != "POST") return Reply(*r, path, 405, "use POST");
    Infer(*api, req, std::move(r));
  }

  std::string ModelsBody() const {
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
    return json::serialize(json::object{{"object", "list"}, {"data", std::move(data)}});
  }

  void Infer(api::Api api, const http::Request& req, std::shared_ptr<http::Responder> r) {
    CallPlan plan;
    plan.received = std::chrono::steady_clock::now();
    plan.api = api;
    plan.route = req.path;
    plan.path = req.path;
    try {
      Prepare(req, plan);
    } catch (const Rejection& e) {
      return Reply(*r, plan.route, e.status, e.message, e.type);
    } catch (const api::BadField& e) {
      return Reply(*r, plan.route, 400, e.message);
    }
    if (in_flight.fetch_add(1) >= static_cast<int64_t>(config.limits.max_in_flight)) {
      --in_flight;
      return Reply(*r, plan.route, 429,
                   fmt::format("more than {} requests in flight", config.limits.max_in_flight),
                   "rate_limit_error");
    }
    routing::RouteRequest route;
    route.local_hashes = plan.local_hashes;
    route.eagle_hashes = plan.eagle_hashes;
    route.prompt_tokens = plan.prompt_tokens;
    std::optional<routing::RouteDecision> decision = router->Route(route);
    if (!decision) {
      --in_flight;
      return Reply(*r, plan.route, 503, "no healthy worker is available", "service_unavailable");
    }
    metrics.prompt_blocks.Add({}, static_cast<double>(plan.local_hashes.size()));
    ProxyCall::Start(*services, std::move(plan), *decision, std::move(r));
  }

  // Reads the request: validation, prompt tokens, block hashes, and the engine's body.
  void Prepare(const http::Request& req, CallPlan& plan) {
    for (const char* name : {"x-request-id", "traceparent", "tracestate"}) {
      if (std::string_view v = req.Header(name); !v.empty()) {
        plan.forward_headers.emplace_back(name, std::string(v));
      }
    }
    boost::system::error_code ec;
    json::value body = json::parse(req.body, ec);
    if (ec) throw Rejection{400, fmt::format("the body is not valid JSON: {}", ec.message())};
    if (!body.is_object()) throw Rejection{400, "the body must be a JSON object"};
    json::object& o = body.as_object();

    std::string lora_name;
    if (const json::value* m = o.if_contains("model"); m && !m->is_null()) {
      if (!m->is_string()) throw Rejection{400, "'model' must be a string"};
      const std::string name(m->as_string());
      if (adapters.contains(name)) {
        lora_name = name;
      } else if (!models.contains(name)) {
        throw Rejection{404, fmt::format("the model '{}' does not exist", name), "not_found_error"};
      }
    }
    const bool stream = BoolField(o, "stream");
    const std::string_view cache_salt = StringField(o, "cache_salt");
    plan.want_experts = BoolField(o, "return_routed_experts");
    uint64_t experts_start = 0;
    bool strip_nvext = false;
    if (const json::value* nv = Field(o, "nvext")) {
      if (!nv->is_object()) throw Rejection{400, "'nvext' must be an object"};
      const json::object& n = nv->as_object();
      if (const json::value* fields = Field(n, "extra_fields")) {
        if (!fields->is_array()) throw Rejection{400, "'nvext.extra_fields' must be a list"};
        for (const json::value& f : fields->as_array()) {
          if (!f.is_string()) throw Rejection{400, "'nvext.extra_fields' must hold strings"};
          const std::string_view name = f.as_string();
          plan.want_worker_id |= name == "worker_id";
          plan.want_cached_blocks |= name == "cached_blocks";
          plan.want_experts |= name == "routed_experts";
        }
      }
      if (const json::value* s = Field(n, "routed_experts_start")) {
        if (!s->is_int64() || s->as_int64() < 0) {
          throw Rejection{400, "'nvext.routed_experts_start' must be a non-negative integer"};
        }
        experts_start = static_cast<uint64_t>(s->as_int64());
      }
      strip_nvext = true;
    }

    std::vector<uint32_t> ids;
    const api::PromptModel model{tokenizer.get(), chat_template.get()};
    if (Status s = api::PromptTokens(plan.api, body, model, &ids); !s.ok()) {
      throw Rejection{400, s.message()};
    }
    if (ids.empty()) throw Rejection{400, "the prompt is empty"};
    plan.prompt_tokens = static_cast<uint32_t>(ids.size());
    const uint64_t seed = kv::BlockHashSeed(lora_name, cache_salt);
    kv::AppendLocalBlockHashes(ids, config.block_size, seed, false, plan.local_hashes);
    if (router->wants_eagle_hashes()) {
      kv::AppendLocalBlockHashes(ids, config.block_size, seed, true, plan.eagle_hashes);
    }

    // The engine's body: the client's bytes unless kvgate must add or remove fields.
    if (strip_nvext) o.erase("nvext");
    if (plan.want_experts) {
      if (stream && plan.api != api::Api::kGenerate) {
        json::value* so = o.if_contains("stream_options");
        const bool asked = so && so->is_object() && so->as_object().contains("include_usage") &&
                           so->as_object().at("include_usage") == true;
        if (!asked) {
          // Token counts size the experts array; the client did not ask for the usage chunk.
          // Its other stream options stay as they were.
          if (so == nullptr || !so->is_object()) so = &(o["stream_options"] = json::object{});
          so->as_object()["include_usage"] = true;
          plan.drop_usage = true;
        }
      }
      plan.experts_start = experts_start;
      plan.experts_body = std::move(o);
      return;
    }
    plan.body = strip_nvext ? json::serialize(o) : req.body;
  }

  std::string MetricsText() const {
    std::string out;
    metrics.requests.Render(out);
    metrics.request_seconds.Render(out);
    metrics.ttft_seconds.Render(out);
    metrics.routed.Render(out);
    metrics.predicted_blocks.Render(out);
    metrics.prompt_blocks.Render(out);
    metrics.retries.Render(out);
    metrics.upstream_errors.Render(out);
    metrics.experts_invalid.Render(out);

    CounterFamily in_flight_gauge{
        "kvgate_requests_in_flight", "Client requests in flight.", {}, true};
    in_flight_gauge.Set({}, static_cast<double>(in_flight.load()));
    in_flight_gauge.Render(out);
    CounterFamily healthy{
        "kvgate_worker_healthy", "1 when the worker is in routing.", {"worker"}, true};
    CounterFamily active_requests{"kvgate_worker_active_requests",
                                  "Requests routed to the worker and not finished.",
                                  {"worker", "dp_rank"},
                                  true};
    CounterFamily active_prefill{"kvgate_worker_active_prefill_tokens",
                                 "Prompt tokens routed to the worker awaiting their first token.",
                                 {"worker", "dp_rank"},
                                 true};
    CounterFamily decode_blocks{"kvgate_worker_active_decode_blocks",
                                "KV blocks of requests decoding on the worker.",
                                {"worker", "dp_rank"},
                                true};
    for (uint32_t id = 0; id < workers->size(); ++id) {
      healthy.Set({std::to_string(id)}, workers->healthy(id) ? 1 : 0);
      for (uint32_t rank = 0; rank < workers->worker(id).config.dp_size; ++rank) {
        const routing::WorkerLoad load = router->Load({id, rank});
        const LabelValues labels{std::to_string(id), std::to_string(rank)};
        active_requests.Set(labels, load.requests);
        active_prefill.Set(labels, static_cast<double>(load.prefill_tokens));
        decode_blocks.Set(labels, static_cast<double>(load.decode_blocks));
      }
    }
    healthy.Render(out);
    active_requests.Render(out);
    active_prefill.Render(out);
    decode_blocks.Render(out);

    CounterFamily batches{"kvgate_kv_event_batches_total", "KV event batches applied.", {"worker"}};
    CounterFamily invalid{"kvgate_kv_events_invalid_total",
                          "KV events that could not be decoded (skipped).",
                          {"worker"}};
    CounterFamily bad{"kvgate_kv_event_bad_messages_total",
                      "KV event messages with bad frames or payloads.",
                      {"worker"}};
    CounterFamily gaps{
        "kvgate_kv_event_gaps_total", "Sequence gaps in KV event streams.", {"worker"}};
    CounterFamily replays{"kvgate_kv_event_replays_total", "Replay requests sent.", {"worker"}};
    CounterFamily lost{
        "kvgate_kv_event_lost_batches_total", "Batches never recovered after a gap.", {"worker"}};
    CounterFamily restarts{
        "kvgate_kv_event_restarts_total", "Engine restarts detected.", {"worker"}};
    CounterFamily skipped{"kvgate_kv_stores_skipped_total",
                          "Stored events not applied, by reason.",
                          {"worker", "reason"}};
    for (const auto& [worker, s] : subscriber->Stats()) {
      const LabelValues w{std::to_string(worker)};
      batches.Add(w, static_cast<double>(s.stream.batches));
      invalid.Add(w, static_cast<double>(s.events[static_cast<size_t>(wire::EventKind::kInvalid)]));
      bad.Add(w, static_cast<double>(s.bad_frames + s.bad_payloads));
      gaps.Add(w, static_cast<double>(s.stream.gaps));
      replays.Add(w, static_cast<double>(s.stream.replays));
      lost.Add(w, static_cast<double>(s.stream.lost_batches));
      restarts.Add(w, static_cast<double>(s.stream.restarts));
      skipped.Add({w[0], "unknown_parent"}, static_cast<double>(s.apply.unknown_parent));
      skipped.Add({w[0], "block_size_mismatch"}, static_cast<double>(s.apply.block_size_mismatch));
      skipped.Add({w[0], "token_count_mismatch"},
                  static_cast<double>(s.apply.token_count_mismatch));
    }
    for (const CounterFamily* f :
         {&batches, &invalid, &bad, &gaps, &replays, &lost, &restarts, &skipped}) {
      f->Render(out);
    }
    const kv::IndexStats stats = index->Stats();
    CounterFamily index_gauges{"kvgate_index_size", "Prefix index size.", {"what"}, true};
    index_gauges.Set({"blocks"}, static_cast<double>(stats.nodes));
    index_gauges.Set({"entries"}, static_cast<double>(stats.entries));
    index_gauges.Set({"bytes"}, static_cast<double>(stats.approx_bytes));
    index_gauges.Render(out);
    return out;
  }
};

Gateway::Gateway(GatewayConfig config) : impl_(std::make_unique<Impl>()) {
  impl_->config = std::move(config);
}

Gateway::~Gateway() { Stop(); }

Status Gateway::Start() {
  Impl& g = *impl_;
  GatewayConfig& c = g.config;
  if (Status s = g.LoadModel(); !s.ok()) return s;
  for (const std::string& m : c.models) g.models.insert(m);
  for (const std::string& a : c.lora_adapters) g.adapters.insert(a);
  if (Status s = g.StartMocks(); !s.ok()) return s;

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
  g.services.reset(new ProxyServices{
      *g.router, *g.workers, *g.client, g.metrics, c.moe_layers, c.moe_top_k,
      c.limits.connect_timeout, c.limits.first_byte_timeout, c.limits.idle_timeout, &g.in_flight});

  http::ServerOptions so;
  so.host = c.host;
  so.port = c.port;
  so.threads = c.threads;
  so.max_body_bytes = c.limits.max_body_bytes;
  so.header_timeout = c.limits.client_header_timeout;
  so.idle_timeout = c.limits.client_idle_timeout;
  g.server = std::make_unique<http::Server>(
      so,
      [&g](const http::Request& req, std::shared_ptr<http::Responder> r) {
        g.Handle(req, std::move(r));
      },
      g.loops);
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
  if (g.server) g.server->Stop(g.config.limits.shutdown_grace);
  // Nothing runs once the loops stop; what they still hold (abandoned calls, whose
  // destructors reach the router) goes with them, before the router does.
  if (g.loops) g.loops->Stop();
  g.workers.reset();  // joins the health checker
  g.client.reset();
  g.server.reset();
  g.loops.reset();
  g.subscriber.reset();
  for (auto& m : g.mocks) m->Stop();
  g.mocks.clear();
  for (const std::string& p : g.mock_ipc_paths) std::filesystem::remove(p);
  g.mock_ipc_paths.clear();
}

}  // namespace kvgate::gateway
