// `kvgate hash`: token ids (JSON array on stdin) -> local and sequence block hashes.
#include <boost/json.hpp>
#include <iostream>
#include <iterator>

#include "commands.h"
#include "kv/block_hash.h"

namespace kvgate::app {
namespace {

namespace json = boost::json;

struct HashOptions {
  uint32_t block_size = 16;
  std::string lora_name;
  std::string cache_salt;
  bool eagle = false;
};

int Hash(const HashOptions& options) {
  std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  boost::system::error_code ec;
  json::value parsed = json::parse(input, ec);
  if (ec || !parsed.is_array()) {
    std::cerr << "kvgate hash: stdin must be a JSON array of token ids\n";
    return 1;
  }
  std::vector<uint32_t> tokens;
  for (const json::value& v : parsed.as_array()) {
    // Boost.JSON stores non-negative integers below 2^63 as int64.
    if (!v.is_int64() || v.as_int64() < 0 || v.as_int64() > 0xFFFFFFFFll) {
      std::cerr << "kvgate hash: token ids must be integers in [0, 2^32)\n";
      return 1;
    }
    tokens.push_back(static_cast<uint32_t>(v.as_int64()));
  }
  std::vector<uint64_t> local, sequence;
  kv::AppendLocalBlockHashes(tokens, options.block_size,
                             kv::BlockHashSeed(options.lora_name, options.cache_salt),
                             options.eagle, local);
  kv::SequenceHashes(local, sequence);
  json::object out;
  out["local"] = json::array(local.begin(), local.end());
  out["sequence"] = json::array(sequence.begin(), sequence.end());
  std::cout << json::serialize(out) << '\n';
  return 0;
}

}  // namespace

void AddHashCommand(CLI::App& app, int& exit_code) {
  static HashOptions options;
  CLI::App* cmd = app.add_subcommand(
      "hash",
      "Block hashes of token ids (JSON array on stdin): {\"local\":[..],\"sequence\":[..]}");
  cmd->add_option("--block-size", options.block_size, "Tokens per KV block")
      ->required()
      ->check(CLI::Range(1u, 1u << 20));
  cmd->add_option("--lora-name", options.lora_name, "LoRA adapter name (changes the seed)");
  cmd->add_option("--cache-salt", options.cache_salt, "Cache salt / namespace (changes the seed)");
  cmd->add_flag("--eagle", options.eagle,
                "EAGLE windows: block_size + 1 tokens, stride block_size");
  cmd->callback([&exit_code] { exit_code = Hash(options); });
}

}  // namespace kvgate::app
