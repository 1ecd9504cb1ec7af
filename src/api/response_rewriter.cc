#include "api/response_rewriter.h"

#include <fmt/format.h>

#include "api/request_fields.h"
#include "api/routed_experts.h"

namespace kvgate::api {
namespace {

namespace json = boost::json;

bool HasFinishReason(const json::object& o) {
  const json::value* reason = o.if_contains("finish_reason");
  return reason && !reason->is_null();
}

bool IsFinalChunk(const json::object& chunk) {
  if (const json::value* choices = chunk.if_contains("choices"); choices && choices->is_array()) {
    for (const json::value& c : choices->as_array()) {
      if (c.is_object() && HasFinishReason(c.as_object())) return true;
    }
  }
  const json::value* meta = chunk.if_contains("meta_info");
  return meta && meta->is_object() && HasFinishReason(meta->as_object());
}

// A chunk left with nothing for the client once kvgate took what it moved elsewhere.
bool IsEmptyChunk(const json::object& chunk) {
  const json::value* choices = chunk.if_contains("choices");
  const bool no_choices =
      choices == nullptr || (choices->is_array() && choices->as_array().empty());
  return no_choices && !chunk.contains("usage") && !chunk.contains("meta_info") &&
         !chunk.contains("text");
}

std::string Unchanged(std::string_view event) { return std::string(event) + "\n\n"; }

}  // namespace

std::string ResponseRewriter::RewriteBody(std::string body) {
  boost::system::error_code ec;
  json::value parsed = ParseJson(body, ec);
  if (ec || !parsed.is_object()) return body;
  json::object& o = parsed.as_object();
  if (options_.extra.routed_experts) {
    std::vector<engines::ChoiceExperts> found;
    engines::TakeRoutedExperts(o, found, &experts_start_);
    Keep(found);
  }
  engines::ReadTokenCounts(o, &counts_);
  if (!adds_nvext_) return body;
  o["nvext"] = Nvext(/*complete=*/true);
  return json::serialize(o);
}

void ResponseRewriter::Feed(std::string_view bytes, const Write& write) {
  splitter_.Feed(bytes, [&](std::string_view event) { OnEvent(event, write); });
}

void ResponseRewriter::Finish(bool complete, const Write& write) {
  if (complete && !splitter_.pending().empty()) write(std::string(splitter_.pending()));
  FlushFinal(complete, write);
}

void ResponseRewriter::OnEvent(std::string_view event, const Write& write) {
  // Most events (a token each) hold nothing for us: pass them on without taking them apart.
  if (!NeedsParse(event) && event.find("[DONE]") == std::string_view::npos) {
    return PassOn(Unchanged(event), write);
  }
  const std::string data = SseData(event);
  if (data == "[DONE]") {
    FlushFinal(/*complete=*/true, write);
    write(std::string(kSseDone));
    return;
  }
  boost::system::error_code ec;
  json::value parsed = data.empty() ? json::value() : ParseJson(data, ec);
  if (ec || !parsed.is_object()) return PassOn(Unchanged(event), write);  // not ours
  json::object& chunk = parsed.as_object();
  bool modified = false;
  if (options_.extra.routed_experts) {
    std::vector<engines::ChoiceExperts> found;
    uint64_t start = options_.experts_start;
    if (engines::TakeRoutedExperts(chunk, found, &start)) {
      Keep(found);
      experts_start_ = start;
      modified = true;
    }
  }
  engines::ReadTokenCounts(chunk, &counts_);
  if (options_.drop_usage && chunk.erase("usage")) modified = true;
  if (modified && IsEmptyChunk(chunk)) return;
  if (adds_nvext_ && !final_flushed_ && IsFinalChunk(chunk)) {
    // Several choices each finish: nvext goes with the last to finish, so one held already
    // goes out as it was.
    if (final_chunk_) WriteHeld(std::move(*final_chunk_), write);
    final_chunk_ = std::move(chunk);
    return;
  }
  PassOn(modified ? SseEvent(json::serialize(chunk)) : Unchanged(event), write);
}

void ResponseRewriter::PassOn(std::string event, const Write& write) {
  if (final_chunk_) {
    after_final_.push_back(std::move(event));  // it goes out after the held final chunk
  } else {
    write(std::move(event));
  }
}

bool ResponseRewriter::NeedsParse(std::string_view event) const {
  auto has = [&](std::string_view key) { return event.find(key) != std::string_view::npos; };
  return options_.extra.routed_experts || has("\"usage\"") || has("\"meta_info\"") ||
         (adds_nvext_ && has("\"finish_reason\""));
}

void ResponseRewriter::FlushFinal(bool complete, const Write& write) {
  if (final_flushed_ || !adds_nvext_) return;
  final_flushed_ = true;
  if (!complete && !final_chunk_) return;  // cut short before the end: nothing to finish
  json::object chunk =
      final_chunk_ ? std::move(*final_chunk_) : json::object{{"choices", json::array{}}};
  chunk["nvext"] = Nvext(complete);
  WriteHeld(std::move(chunk), write);
}

void ResponseRewriter::WriteHeld(json::object chunk, const Write& write) {
  final_chunk_.reset();
  write(SseEvent(json::serialize(chunk)));
  for (std::string& e : after_final_) write(std::move(e));
  after_final_.clear();
}

void ResponseRewriter::Keep(std::vector<engines::ChoiceExperts>& found) {
  for (engines::ChoiceExperts& e : found) experts_[e.choice] = std::move(e.native);
}

// One object per choice, in choice order. The token counts are summed over the choices,
// so rows are checked over them all: each choice has [start, prompt + its completion - 1).
json::value ResponseRewriter::ExpertsOfEveryChoice(const ExpertsContext& context,
                                                   std::string* problem) {
  ExpertsContext each = context;
  each.completion_tokens.reset();  // (only the sum is known)
  json::array list;
  uint64_t rows = 0;
  for (uint32_t i = 0; i < options_.choices; ++i) {
    auto it = experts_.find(i);
    std::string why;
    json::value v = it == experts_.end() ? json::value(nullptr)
                                         : NormalizeRoutedExperts(it->second, each, &why);
    if (v.is_null()) {
      if (problem->empty()) {
        *problem = fmt::format("choice {}: {}", i,
                               why.empty() ? "the engine returned no routed experts" : why);
      }
    } else {
      rows += v.as_object().at("shape").as_array()[0].to_number<uint64_t>();
    }
    list.push_back(std::move(v));
  }
  if (problem->empty() && context.prompt_tokens && context.completion_tokens &&
      *context.prompt_tokens > context.start + 1) {
    const uint64_t expected = options_.choices * (*context.prompt_tokens - 1 - context.start) +
                              *context.completion_tokens;
    if (rows != expected) {
      *problem =
          fmt::format("routed experts: {} rows over {} choices, but the token counts imply {}",
                      rows, options_.choices, expected);
      return nullptr;
    }
  }
  return list;
}

json::object ResponseRewriter::Nvext(bool complete) {
  json::object nvext;
  if (options_.extra.worker_id) {
    nvext["worker_id"] = options_.worker_id;
    nvext["dp_rank"] = options_.dp_rank;
  }
  if (options_.extra.cached_blocks) nvext["cached_blocks"] = options_.cached_blocks;
  if (options_.extra.prefill_worker_id) {
    nvext["prefill_worker_id"] = options_.prefill_worker_id
                                     ? json::value(*options_.prefill_worker_id)
                                     : json::value(nullptr);
  }
  if (options_.extra.routed_experts) {
    ExpertsContext context;
    context.layers = options_.experts_layers;
    context.top_k = options_.experts_top_k;
    context.prompt_tokens = counts_.prompt;
    context.completion_tokens = counts_.completion;
    context.start = counts_.prompt ? std::min(experts_start_, *counts_.prompt) : experts_start_;
    std::string problem;
    json::value normalized;
    if (options_.choices > 1) {
      normalized = ExpertsOfEveryChoice(context, &problem);
    } else if (options_.prompt_experts && !experts_.empty() && context.prompt_tokens &&
               context.completion_tokens) {
      // Disaggregated: the decode worker's rows as they are, then the prompt rows it never
      // computed from the prefill worker.
      ExpertsContext decode_rows = context;
      decode_rows.prompt_tokens.reset();
      decode_rows.completion_tokens.reset();
      const json::value tail =
          NormalizeRoutedExperts(experts_.begin()->second, decode_rows, &problem);
      const uint64_t total = *context.prompt_tokens + *context.completion_tokens;
      const uint64_t rows = total > context.start + 1 ? total - 1 - context.start : 0;
      if (problem.empty()) {
        normalized = StitchRoutedExperts(options_.prompt_experts(), tail, rows, &problem);
      }
    } else if (experts_.empty()) {
      problem = "the engine returned no routed experts";
    } else {
      normalized = NormalizeRoutedExperts(experts_.begin()->second, context, &problem);
    }
    // A failed response is counted as such already.
    if (!problem.empty() && complete) experts_problem_ = std::move(problem);
    nvext["routed_experts"] = std::move(normalized);
  }
  return nvext;
}

}  // namespace kvgate::api
