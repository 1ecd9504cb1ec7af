// `kvgate tokenize`: text -> ids (or ids -> text) with a HF tokenizer.json (docs/design.md §10).
#include <boost/json.hpp>
#include <iostream>
#include <iterator>

#include "commands.h"
#include "tokenizer/prefix_cache.h"
#include "tokenizer/tokenizer.h"

namespace kvgate::app {
namespace {

namespace json = boost::json;

struct TokenizeFlags {
  std::string tokenizer;
  bool add_special_tokens = false;
  bool decode = false;
  bool jsonl = false;
  bool prefix_cache = false;
};

std::string IdsJson(const std::vector<uint32_t>& ids) {
  return json::serialize(json::array(ids.begin(), ids.end()));
}

// One input (a text, or a JSON array of ids with --decode) -> one JSON output line.
// With `cache`, texts go through it (the gateway's way for long prompts).
Status Convert(const tokenizer::Tokenizer& tok, tokenizer::PrefixCache* cache,
               const TokenizeFlags& f, std::string_view input, std::string* out) {
  if (!f.decode) {
    std::vector<uint32_t> ids;
    tokenizer::PrefixCache::Use use;
    Status s =
        cache ? cache->Encode(input, &ids, &use) : tok.Encode(input, f.add_special_tokens, &ids);
    if (!s.ok()) return s;
    *out = IdsJson(ids);
    if (cache)
      std::cerr << "reused " << use.reused_bytes << " bytes, " << use.reused_ids << " ids\n";
    return Status::Ok();
  }
  boost::system::error_code ec;
  json::value v = json::parse(input, ec);
  if (ec || !v.is_array()) return Status::Error("expected a JSON array of token ids");
  std::vector<uint32_t> ids;
  for (const json::value& id : v.as_array()) {
    if (!id.is_int64() || id.as_int64() < 0 || id.as_int64() > UINT32_MAX) {
      return Status::Error("token ids must be non-negative integers");
    }
    ids.push_back(static_cast<uint32_t>(id.as_int64()));
  }
  *out = json::serialize(json::value(tok.Decode(ids)));
  return Status::Ok();
}

int Tokenize(const TokenizeFlags& f) {
  std::unique_ptr<tokenizer::Tokenizer> tok;
  if (Status s = tokenizer::Tokenizer::Load(f.tokenizer, &tok); !s.ok()) {
    std::cerr << "kvgate tokenize: " << s.message() << '\n';
    return 1;
  }
  if (f.prefix_cache && (f.add_special_tokens || f.decode || !f.jsonl)) {
    std::cerr << "kvgate tokenize: --prefix-cache goes with --jsonl, without special tokens\n";
    return 1;
  }
  std::unique_ptr<tokenizer::PrefixCache> cache;
  if (f.prefix_cache) cache = std::make_unique<tokenizer::PrefixCache>(*tok, size_t{64} << 20);
  if (!f.jsonl) {
    std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    std::string out;
    if (Status s = Convert(*tok, nullptr, f, input, &out); !s.ok()) {
      std::cerr << "kvgate tokenize: " << s.message() << '\n';
      return 1;
    }
    std::cout << (f.decode ? json::value_to<std::string>(json::parse(out)) : out)
              << (f.decode ? "" : "\n");
    return 0;
  }
  // --jsonl: every line is a JSON string (or an ids array with --decode).
  for (std::string line; std::getline(std::cin, line);) {
    std::string out;
    Status s;
    if (f.decode) {
      s = Convert(*tok, nullptr, f, line, &out);
    } else {
      boost::system::error_code ec;
      json::value v = json::parse(line, ec);
      s = ec || !v.is_string()
              ? Status::Error("each line must be a JSON string")
              : Convert(*tok, cache.get(), f, std::string_view(v.as_string()), &out);
    }
    std::cout << (s.ok() ? out : json::serialize(json::object{{"error", s.message()}})) << '\n';
  }
  return 0;
}

}  // namespace

void AddTokenizeCommand(CLI::App& app, int& exit_code) {
  static TokenizeFlags f;
  CLI::App* cmd = app.add_subcommand("tokenize", "Tokenize stdin with a HF tokenizer.json");
  cmd->add_option("--tokenizer", f.tokenizer, "tokenizer.json")->required();
  cmd->add_flag("--add-special-tokens", f.add_special_tokens,
                "Add BOS/EOS as the tokenizer's post-processor says");
  cmd->add_flag("--decode", f.decode, "Decode a JSON array of ids instead");
  cmd->add_flag("--jsonl", f.jsonl, "One JSON string per line in, one array per line out");
  cmd->add_flag("--prefix-cache", f.prefix_cache,
                "With --jsonl: tokenize past what a previous line shares (as the gateway does "
                "for long prompts); the reuse of each line goes to stderr");
  cmd->callback([&exit_code] { exit_code = Tokenize(f); });
}

}  // namespace kvgate::app
