// `kvgate events decode` (one payload on stdin -> JSON lines, docs/design.md §3) and
// `kvgate events listen` (live decoded batches from a publisher).
#include <boost/json.hpp>
#include <csignal>
#include <iostream>
#include <iterator>
#include <thread>

#include "commands.h"
#include "events/subscriber.h"
#include "wire/decode.h"

namespace kvgate::app {
namespace {

namespace json = boost::json;

json::array HashArray(std::span<const uint64_t> hashes) {
  json::array a;
  a.reserve(hashes.size());
  for (uint64_t h : hashes) a.emplace_back(h);
  return a;
}

json::object EventJson(const wire::DecodedBatch& batch, const wire::Event& e) {
  json::object o;
  switch (e.kind) {
    case wire::EventKind::kStored: {
      o["event"] = "stored";
      o["block_hashes"] = HashArray(batch.BlockHashes(e));
      o["parent_hash"] = e.has_parent ? json::value(e.parent_hash) : json::value(nullptr);
      json::array tokens;
      tokens.reserve(e.token_ids.size);
      for (uint32_t t : batch.TokenIds(e)) tokens.emplace_back(t);
      o["token_ids"] = std::move(tokens);
      o["block_size"] = e.block_size;
      o["medium"] = wire::TierName(e.medium);
      const auto lora = batch.LoraName(e);
      o["lora_name"] = lora ? json::value(json::string(*lora)) : json::value(nullptr);
      o["is_eagle"] = e.is_eagle;
      if (e.has_cache_salt) o["cache_salt"] = batch.CacheSalt(e);  // beyond §3: only when sent
      break;
    }
    case wire::EventKind::kRemoved:
      o["event"] = "removed";
      o["block_hashes"] = HashArray(batch.BlockHashes(e));
      o["medium"] = wire::TierName(e.medium);
      if (e.has_copy_counts) {
        json::array counts;
        for (uint32_t c : batch.RemainingCopyCounts(e)) counts.emplace_back(c);
        o["remaining_copy_counts"] = std::move(counts);
      }
      break;
    case wire::EventKind::kCleared:
      o["event"] = "cleared";
      break;
    case wire::EventKind::kDropped:
      o["event"] = "dropped";
      o["index"] = e.index;
      o["reason"] = e.message;
      break;
    case wire::EventKind::kInvalid:
      o["event"] = "invalid";
      o["index"] = e.index;
      o["error"] = e.message;
      break;
  }
  return o;
}

void PrintBatch(const wire::DecodedBatch& batch, std::ostream& out) {
  json::object head;
  head["ts"] = batch.ts;
  head["dp_rank"] = batch.dp_rank ? json::value(*batch.dp_rank) : json::value(nullptr);
  head["events"] = batch.events.size();
  out << json::serialize(json::object{{"batch", std::move(head)}}) << '\n';
  for (const wire::Event& e : batch.events) out << json::serialize(EventJson(batch, e)) << '\n';
}

int Decode() {
  std::string payload((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  wire::DecodedBatch batch;
  Status status = wire::DecodeEventBatch(payload, batch);
  if (!status.ok()) {
    std::cerr << "kvgate events decode: " << status.message() << '\n';
    return 1;
  }
  PrintBatch(batch, std::cout);
  return 0;
}

volatile std::sig_atomic_t g_stop = 0;

int Listen(const std::string& endpoint, const std::string& replay, uint32_t block_size) {
  std::signal(SIGINT, [](int) { g_stop = 1; });
  std::signal(SIGTERM, [](int) { g_stop = 1; });
  kv::PrefixIndex index(block_size);
  events::Subscriber subscriber(
      &index, {}, [&index](uint32_t, uint64_t seq, const wire::DecodedBatch& batch) {
        // Index size after the batch applied: shows restarts and clears taking effect.
        std::cout << json::serialize(
                         json::object{{"seq", seq}, {"index_entries", index.Stats().entries}})
                  << '\n';
        PrintBatch(batch, std::cout);
        std::cout.flush();
      });
  subscriber.AddWorker({0, endpoint, replay, std::nullopt});
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return 0;
}

}  // namespace

void AddEventsCommand(CLI::App& app, int& exit_code) {
  CLI::App* events = app.add_subcommand("events", "Decode and inspect KV-cache events");
  events->require_subcommand(1);
  CLI::App* decode = events->add_subcommand(
      "decode", "Decode one msgpack EventBatch payload from stdin and print JSON lines");
  decode->callback([&exit_code] { exit_code = Decode(); });

  CLI::App* listen = events->add_subcommand(
      "listen", "Subscribe to an engine's KV-event publisher and print decoded batches");
  static std::string endpoint, replay;
  static uint32_t block_size = 16;
  listen->add_option("--endpoint", endpoint, "ZMQ PUB endpoint, e.g. tcp://127.0.0.1:5557")
      ->required();
  listen->add_option("--replay", replay, "ZMQ replay ROUTER endpoint, e.g. tcp://127.0.0.1:5558");
  listen->add_option("--block-size", block_size, "Tokens per KV block of the local index")
      ->default_val(16);
  listen->callback([&exit_code] { exit_code = Listen(endpoint, replay, block_size); });
}

}  // namespace kvgate::app
