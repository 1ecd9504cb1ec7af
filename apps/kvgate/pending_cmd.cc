// Subcommands whose implementation has not landed yet. Their flags are the contract of
// DESIGN.md §10, so `--help` is already accurate; running one exits 2 and says so.
#include <iostream>

#include "commands.h"

namespace kvgate::app {
namespace {

void MarkPending(CLI::App* cmd, const std::string& issue, int& exit_code) {
  cmd->callback([cmd, issue, &exit_code] {
    std::cerr << "kvgate " << cmd->get_name() << ": not implemented yet (tracked in issue " << issue
              << ")\n";
    exit_code = 2;
  });
}

}  // namespace

void AddPendingCommands(CLI::App& app, int& exit_code) {
  // Values parsed here are discarded; they exist so help and flag validation are real.
  static std::string s;
  static int i = 0;

  CLI::App* serve = app.add_subcommand("serve", "Run the OpenAI-compatible KV-aware gateway");
  serve->add_option("--config", s, "YAML config file (flags override it)");
  serve->add_option("--host", s, "Listen address")->default_str("127.0.0.1");
  serve->add_option("--port", i, "Listen port")->default_str("8000");
  serve->add_option("--model-dir", s,
                    "Model dir: tokenizer.json, tokenizer_config.json, config.json");
  serve->add_option("--mock-workers", i, "Start N simulated engines in-process");
  serve->add_option("--mock-engine", s, "Engine the mock workers imitate: vllm|sglang");
  serve->add_option("--policy", s, "kv|round_robin|random|least_loaded|approx")->default_str("kv");
  serve->add_option("--block-size", i, "Tokens per KV block")->default_str("16");
  MarkPending(serve, "#8", exit_code);
}

}  // namespace kvgate::app
