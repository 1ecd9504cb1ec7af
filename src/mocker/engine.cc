#include "mocker/engine.h"

#include <algorithm>

#include "common/splitmix.h"
#include "kv/block_hash.h"

namespace kvgate::mocker {

struct Engine::Sequence {
  uint64_t id = 0;
  std::vector<uint32_t> tokens;  // prompt, then generated tokens
  uint32_t max_tokens = 1;
  uint32_t generated = 0;
  uint64_t seed = kv::kDefaultSeed;
  std::string lora_name;
  std::string cache_salt;
  uint64_t prompt_hash = 0;
  std::vector<uint64_t> hashes;  // sequence hashes of the full blocks of `tokens`
  std::vector<uint32_t> blocks;  // KV blocks backing tokens [0, computed)
  size_t computed = 0;           // tokens whose KV is computed
  size_t committed = 0;          // leading blocks that are in the prefix cache
  bool first_emitted = false;
  bool scheduled_once = false;  // cached_tokens is set (the first admission's cache hit)
  uint32_t cached_tokens = 0;
  uint32_t imported_blocks = 0;

  size_t pending() const { return tokens.size() - computed; }
  // Hashes for every full block of the tokens so far.
  void HashFullBlocks(uint32_t block_size) {
    const size_t full = tokens.size() / block_size;
    std::vector<uint64_t> local;
    const size_t from = hashes.size();
    if (from >= full) return;
    kv::AppendLocalBlockHashes(
        std::span(tokens).subspan(from * block_size, (full - from) * block_size), block_size, seed,
        false, local);
    for (uint64_t h : local) {
      hashes.push_back(hashes.empty() ? h : kv::ChainSequenceHash(hashes.back(), h));
    }
  }
};

Engine::Engine(const EngineConfig& config)
    : config_(config), pool_(config.num_blocks, config.block_size, config.eagle) {}

Engine::~Engine() = default;

uint32_t Engine::GeneratedToken(uint64_t prompt_hash, uint32_t index) {
  return 1000 + static_cast<uint32_t>(SplitMix64(prompt_hash + index) % 30000);
}

bool Engine::Submit(EngineRequest request) {
  if (request.prompt.empty()) return false;
  // A request that could not fit even in an empty pool would preempt itself forever.
  const size_t tokens = request.prompt.size() + std::max<uint32_t>(1, request.max_tokens);
  if ((tokens + config_.block_size - 1) / config_.block_size > config_.num_blocks) return false;
  auto seq = std::make_unique<Sequence>();
  seq->id = request.id;
  seq->tokens = std::move(request.prompt);
  seq->max_tokens = std::max<uint32_t>(1, request.max_tokens);
  seq->seed = kv::BlockHashSeed(request.lora_name, request.cache_salt);
  seq->lora_name = std::move(request.lora_name);
  seq->cache_salt = std::move(request.cache_salt);
  seq->imported_blocks = request.imported_blocks;
  // Sample 0 generates what a request with n = 1 does; the others, tokens of their own.
  seq->prompt_hash = XXH3_64bits(seq->tokens.data(), seq->tokens.size() * sizeof(uint32_t)) +
                     request.sample * 0x9E3779B97F4A7C15ull;
  waiting_.push_back(std::move(seq));
  return true;
}

bool Engine::EnsureBlocks(Sequence& seq, size_t tokens) {
  const size_t need = (tokens + config_.block_size - 1) / config_.block_size;
  while (seq.blocks.size() < need) {
    auto id = pool_.Allocate();
    if (!id) return false;
    seq.blocks.push_back(*id);
  }
  return true;
}

void Engine::Free(Sequence& seq) {
  // Tail first, so the end of a prefix is evicted before its beginning.
  for (auto it = seq.blocks.rbegin(); it != seq.blocks.rend(); ++it) pool_.Release(*it);
  seq.blocks.clear();
}

bool Engine::Abort(uint64_t id) {
  auto has_id = [id](const std::unique_ptr<Sequence>& seq) { return seq->id == id; };
  if (auto it = std::find_if(running_.begin(), running_.end(), has_id); it != running_.end()) {
    Free(**it);
    running_.erase(it);
    return true;
  }
  if (auto it = std::find_if(waiting_.begin(), waiting_.end(), has_id); it != waiting_.end()) {
    Free(**it);
    waiting_.erase(it);
    return true;
  }
  return false;
}

void Engine::Preempt(Sequence& seq) {
  // Recompute-style preemption: drop the KV, keep the tokens, start over when readmitted.
  Free(seq);
  seq.computed = 0;
  seq.committed = 0;
}

void Engine::CommitFullBlocks(Sequence& seq) {
  size_t full = seq.computed / config_.block_size;
  if (config_.eagle) full = std::min(full, (seq.tokens.size() - 1) / config_.block_size);
  if (seq.committed >= full) return;
  seq.HashFullBlocks(config_.block_size);
  for (size_t i = seq.committed; i < full; ++i) {
    const std::optional<uint64_t> parent =
        i == 0 ? std::nullopt : std::optional<uint64_t>(seq.hashes[i - 1]);
    pool_.Commit(seq.blocks[i], seq.hashes[i], parent,
                 std::span(seq.tokens)
                     .subspan(i * config_.block_size, config_.block_size + (config_.eagle ? 1 : 0)),
                 seq.lora_name, seq.cache_salt);
  }
  seq.committed = full;
}

bool Engine::Admit(Sequence& seq, uint32_t& budget) {
  seq.HashFullBlocks(config_.block_size);
  // Like vLLM: at most len - 1 tokens from the cache, in whole blocks (the last token must
  // be computed to sample from it).
  const uint32_t limit = static_cast<uint32_t>((seq.tokens.size() - 1) / config_.block_size);
  const uint32_t hit = pool_.CachedPrefix(seq.hashes, limit);
  for (uint32_t i = 0; i < hit; ++i) seq.blocks.push_back(pool_.AcquireCached(seq.hashes[i]));
  seq.computed = size_t{hit} * config_.block_size;
  seq.committed = hit;
  // KV sent by a prefill worker lands in fresh blocks past the local hit, computed as is.
  const uint32_t known = std::max(hit, std::min(seq.imported_blocks, limit));
  const size_t chunk =
      std::min<size_t>(seq.tokens.size() - size_t{known} * config_.block_size, budget);
  if (!EnsureBlocks(seq, size_t{known} * config_.block_size + chunk)) {
    Preempt(seq);  // not enough room: give the blocks back and stay waiting
    return false;
  }
  seq.computed = size_t{known} * config_.block_size;
  // Like vLLM: counted once, at the first admission. A preempted sequence readmitted later
  // finds its own recomputed blocks cached; those are not cache hits of the request.
  if (!seq.scheduled_once) seq.cached_tokens = known * config_.block_size;
  seq.scheduled_once = true;
  return true;
}

StepResult Engine::Step() {
  StepResult result;
  uint32_t budget = config_.max_num_batched_tokens;
  struct Scheduled {
    Sequence* seq;
    size_t chunk;
    bool prefill;
  };
  std::vector<Scheduled> scheduled;

  // Running sequences first, oldest first; preempt the newest when blocks run out.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence& seq = *running_[i];
    const size_t chunk = std::min<size_t>(seq.pending(), budget);
    if (!EnsureBlocks(seq, seq.computed + chunk)) {
      Sequence& victim = *running_.back();
      Preempt(victim);
      waiting_.push_front(std::move(running_.back()));
      running_.pop_back();
      std::erase_if(scheduled, [&](const Scheduled& s) {
        if (s.seq != &victim) return false;
        budget += static_cast<uint32_t>(s.chunk);
        return true;
      });
      if (&victim == &seq) break;
      continue;  // retry this sequence with the freed blocks
    }
    scheduled.push_back({&seq, chunk, !(seq.first_emitted && seq.pending() == 1)});
    budget -= static_cast<uint32_t>(chunk);
    ++i;
  }
  // Then waiting sequences, in arrival order, while there is room.
  while (!waiting_.empty() && running_.size() < config_.max_num_seqs && budget > 0) {
    Sequence& seq = *waiting_.front();
    if (!Admit(seq, budget)) break;
    const size_t chunk = std::min<size_t>(seq.pending(), budget);
    scheduled.push_back({&seq, chunk, !(seq.first_emitted && seq.pending() == 1)});
    budget -= static_cast<uint32_t>(chunk);
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }

  // Run the step: compute KV for the scheduled tokens, cache full blocks, sample.
  for (const Scheduled& s : scheduled) {
    Sequence& seq = *s.seq;
    seq.computed += s.chunk;
    if (s.prefill) {
      result.prefill_tokens += s.chunk;
    } else {
      ++result.decode_tokens;
    }
    CommitFullBlocks(seq);
    if (seq.computed < seq.tokens.size()) continue;  // prefill continues next step
    const uint32_t token = GeneratedToken(seq.prompt_hash, seq.generated);
    seq.tokens.push_back(token);
    ++seq.generated;
    result.outputs.push_back(
        {seq.id, token, !seq.first_emitted, seq.generated >= seq.max_tokens, seq.cached_tokens});
    seq.first_emitted = true;
  }
  const double usage = static_cast<double>(pool_.used()) / pool_.num_blocks();
  result.duration_ms =
      config_.timing.StepMs(result.prefill_tokens, result.decode_tokens > 0, usage);

  // Finished sequences leave; their full blocks stay cached.
  std::erase_if(running_, [&](const std::unique_ptr<Sequence>& seq) {
    if (seq->generated < seq->max_tokens) return false;
    Free(*seq);
    return true;
  });
  result.events = pool_.TakeEvents();
  return result;
}

}  // namespace kvgate::mocker
