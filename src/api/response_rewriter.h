// Turns an engine's response into the client's: takes the engine-native routed experts
// out (wherever that engine puts them) and returns them normalized under `nvext` with the
// other fields the client asked for, drops a usage chunk the client did not ask for, and
// holds a stream's final chunk until everything that belongs in it has arrived (SGLang
// sends routed experts in a chunk after the finish_reason). It also reads the token counts
// the engine reports (the gateway checks them against its own: docs/design.md §14); events
// that can hold nothing it needs pass through unparsed.
#pragma once

#include <boost/json.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/request.h"
#include "api/routed_experts.h"
#include "api/sse.h"
#include "engines/engines.h"

namespace kvgate::api {

struct RewriteOptions {
  ExtraFields extra;
  bool drop_usage = false;  // usage was asked upstream for the gateway only
  uint32_t experts_layers = 0;
  uint32_t experts_top_k = 0;
  // The first prompt position kvgate asked experts for (engines' OpenAI responses do not
  // echo it; where one does, its echo wins).
  uint64_t experts_start = 0;
  // The request's `n`: with more than one choice, routed experts are a list in choice order.
  uint32_t choices = 1;
  // What only the gateway knows: where the request went and what it expected there.
  std::string worker_id;  // the worker record's id
  // Disaggregated serving: the prefill phase's worker; nullopt when there was none.
  std::optional<std::string> prefill_worker_id;
  // Set when a prefill phase ran: the prefill worker's routed experts (normalized, from the
  // same start), read when the response ends, for the prompt rows the decode worker lacks.
  std::function<boost::json::value()> prompt_experts;
  uint32_t dp_rank = 0;
  uint32_t cached_blocks = 0;
};

class ResponseRewriter {
 public:
  using Write = std::function<void(std::string)>;
  explicit ResponseRewriter(RewriteOptions options) : options_(options) {}

  // A whole JSON response: `nvext` added (the body is returned as it was when it is not a
  // JSON object).
  std::string RewriteBody(std::string body);

  // SSE bytes as they arrive; whatever the client should see now goes to `write`.
  void Feed(std::string_view bytes, const Write& write);
  // The stream ended: `complete` when the engine finished it, else it failed part-way
  // (the final chunk then goes out only if the engine had sent it).
  void Finish(bool complete, const Write& write);

  // Why routed experts could not be returned, once they were asked for and the response
  // completed (missing, malformed, wrong size); empty when they were fine.
  const std::string& experts_problem() const { return experts_problem_; }
  // What the engine reported so far.
  const engines::TokenCounts& counts() const { return counts_; }

 private:
  void OnEvent(std::string_view event, const Write& write);
  void FlushFinal(bool complete, const Write& write);
  // An event for the client: now, or after the final chunk while that one is held.
  void PassOn(std::string event, const Write& write);
  // The held final chunk (now `chunk`) goes out, then what was held behind it.
  void WriteHeld(boost::json::object chunk, const Write& write);
  boost::json::object Nvext(bool complete);
  boost::json::value ExpertsOfEveryChoice(const ExpertsContext& context, std::string* problem);
  void Keep(std::vector<engines::ChoiceExperts>& found);

  // Whether an event (its text) may hold anything this rewriter reads or changes.
  bool NeedsParse(std::string_view event) const;

  const RewriteOptions options_;
  const bool adds_nvext_ = options_.extra.any();
  SseSplitter splitter_;
  std::optional<boost::json::object> final_chunk_;
  std::vector<std::string> after_final_;
  bool final_flushed_ = false;
  std::map<uint32_t, boost::json::value> experts_;  // engine-native, by choice index
  uint64_t experts_start_ = options_.experts_start;
  engines::TokenCounts counts_;
  std::string experts_problem_;
};

}  // namespace kvgate::api
