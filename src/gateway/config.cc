#include "gateway/config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <boost/json.hpp>
#include <charconv>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

namespace kvgate::gateway {
namespace {

// A section's known keys and how to read each; anything else is an error naming it.
using Readers = std::map<std::string, std::function<void(const YAML::Node&)>>;

void ReadSection(const YAML::Node& node, const std::string& where, const Readers& readers) {
  if (!node.IsMap()) throw std::runtime_error(fmt::format("'{}' must be a mapping", where));
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    auto it = readers.find(key);
    if (it == readers.end()) {
      throw std::runtime_error(
          fmt::format("unknown key '{}{}'", where.empty() ? "" : where + ".", key));
    }
    it->second(kv.second);
  }
}

template <typename T>
std::function<void(const YAML::Node&)> Into(T& field) {
  return [&field](const YAML::Node& n) { field = n.as<T>(); };
}

std::function<void(const YAML::Node&)> Millis(std::chrono::milliseconds& field) {
  return [&field](const YAML::Node& n) { field = std::chrono::milliseconds(n.as<int64_t>()); };
}

std::function<void(const YAML::Node&)> Engine(engines::EngineKind& field) {
  return [&field](const YAML::Node& n) {
    auto kind = engines::ParseEngineKind(n.as<std::string>());
    if (!kind)
      throw std::runtime_error(fmt::format("engine must be one of {}", engines::EngineNames()));
    field = *kind;
  };
}

void ReadConfig(const YAML::Node& root, GatewayConfig& c) {
  ReadSection(
      root, "",
      {{"listen",
        [&](const YAML::Node& n) {
          ReadSection(
              n, "listen",
              {{"host", Into(c.host)}, {"port", Into(c.port)}, {"threads", Into(c.threads)}});
        }},
       {"model",
        [&](const YAML::Node& n) {
          ReadSection(n, "model",
                      {{"names", Into(c.models)},
                       {"lora_adapters", Into(c.lora_adapters)},
                       {"dir", Into(c.model_dir)},
                       {"moe_layers", Into(c.moe_layers)},
                       {"moe_top_k", Into(c.moe_top_k)}});
        }},
       {"block_size", Into(c.block_size)},
       {"workers",
        [&](const YAML::Node& n) {
          if (!n.IsSequence()) throw std::runtime_error("'workers' must be a list");
          for (const YAML::Node& w : n) {
            WorkerConfig wc;
            ReadSection(w, "workers[]",
                        {{"id", Into(wc.id)},
                         {"url", Into(wc.url)},
                         {"engine", Engine(wc.engine)},
                         {"kv_events", Into(wc.kv_events)},
                         {"kv_replay", Into(wc.kv_replay)},
                         {"dp_size", Into(wc.dp_size)},
                         {"role",
                          [&wc](const YAML::Node& r) {
                            auto role = discovery::ParseRole(r.as<std::string>());
                            if (!role)
                              throw std::runtime_error("role must be both, prefill or decode");
                            wc.role = *role;
                          }},
                         {"bootstrap_port", Into(wc.bootstrap_port)},
                         {"model", Into(wc.model)},
                         {"block_size", Into(wc.block_size)}});
            c.workers.push_back(std::move(wc));
          }
        }},
       {"mock_workers",
        [&](const YAML::Node& n) {
          ReadSection(n, "mock_workers",
                      {{"count", Into(c.mock.count)},
                       {"prefill_count", Into(c.mock.prefill_count)},
                       {"engine", Engine(c.mock.engine)},
                       {"num_blocks", Into(c.mock.num_blocks)},
                       {"speedup", Into(c.mock.speedup)},
                       {"moe_experts", Into(c.mock.moe_experts)}});
        }},
       {"routing",
        [&](const YAML::Node& n) {
          ReadSection(n, "routing",
                      {{"policy",
                        [&](const YAML::Node& p) {
                          auto policy = routing::ParsePolicy(p.as<std::string>());
                          if (!policy) throw std::runtime_error("unknown routing.policy");
                          c.routing.policy = *policy;
                        }},
                       {"prefill_weight", Into(c.routing.kv.prefill_weight)},
                       {"decode_weight", Into(c.routing.kv.decode_weight)},
                       {"request_weight", Into(c.routing.kv.request_weight)},
                       {"reuse_weight", Into(c.routing.kv.reuse_weight)},
                       {"temperature", Into(c.routing.kv.temperature)},
                       {"seed", Into(c.routing.seed)}});
        }},
       {"limits",
        [&](const YAML::Node& n) {
          LimitsConfig& l = c.limits;
          ReadSection(n, "limits",
                      {{"max_body_bytes", Into(l.max_body_bytes)},
                       {"max_in_flight", Into(l.max_in_flight)},
                       {"connect_timeout_ms", Millis(l.connect_timeout)},
                       {"first_byte_timeout_ms", Millis(l.first_byte_timeout)},
                       {"idle_timeout_ms", Millis(l.idle_timeout)},
                       {"client_header_timeout_ms", Millis(l.client_header_timeout)},
                       {"client_idle_timeout_ms", Millis(l.client_idle_timeout)},
                       {"health_interval_ms", Millis(l.health_interval)},
                       {"unhealthy_after", Into(l.unhealthy_after)},
                       {"shutdown_grace_ms", Millis(l.shutdown_grace)},
                       {"non_streaming_timeout_ms", Millis(l.non_streaming_timeout)},
                       {"max_response_bytes", Into(l.max_response_bytes)},
                       {"client_write_timeout_ms", Millis(l.client_write_timeout)},
                       {"client_buffer_bytes", Into(l.client_buffer_bytes)},
                       {"max_connections", Into(l.max_connections)},
                       {"max_body_bytes_in_flight", Into(l.max_body_bytes_in_flight)},
                       {"offload_prompt_bytes", Into(l.offload_prompt_bytes)},
                       {"prompt_cache_bytes", Into(l.prompt_cache_bytes)},
                       {"worker_max_requests", Into(l.worker_max_requests)},
                       {"worker_max_prefill_tokens", Into(l.worker_max_prefill_tokens)},
                       {"queue_size", Into(l.queue_size)},
                       {"queue_timeout_ms", Millis(l.queue_timeout)}});
        }},
       {"cluster",
        [&](const YAML::Node& n) {
          ReadSection(n, "cluster",
                      {{"nats", Into(c.fleet.nats_url)},
                       {"name", Into(c.fleet.cluster_name)},
                       {"replica_id", Into(c.fleet.replica_id)}});
        }},
       {"etcd",
        [&](const YAML::Node& n) {
          ReadSection(n, "etcd",
                      {{"url", Into(c.fleet.etcd_url)}, {"prefix", Into(c.fleet.etcd_prefix)}});
        }},
       {"pd",
        [&](const YAML::Node& n) {
          ReadSection(n, "pd", {{"min_prefill_tokens", Into(c.pd.min_prefill_tokens)}});
        }},
       {"tenants",
        [&](const YAML::Node& n) {
          if (!n.IsSequence()) throw std::runtime_error("'tenants' must be a list");
          for (const YAML::Node& t : n) {
            TenantConfig tc;
            ReadSection(t, "tenants[]",
                        {{"name", Into(tc.name)},
                         {"api_keys", Into(tc.api_keys)},
                         {"api_keys_file", Into(tc.api_keys_file)},
                         {"priority", Into(tc.priority)},
                         {"limits", [&tc](const YAML::Node& l) {
                            ReadSection(l, "tenants[].limits",
                                        {{"requests_per_min", Into(tc.limits.requests_per_min)},
                                         {"tokens_per_min", Into(tc.limits.tokens_per_min)},
                                         {"max_concurrent", Into(tc.limits.max_concurrent)}});
                          }}});
            c.tenants.push_back(std::move(tc));
          }
        }},
       {"api_keys", Into(c.api_keys)},
       {"api_keys_file", Into(c.api_keys_file)},
       {"admin_api_keys", Into(c.admin_api_keys)},
       {"cors_allow_origin", Into(c.cors_allow_origin)}});
}

std::optional<uint32_t> JsonCount(const boost::json::object& o, std::string_view key) {
  const boost::json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_int64() || v->as_int64() <= 0) return std::nullopt;
  return static_cast<uint32_t>(v->as_int64());
}

// Appends the keys of `path` (one per line; blank and # lines skipped) to `keys`. A file
// meant to hold keys that holds none must not turn authentication off: an error.
Status ReadKeysFile(const std::string& path, std::vector<std::string>* keys) {
  if (path.empty()) return Status::Ok();
  std::ifstream in(path);
  if (!in) return Status::Error(fmt::format("cannot read {}", path));
  const size_t before = keys->size();
  for (std::string line; std::getline(in, line);) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty() && line[0] != '#') keys->push_back(line);
  }
  if (keys->size() == before) {
    return Status::Error(fmt::format("{} holds no API key (only blank or # lines)", path));
  }
  return Status::Ok();
}

}  // namespace

Status LoadConfigFile(const std::string& path, GatewayConfig* config) {
  try {
    ReadConfig(YAML::LoadFile(path), *config);
  } catch (const std::exception& e) {
    return Status::Error(fmt::format("{}: {}", path, e.what()));
  }
  return Status::Ok();
}

Status FinishConfig(GatewayConfig* c) {
  if (Status s = ReadKeysFile(c->api_keys_file, &c->api_keys); !s.ok()) return s;
  std::set<std::string> names, keys;
  for (TenantConfig& t : c->tenants) {
    if (Status s = ReadKeysFile(t.api_keys_file, &t.api_keys); !s.ok()) return s;
    if (t.name.empty() || t.name == kDefaultTenant || !names.insert(t.name).second) {
      return Status::Error(fmt::format("every tenant needs a name of its own (not '{}'): '{}'",
                                       kDefaultTenant, t.name));
    }
    if (t.api_keys.empty()) return Status::Error(fmt::format("tenant '{}' has no API key", t.name));
  }
  if (!c->api_keys.empty()) {  // the plain keys: one tenant without limits
    TenantConfig plain;
    plain.name = kDefaultTenant;
    plain.api_keys = c->api_keys;
    c->tenants.insert(c->tenants.begin(), std::move(plain));
  }
  for (const TenantConfig& t : c->tenants) {
    for (const std::string& key : t.api_keys) {
      if (!keys.insert(key).second) {
        return Status::Error(fmt::format("an API key of tenant '{}' is another's too", t.name));
      }
    }
  }
  if (!c->model_dir.empty() && (c->moe_layers == 0 || c->moe_top_k == 0)) {
    std::ifstream in(c->model_dir + "/config.json");
    if (in) {
      std::stringstream text;
      text << in.rdbuf();
      boost::system::error_code ec;
      boost::json::value v = boost::json::parse(text.str(), ec);
      if (!ec && v.is_object()) {
        const auto& o = v.as_object();
        if (c->moe_layers == 0) c->moe_layers = JsonCount(o, "num_hidden_layers").value_or(0);
        if (c->moe_top_k == 0) c->moe_top_k = JsonCount(o, "num_experts_per_tok").value_or(0);
      }
    }
  }
  if (c->models.empty()) c->models.push_back("kvgate-mock");
  if (c->block_size == 0) return Status::Error("block_size must be positive");
  if (c->workers.empty() && c->mock.count == 0 && c->fleet.etcd_url.empty()) {
    return Status::Error(
        "no workers: list them in the config, use --mock-workers N, or --etcd URL");
  }
  if (c->fleet.replica_id != "auto") {
    uint32_t origin = 0;
    const std::string& r = c->fleet.replica_id;
    const auto [end, ec] = std::from_chars(r.data(), r.data() + r.size(), origin);
    if (ec != std::errc() || end != r.data() + r.size() || origin == 0 || origin > 65535) {
      return Status::Error("cluster.replica_id must be auto or a number in 1..65535");
    }
  }
  std::set<std::string> ids;
  for (WorkerConfig& w : c->workers) {
    if (w.url.empty()) return Status::Error("every worker needs a url");
    if (Status s = discovery::FinishWorkerRecord(&w); !s.ok()) return s;
    if (!ids.insert(w.id).second) {
      return Status::Error(fmt::format("two workers have the id '{}'", w.id));
    }
  }
  return Status::Ok();
}

}  // namespace kvgate::gateway
