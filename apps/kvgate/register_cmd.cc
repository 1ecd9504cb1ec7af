// `kvgate register`: keeps one engine's worker record in etcd while it is healthy
// (docs/design.md §11). Runs beside each engine until SIGTERM.
#include <csignal>
#include <iostream>

#include "commands.h"
#include "common/log.h"
#include "discovery/registrar.h"

namespace kvgate::app {
namespace {

std::atomic<bool> g_stop{false};

}  // namespace

void AddRegisterCommand(CLI::App& app, int& exit_code) {
  auto* cmd =
      app.add_subcommand("register", "Keep an engine's worker record in etcd while it is up");
  auto o = std::make_shared<discovery::RegistrarOptions>();
  auto engine = std::make_shared<std::string>("vllm");
  auto role = std::make_shared<std::string>("both");
  cmd->add_option("--etcd", o->etcd_url, "etcd client URL (http://host:2379)")->required();
  cmd->add_option("--etcd-prefix", o->prefix, "Key prefix (default /kvgate)");
  cmd->add_option("--url", o->record.url, "The engine's base URL (http://host:port)")->required();
  cmd->add_option("--engine", *engine, "vllm|sglang|trtllm (default vllm)");
  cmd->add_option("--kv-events", o->record.kv_events, "The engine's KV-event ZMQ PUB endpoint");
  cmd->add_option("--kv-replay", o->record.kv_replay, "The engine's replay ZMQ ROUTER endpoint");
  cmd->add_option("--id", o->record.id, "Worker id (default: host:port of --url)");
  cmd->add_option("--role", *role, "both|prefill|decode (default both)");
  cmd->add_option("--dp-size", o->record.dp_size, "Data-parallel ranks (default 1)");
  cmd->add_option("--model", o->record.model, "Served model (default: the gateway's)");
  cmd->add_option("--block-size", o->record.block_size, "KV block size (default: the gateway's)");
  cmd->add_option("--bootstrap-port", o->record.bootstrap_port, "SGLang bootstrap port");
  cmd->add_option("--ttl-s", o->ttl_seconds, "Lease TTL in seconds (default 10)");
  cmd->callback([o, engine, role, &exit_code] {
    auto kind = engines::ParseEngineKind(*engine);
    auto parsed_role = discovery::ParseRole(*role);
    if (!kind || !parsed_role) {
      std::cerr << "kvgate register: --engine must be one of " << engines::EngineNames()
                << " and --role one of both, prefill, decode\n";
      exit_code = 2;
      return;
    }
    o->record.engine = *kind;
    o->record.role = *parsed_role;
    if (Status s = discovery::FinishWorkerRecord(&o->record); !s.ok()) {
      std::cerr << "kvgate register: " << s.message() << '\n';
      exit_code = 2;
      return;
    }
    std::signal(SIGINT, [](int) { g_stop = true; });
    std::signal(SIGTERM, [](int) { g_stop = true; });
    std::signal(SIGPIPE, SIG_IGN);
    if (Status s = discovery::RunRegistrar(*o, g_stop); !s.ok()) {
      std::cerr << "kvgate register: " << s.message() << '\n';
      exit_code = 2;
    }
  });
}

}  // namespace kvgate::app
