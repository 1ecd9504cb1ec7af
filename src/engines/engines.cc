#include "engines/engines.h"

#include <boost/json.hpp>
#include <charconv>

namespace kvgate::engines {
namespace {

namespace json = boost::json;

std::optional<uint64_t> Count(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_number()) return std::nullopt;
  if (v->is_int64() && v->as_int64() >= 0) return static_cast<uint64_t>(v->as_int64());
  if (v->is_uint64()) return v->as_uint64();
  return std::nullopt;
}

// Moves `key` (and its start field) out of `o` into `holder`.
bool TakeFrom(json::object& o, std::string_view start_key, json::value& holder, uint64_t* start) {
  auto it = o.find("routed_experts");
  if (it == o.end()) return false;
  holder = std::move(it->value());
  o.erase(it);
  if (auto s = Count(o, start_key)) *start = *s;
  o.erase(start_key);
  return true;
}

}  // namespace

constexpr Traits kEngines[] = {
    {EngineKind::kVllm, "vllm", wire::EventFormat::kVllmMap, "routed_experts_prompt_start",
     ExpertsForm::kNpyBase64, /*events_per_rank=*/false, Disaggregation::kKvTransferParams},
    {EngineKind::kVllmLists, "vllm-lists", wire::EventFormat::kVllmMap,
     "routed_experts_prompt_start", ExpertsForm::kJsonLists, /*events_per_rank=*/false,
     Disaggregation::kKvTransferParams},
    {EngineKind::kSglang, "sglang", wire::EventFormat::kSglang, "routed_experts_start_len",
     ExpertsForm::kInt32Base64, /*events_per_rank=*/false, Disaggregation::kBootstrap},
    // Its events read like vLLM's (hashes often negative int64); its OpenAI server returns no
    // routed experts; its disaggregation protocol is not driven by kvgate (served whole).
    {EngineKind::kTrtllm, "trtllm", wire::EventFormat::kVllmMap, "", ExpertsForm::kNone,
     /*events_per_rank=*/true},
};

constexpr bool TableInEnumOrder() {
  for (size_t i = 0; i < std::size(kEngines); ++i) {
    if (static_cast<size_t>(kEngines[i].kind) != i) return false;
  }
  return true;
}
static_assert(TableInEnumOrder(), "kEngines is indexed by EngineKind");

const Traits& TraitsOf(EngineKind kind) { return kEngines[static_cast<size_t>(kind)]; }

std::span<const Traits> AllEngines() { return kEngines; }

std::optional<EngineKind> ParseEngineKind(std::string_view name) {
  for (const Traits& t : kEngines) {
    if (t.name == name) return t.kind;
  }
  return std::nullopt;
}

std::string_view EngineName(EngineKind kind) { return TraitsOf(kind).name; }

std::string_view EngineNames() {
  static const std::string names = [] {
    std::string joined;
    for (const Traits& t : kEngines) joined.append(joined.empty() ? "" : "|").append(t.name);
    return joined;
  }();
  return names;
}

std::string OffsetPort(std::string_view endpoint, uint32_t offset) {
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string_view::npos) return std::string(endpoint);
  const std::string_view digits = endpoint.substr(colon + 1);
  uint32_t port = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
  if (ec != std::errc() || end != digits.data() + digits.size() || digits.size() > 5) {
    return std::string(endpoint);
  }
  return std::string(endpoint.substr(0, colon + 1)) + std::to_string(port + offset);
}

void AskForRoutedExperts(EngineKind kind, uint64_t start, json::object& body) {
  if (TraitsOf(kind).experts_form == ExpertsForm::kNone) return;
  body["return_routed_experts"] = true;
  if (start != 0) body[TraitsOf(kind).experts_start_field] = start;
}

namespace {

// SGLang's: from `o`'s sglext (OpenAI API) or meta_info (/generate).
bool TakeFromSglang(json::object& o, uint32_t choice, std::vector<ChoiceExperts>& found,
                    uint64_t* start) {
  bool any = false;
  for (std::string_view ext : {"sglext", "meta_info"}) {
    json::value* e = o.if_contains(ext);
    if (e == nullptr || !e->is_object()) continue;
    json::value holder;
    if (TakeFrom(e->as_object(), TraitsOf(EngineKind::kSglang).experts_start_field, holder,
                 start)) {
      found.push_back({choice, std::move(holder)});
      any = true;
    }
    if (ext == "sglext" && e->as_object().empty()) o.erase(ext);
  }
  return any;
}

}  // namespace

bool TakeRoutedExperts(json::object& response, std::vector<ChoiceExperts>& found, uint64_t* start) {
  bool any = false;
  if (json::value* choices = response.if_contains("choices"); choices && choices->is_array()) {
    uint32_t position = 0;
    for (json::value& c : choices->as_array()) {
      if (json::object* co = c.if_object()) {
        const auto index = Count(*co, "index");
        const uint32_t choice = index ? static_cast<uint32_t>(*index) : position;
        json::value holder;
        if (TakeFrom(*co, TraitsOf(EngineKind::kVllm).experts_start_field, holder, start)) {
          found.push_back({choice, std::move(holder)});
          any = true;
        }
        any = TakeFromSglang(*co, choice, found, start) || any;
      }
      ++position;
    }
  }
  // The response's own are its only choice's.
  return TakeFromSglang(response, 0, found, start) || any;
}

void ReadTokenCounts(const json::object& response, TokenCounts* counts) {
  for (std::string_view holder : {"usage", "meta_info"}) {
    const json::value* u = response.if_contains(holder);
    if (u == nullptr || !u->is_object()) continue;
    if (auto p = Count(u->as_object(), "prompt_tokens")) counts->prompt = p;
    if (auto c = Count(u->as_object(), "completion_tokens")) counts->completion = c;
    if (auto c = Count(u->as_object(), "cached_tokens")) counts->cached = c;
    const json::value* details = u->as_object().if_contains("prompt_tokens_details");
    if (details && details->is_object()) {
      if (auto c = Count(details->as_object(), "cached_tokens")) counts->cached = c;
    }
  }
}

}  // namespace kvgate::engines
