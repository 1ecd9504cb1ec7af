// `kvgate mocker`: one simulated engine as its own process (docs/design.md §8, §10).
#include <csignal>
#include <iostream>
#include <thread>

#include "api/prompt.h"
#include "commands.h"
#include "discovery/worker_role.h"
#include "mocker/server.h"

namespace kvgate::app {
namespace {

struct MockerFlags {
  mocker::MockerOptions o;
  std::string engine = "vllm";
  std::string event_format;  // empty: the engine's own
  std::string hash_format = "int";
  std::string model_dir;
  std::string role = "both";
};

volatile std::sig_atomic_t g_stop = 0;

int RunMocker(MockerFlags& f) {
  auto kind = engines::ParseEngineKind(f.engine);
  if (!kind) {
    std::cerr << "kvgate mocker: --engine must be one of " << engines::EngineNames() << '\n';
    return 2;
  }
  f.o.kind = *kind;
  f.o.event_format.format = engines::TraitsOf(*kind).event_format;
  if (f.event_format == "vllm-map") {
    f.o.event_format.format = wire::EventFormat::kVllmMap;
  } else if (f.event_format == "vllm-positional") {
    f.o.event_format.format = wire::EventFormat::kVllmPositional;
  } else if (f.event_format == "sglang") {
    f.o.event_format.format = wire::EventFormat::kSglang;
  } else if (!f.event_format.empty()) {
    std::cerr << "kvgate mocker: --event-format must be vllm-map, vllm-positional or sglang\n";
    return 2;
  }
  const auto role = discovery::ParseRole(f.role);
  if (!role) {
    std::cerr << "kvgate mocker: --role must be both, prefill or decode\n";
    return 2;
  }
  f.o.transfer.role = *role;
  f.o.event_format.hash_format =
      f.hash_format == "bytes" ? wire::HashFormat::kBytes : wire::HashFormat::kInt;
  if (!f.model_dir.empty()) {
    api::ModelFiles files;
    if (Status s = api::LoadModelFiles(f.model_dir, &files); !s.ok()) {
      std::cerr << "kvgate mocker: " << s.message() << '\n';
      return 1;
    }
    f.o.tokenizer = files.tokenizer;
    f.o.chat_template = files.chat_template;
  }
  // Before the address is announced: whoever started us may signal as soon as they see it.
  std::signal(SIGINT, [](int) { g_stop = 1; });
  std::signal(SIGTERM, [](int) { g_stop = 1; });
  mocker::MockerServer server(f.o);
  if (Status s = server.Start(); !s.ok()) {
    std::cerr << "kvgate mocker: " << s.message() << '\n';
    return 1;
  }
  std::cout << "kvgate mocker: http://" << f.o.host << ':' << server.port() << " (" << f.engine
            << ")";
  if (!f.o.kv_events.empty()) std::cout << ", KV events on " << f.o.kv_events;
  if (!f.o.kv_replay.empty()) std::cout << ", replay on " << f.o.kv_replay;
  if (f.role != "both") std::cout << ", role " << f.role;
  std::cout << std::endl;
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  server.Stop();
  return 0;
}

}  // namespace

void AddMockerCommand(CLI::App& app, int& exit_code) {
  static MockerFlags f;
  mocker::MockerOptions& o = f.o;
  CLI::App* cmd = app.add_subcommand("mocker", "Run one simulated engine (HTTP + KV events)");
  cmd->add_option("--port", o.port, "HTTP port")->required();
  cmd->add_option("--host", o.host, "Listen address")->capture_default_str();
  cmd->add_option("--engine", f.engine, "Engine to imitate: vllm|vllm-lists|sglang")
      ->capture_default_str();
  cmd->add_option("--model", o.model, "Model name it serves")->capture_default_str();
  cmd->add_option("--kv-events", o.kv_events,
                  "ZMQ PUB endpoint for KV events, e.g. tcp://127.0.0.1:5557");
  cmd->add_option("--kv-replay", o.kv_replay,
                  "ZMQ ROUTER endpoint for replay, e.g. tcp://127.0.0.1:5558");
  cmd->add_option("--event-format", f.event_format, "vllm-map|vllm-positional|sglang")
      ->capture_default_str();
  cmd->add_option("--block-hash-format", f.hash_format, "int|bytes")
      ->check(CLI::IsMember({"int", "bytes"}))
      ->capture_default_str();
  cmd->add_option("--dp-rank", o.dp_rank, "data_parallel_rank written in event batches")
      ->capture_default_str();
  cmd->add_option("--block-size", o.engine.block_size, "Tokens per KV block")
      ->capture_default_str()
      ->check(CLI::Range(1u, 4096u));
  cmd->add_option("--num-blocks", o.engine.num_blocks, "KV blocks in the pool")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 28));
  cmd->add_flag("--eagle", o.engine.eagle,
                "Publish KV events as an EAGLE engine does (blocks hashed over one more token, "
                "token ids as bigram pairs)");
  cmd->add_option("--max-num-seqs", o.engine.max_num_seqs, "Max running sequences")
      ->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", o.engine.max_num_batched_tokens,
                  "Token budget per step")
      ->capture_default_str();
  cmd->add_option("--model-dir", f.model_dir,
                  "Model dir (tokenizer.json, chat template): text prompts are tokenized and "
                  "chat requests rendered as the engine would; without it, text is its UTF-8 "
                  "bytes");
  cmd->add_option("--moe-layers", o.moe.layers, "MoE layers for routed experts");
  cmd->add_option("--moe-topk", o.moe.top_k, "Experts per token");
  cmd->add_option("--moe-experts", o.moe.experts, "Experts per layer");
  cmd->add_flag("--return-routed-experts", o.return_routed_experts,
                "Return routed experts for every request");
  cmd->add_option("--speedup", o.engine.timing.speedup, "Divide simulated step times by X")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  uint64_t seed = 0;
  cmd->add_option("--seed", seed,
                  "Random seed (the mocker is deterministic; accepted for scripts)");
  cmd->add_option("--fault-crash-after", o.faults.crash_after, "Exit after N finished requests");
  cmd->add_option("--fault-hang-every", o.faults.hang_every, "Never answer every Nth request");
  cmd->add_option("--fault-drop-every", o.faults.drop_every,
                  "Send every Nth event batch only to the replay buffer (a gap)");
  cmd->add_option("--role", f.role, "Disaggregated serving: both|prefill|decode")
      ->capture_default_str();
  cmd->add_option("--bootstrap-port", o.transfer.bootstrap_port,
                  "Prefill, SGLang: serve bootstrap rooms on this port");
  cmd->add_option("--transfer-gbps", o.transfer.gbps, "KV transfer bandwidth between workers")
      ->capture_default_str();
  cmd->add_option("--kv-bytes-per-token", o.transfer.kv_bytes_per_token,
                  "KV bytes per token (transfer size)")
      ->capture_default_str();
  cmd->add_option("--fault-corrupt-every", o.faults.corrupt_every,
                  "Add an invalid event to every Nth event batch");
  cmd->add_option("--fault-restart-after", o.faults.restart_after,
                  "After N finished requests: clear the cache and restart event seq at 0");
  cmd->add_option("--fault-delay-ms", o.faults.delay_ms, "Hold each request this long first");
  cmd->callback([&exit_code] { exit_code = RunMocker(f); });
}

}  // namespace kvgate::app
