#include "mocker/server.h"

#include <fmt/format.h>

#include <atomic>
#include <boost/json.hpp>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "api/error.h"
#include "api/request.h"
#include "api/request_fields.h"
#include "api/sse.h"
#include "common/base64.h"
#include "common/log.h"
#include "http/server.h"
#include "metrics/metrics.h"
#include "mocker/event_publisher.h"
#include "mocker/logprobs.h"

namespace kvgate::mocker {
namespace {

namespace json = boost::json;
using Clock = std::chrono::steady_clock;

using api::Api;
using engines::EngineKind;

// Without a tokenizer, generated tokens read as words from this list.
constexpr const char* kWords[] = {"the", "cache",  "of",   "keys",   "and",    "values",
                                  "is",  "warm",   "a",    "prefix", "routes", "to",
                                  "its", "worker", "fast", "now"};

std::string TokenText(uint32_t token) {
  return std::string(" ") + kWords[token % std::size(kWords)];
}

// A client error; its message is the 400's.
using BadRequest = api::BadField;
using api::Field;

uint32_t NonNegativeInt(const json::object& o, std::string_view key) {
  const json::value* v = Field(o, key);
  if (v == nullptr) return 0;
  if (!v->is_int64() || v->as_int64() < 0) {
    throw BadRequest{fmt::format("'{}' must be a non-negative integer", key)};
  }
  return static_cast<uint32_t>(std::min<int64_t>(v->as_int64(), UINT32_MAX));
}

// Length of `s` without a trailing, incomplete UTF-8 sequence.
size_t CompleteUtf8Prefix(std::string_view s) {
  for (size_t back = 1; back <= std::min<size_t>(3, s.size()); ++back) {
    const auto c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? s.size() - back : s.size();
  }
  return s.size();
}

std::string Sse(const json::value& v) { return api::SseEvent(json::serialize(v)); }

// Choices per request at most (`n`): a request's choice i runs as engine sequence
// id * kMaxChoices + i.
constexpr uint32_t kMaxChoices = 128;
// Alternatives per token at most (`logprobs`, `top_logprobs`), as OpenAI allows.
constexpr int64_t kMaxTopLogprobs = 20;

}  // namespace

struct MockerServer::Impl {
  struct Choice {
    std::vector<uint32_t> output;
    size_t sent_chars = 0;  // streamed text so far (with a tokenizer)
    bool finished = false;
  };
  struct Pending {
    uint64_t id = 0;
    Api api = Api::kCompletions;
    bool stream = false;
    bool include_usage = false;
    std::shared_ptr<http::Responder> responder;
    std::vector<uint32_t> prompt;
    std::vector<Choice> choices;  // `n` of them
    uint32_t finished_choices = 0;
    bool began = false;             // the stream's head is sent
    std::optional<uint32_t> top;    // logprobs asked for: alternatives per token
    bool echo = false;              // completions: the prompt comes back before the text
    bool return_token_ids = false;  // vLLM's: prompt_token_ids and each choice's token_ids
    uint32_t max_tokens = 16;
    uint32_t cached_tokens = 0;
    bool want_experts = false;
    uint32_t experts_start = 0;
    std::string model;
    std::string cache_salt;
    int64_t created = 0;
    Clock::time_point due;
    TransferAsk transfer;        // what disaggregation asks of this worker
    uint32_t prompt_blocks = 0;  // full blocks a prefill worker can hand over
  };

  MockerOptions options;
  Engine engine;
  EventPublisher publisher;
  std::unique_ptr<http::Server> server;
  std::unique_ptr<BootstrapServer> bootstrap;  // prefill, SGLang
  std::unique_ptr<RoomWaiter> rooms;           // decode, SGLang

  std::mutex mu;  // guards incoming, faults, hung
  std::condition_variable cv;
  std::deque<Pending> incoming;
  Faults faults;
  std::vector<std::shared_ptr<http::Responder>> hung;
  bool reset_requested = false;

  std::atomic<bool> stop{false};
  std::thread engine_thread;
  std::atomic<uint64_t> next_id{1};

  // Counters for /metrics (written by the engine thread).
  std::atomic<uint64_t> requests_total{0}, finished_total{0}, prompt_tokens_total{0},
      cached_tokens_total{0}, generation_tokens_total{0}, batches_published{0}, aborted_total{0};
  std::atomic<size_t> running{0}, waiting{0};
  std::atomic<double> kv_usage{0};

  explicit Impl(MockerOptions o)
      : options(std::move(o)), engine(options.engine), faults(options.faults) {}

  // ---------- HTTP side ----------
  void Handle(const http::Request& req, std::shared_ptr<http::Responder> r) {
    auto error = [&](int status, std::string_view message) {
      r->Send(status, "application/json", api::ErrorBody(status, message));
    };
    if (req.method == "GET" && req.path == "/health") return r->Send(200, "text/plain", "ok");
    if (req.method == "GET" && req.path == "/metrics") {
      return r->Send(200, "text/plain; version=0.0.4", Metrics());
    }
    if (req.method == "GET" && req.path == "/v1/models") {
      json::object model{{"id", options.model},
                         {"object", "model"},
                         {"created", 0},
                         {"owned_by", "kvgate-mocker"},
                         {"max_model_len", 1 << 20}};
      return r->Send(200, "application/json",
                     json::serialize(json::object{{"object", "list"},
                                                  {"data", json::array{std::move(model)}}}));
    }
    if (req.path == "/admin/faults") return HandleFaults(req, std::move(r));
    if (req.method == "POST" && req.path == "/admin/reset") {
      std::lock_guard lock(mu);
      reset_requested = true;
      cv.notify_one();
      return r->Send(200, "application/json", "{}");
    }
    Api api;
    if (req.path == "/v1/completions") {
      api = Api::kCompletions;
    } else if (req.path == "/v1/chat/completions") {
      api = Api::kChat;
    } else if (req.path == "/generate") {
      api = Api::kGenerate;
    } else {
      return error(404, fmt::format("no route for {} {}", req.method, req.path));
    }
    if (req.method != "POST") return error(405, "use POST");
    boost::system::error_code ec;
    json::value body = api::ParseJson(req.body, ec);
    if (ec) return error(400, fmt::format("the body is not valid JSON: {}", ec.message()));
    try {
      Pending p = Parse(api, body);
      p.responder = std::move(r);
      Submit(std::move(p));
    } catch (const BadRequest& e) {
      error(400, e.message);
    }
  }

  Pending Parse(Api api, const json::value& body) {
    api::InferenceRequest request;
    const api::PromptModel model{options.tokenizer.get(), options.chat_template.get()};
    if (Status s = api::ParseInferenceRequest(api, body, model, &request); !s.ok()) {
      throw BadRequest{s.message()};
    }
    const json::object& o = body.as_object();
    if (const json::value* prompt = Field(o, "prompt");
        api == Api::kCompletions && prompt && prompt->is_array() && prompt->as_array().size() > 1 &&
        (prompt->as_array()[0].is_string() || prompt->as_array()[0].is_array())) {
      throw BadRequest{"batched prompts are not simulated: send one prompt per request"};
    }
    Pending p;
    p.api = api;
    p.id = next_id++;
    p.created = std::chrono::duration_cast<std::chrono::seconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
    p.stream = request.stream;
    p.include_usage = request.include_usage;
    p.model = request.model.empty() ? options.model : request.model;
    p.want_experts = options.return_routed_experts || request.extra.routed_experts;
    p.experts_start = NonNegativeInt(o, engines::TraitsOf(options.kind).experts_start_field);
    p.max_tokens = request.max_tokens.value_or(16);
    p.cache_salt = request.cache_salt;
    if (request.n > kMaxChoices) {
      throw BadRequest{fmt::format("'n' is at most {} here", kMaxChoices)};
    }
    p.choices.resize(request.n);
    ReadLogprobs(api, o, &p);
    p.prompt = std::move(request.prompt);
    const size_t blocks = (p.prompt.size() + p.max_tokens + options.engine.block_size - 1) /
                          options.engine.block_size;
    if (blocks > options.engine.num_blocks) {
      throw BadRequest{fmt::format("prompt + max_tokens needs {} KV blocks; the engine has {}",
                                   blocks, options.engine.num_blocks)};
    }
    p.experts_start = std::min<uint32_t>(p.experts_start, static_cast<uint32_t>(p.prompt.size()));
    p.prompt_blocks = static_cast<uint32_t>((p.prompt.size() - 1) / options.engine.block_size);
    if (Status s = ReadTransferAsk(o, options.kind, options.transfer, p.prompt_blocks, &p.transfer);
        !s.ok()) {
      throw BadRequest{s.message()};
    }
    if (options.transfer.role == Role::kPrefill) p.max_tokens = 1;  // it only prefills
    return p;
  }

  // Completions: `logprobs` (alternatives per token) and `echo`; chat: `logprobs` (a
  // boolean) and `top_logprobs`.
  static void ReadLogprobs(Api api, const json::object& o, Pending* p) {
    auto count = [&](std::string_view key) -> uint32_t {
      const json::value* v = Field(o, key);
      if (v == nullptr) return 0;
      if (!v->is_int64() || v->as_int64() < 0 || v->as_int64() > kMaxTopLogprobs) {
        throw BadRequest{fmt::format("'{}' must be an integer from 0 to {}", key, kMaxTopLogprobs)};
      }
      return static_cast<uint32_t>(v->as_int64());
    };
    if (api == Api::kCompletions) {
      if (Field(o, "logprobs") != nullptr) p->top = count("logprobs");
      p->echo = api::BoolField(o, "echo");
      p->return_token_ids = api::BoolField(o, "return_token_ids");
    } else if (api == Api::kChat) {
      const uint32_t top = count("top_logprobs");
      if (api::BoolField(o, "logprobs")) p->top = top;
      p->return_token_ids = api::BoolField(o, "return_token_ids");
    }
  }

  void Submit(Pending p) {
    if (p.transfer.bootstrap && rooms) {
      // SGLang decode: the prompt's KV comes once its prefill worker has the room ready.
      auto waiting = std::make_shared<Pending>(std::move(p));
      rooms->Wait(*waiting->transfer.bootstrap, *waiting->transfer.room, std::chrono::seconds(30),
                  [this, waiting](const Status& ready) {
                    if (!ready.ok()) {
                      return waiting->responder->Send(500, "application/json",
                                                      api::ErrorBody(500, ready.message()));
                    }
                    Queue(std::move(*waiting));
                  });
      return;
    }
    Queue(std::move(p));
  }

  void Queue(Pending p) {
    std::lock_guard lock(mu);
    ++requests_total;
    if (faults.hang_every && requests_total % faults.hang_every == 0) {
      hung.push_back(std::move(p.responder));  // never answered
      return;
    }
    const double transfer_ms = TransferMs(options.transfer, p.transfer.imported_blocks,
                                          options.engine.block_size, options.engine.timing.speedup);
    p.due = Clock::now() + std::chrono::milliseconds(faults.delay_ms) +
            std::chrono::microseconds(static_cast<int64_t>(transfer_ms * 1000));
    incoming.push_back(std::move(p));
    cv.notify_one();
  }

  void HandleFaults(const http::Request& req, std::shared_ptr<http::Responder> r) {
    std::lock_guard lock(mu);
    if (req.method == "POST") {
      boost::system::error_code ec;
      json::value v = json::parse(req.body, ec);
      if (ec || !v.is_object()) {
        return r->Send(400, "application/json", api::ErrorBody(400, "faults must be an object"));
      }
      const json::object& o = v.as_object();
      auto set = [&](const char* key, auto& field) {
        if (const json::value* x = Field(o, key); x && x->is_int64() && x->as_int64() >= 0) {
          field = static_cast<std::remove_reference_t<decltype(field)>>(x->as_int64());
        }
      };
      set("crash_after", faults.crash_after);
      set("hang_every", faults.hang_every);
      set("drop_every", faults.drop_every);
      set("corrupt_every", faults.corrupt_every);
      set("restart_after", faults.restart_after);
      set("delay_ms", faults.delay_ms);
    }
    r->Send(200, "application/json",
            json::serialize(json::object{{"crash_after", faults.crash_after},
                                         {"hang_every", faults.hang_every},
                                         {"drop_every", faults.drop_every},
                                         {"corrupt_every", faults.corrupt_every},
                                         {"restart_after", faults.restart_after},
                                         {"delay_ms", faults.delay_ms}}));
  }

  // Read when scraped: the engine thread keeps the numbers in atomics.
  std::string Metrics() const {
    std::string out;
    auto metric = [&](const char* name, const char* help, double value, bool gauge = false) {
      metrics::CounterFamily family(name, help, {}, gauge);
      family.Add({}, value);
      family.Render(out);
    };
    metric("kvgate_mocker_requests_total", "Requests accepted.", requests_total);
    metric("kvgate_mocker_finished_total", "Requests finished.", finished_total);
    metric("kvgate_mocker_aborted_total", "Requests stopped because their client left.",
           aborted_total);
    metric("kvgate_mocker_prompt_tokens_total", "Prompt tokens.", prompt_tokens_total);
    metric("kvgate_mocker_prefix_cache_hit_tokens_total",
           "Prompt tokens served from the prefix cache.", cached_tokens_total);
    metric("kvgate_mocker_generation_tokens_total", "Generated tokens.", generation_tokens_total);
    metric("kvgate_mocker_event_batches_total", "KV event batches published.", batches_published);
    // vLLM's names, so dashboards made for vLLM read the mocker too.
    metric("vllm:num_requests_running", "Requests running.", running, true);
    metric("vllm:num_requests_waiting", "Requests waiting.", waiting, true);
    metric("vllm:gpu_cache_usage_perc", "KV cache usage (0-1).", kv_usage, true);
    return out;
  }

  // ---------- engine side ----------
  absl::flat_hash_map<uint64_t, Pending> active;
  std::deque<Pending> delayed;
  uint64_t batches = 0;

  void EngineLoop() {
    auto next = Clock::now();
    while (!stop) {
      bool reset = false;
      {
        std::unique_lock lock(mu);
        if (!engine.HasWork() && incoming.empty() && delayed.empty() && !reset_requested) {
          cv.wait_for(lock, std::chrono::milliseconds(50));
          // Idle time is not lag: the next step takes its full time from now.
          next = Clock::now();
        }
        while (!incoming.empty()) {
          delayed.push_back(std::move(incoming.front()));
          incoming.pop_front();
        }
        reset = std::exchange(reset_requested, false);
      }
      if (reset) Restart();
      const auto now = Clock::now();
      while (!delayed.empty() && delayed.front().due <= now) {
        Pending p = std::move(delayed.front());
        delayed.pop_front();
        // A model other than the one served names a LoRA adapter, as in vLLM.
        for (uint32_t i = 0; i < p.choices.size(); ++i) {
          engine.Submit({p.id * kMaxChoices + i, p.prompt, p.max_tokens,
                         p.model == options.model ? "" : p.model, p.cache_salt, i,
                         p.transfer.imported_blocks});
        }
        prompt_tokens_total += p.prompt.size();
        active.emplace(p.id, std::move(p));
      }
      AbortVanished();
      if (!engine.HasWork()) {
        if (!delayed.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        next = Clock::now();
        continue;
      }
      StepResult r = engine.Step();
      running = engine.running();
      waiting = engine.waiting() + delayed.size();
      kv_usage = static_cast<double>(engine.pool().used()) / engine.pool().num_blocks();
      // The step's results are visible when it ends, in real time.
      next = std::max(next, Clock::now() - std::chrono::milliseconds(50)) +
             std::chrono::microseconds(static_cast<int64_t>(r.duration_ms * 1000));
      std::this_thread::sleep_until(next);
      PublishEvents(r.events);
      for (const StepOutput& o : r.outputs) Deliver(o);
    }
  }

  // Requests whose clients left stop, as in vLLM (which aborts on disconnect): their
  // compute and KV blocks go to the others.
  void AbortVanished() {
    for (auto it = active.begin(); it != active.end();) {
      if (it->second.responder->connected()) {
        ++it;
        continue;
      }
      for (uint32_t i = 0; i < it->second.choices.size(); ++i) {
        engine.Abort(it->first * kMaxChoices + i);
      }
      ++aborted_total;
      active.erase(it++);
    }
  }

  void PublishEvents(std::vector<wire::OutEvent>& events) {
    if (events.empty() || options.kv_events.empty()) return;
    Faults f;
    {
      std::lock_guard lock(mu);
      f = faults;
    }
    ++batches;
    if (f.corrupt_every && batches % f.corrupt_every == 0) {
      events.insert(events.begin() + static_cast<long>(events.size() / 2), wire::UnknownEvent{});
    }
    const double ts =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    const bool live = !(f.drop_every && batches % f.drop_every == 0);
    publisher.Publish(wire::EncodeEventBatch(ts, options.dp_rank, events, options.event_format),
                      live);
    ++batches_published;
  }

  void Restart() {
    engine.ResetCache();
    publisher.ResetSequence();
  }

  void Deliver(const StepOutput& o) {
    auto it = active.find(o.request_id / kMaxChoices);
    if (it == active.end()) return;
    Pending& p = it->second;
    const uint32_t index = static_cast<uint32_t>(o.request_id % kMaxChoices);
    Choice& c = p.choices[index];
    if (o.first && index == 0) {  // (the other choices reuse the prompt the first cached)
      p.cached_tokens = o.cached_tokens;
      cached_tokens_total += o.cached_tokens;
      // Its prompt's KV is computed: a decode worker waiting on the room may take it.
      if (bootstrap && p.transfer.room) bootstrap->Ready(*p.transfer.room);
    }
    c.output.push_back(o.token);
    ++generation_tokens_total;
    if (o.finished) {
      c.finished = true;
      ++p.finished_choices;
    }
    const bool all_finished = p.finished_choices == p.choices.size();
    if (p.stream) StreamToken(p, index, all_finished);
    if (!all_finished) return;
    if (!p.stream) p.responder->Send(200, "application/json", json::serialize(FinalBody(p)));
    active.erase(it);
    const uint64_t done = ++finished_total;
    Faults f;
    {
      std::lock_guard lock(mu);
      f = faults;
    }
    if (f.restart_after && done % f.restart_after == 0) Restart();
    if (f.crash_after && done >= f.crash_after && options.allow_crash) {
      Log(LogLevel::kError, "mocker: crash fault after {} requests", done);
      std::fflush(nullptr);
      std::_Exit(3);
    }
  }

  // ---------- response shapes ----------
  std::string OneTokenText(uint32_t token) const {
    if (options.tokenizer) return options.tokenizer->Decode(std::span(&token, 1), false);
    return TokenText(token);
  }
  std::string Text(const std::vector<uint32_t>& output) const {
    if (options.tokenizer) return options.tokenizer->Decode(output, true);
    std::string text;
    for (uint32_t t : output) text += TokenText(t);
    return text;
  }
  // The prompt as `echo` returns it (without a tokenizer a prompt token is one byte).
  std::string PromptText(const Pending& p) const {
    if (options.tokenizer) return options.tokenizer->Decode(p.prompt, false);
    return std::string(p.prompt.begin(), p.prompt.end());
  }
  TokenTextFn PromptTokenText() const {
    if (options.tokenizer) return [this](uint32_t t) { return OneTokenText(t); };
    return [](uint32_t t) { return std::string(1, static_cast<char>(t)); };
  }

  std::vector<uint32_t> AllTokens(const Pending& p, const Choice& c) const {
    std::vector<uint32_t> all = p.prompt;
    all.insert(all.end(), c.output.begin(), c.output.end());
    return all;
  }

  size_t CompletionTokens(const Pending& p) const {
    size_t n = 0;
    for (const Choice& c : p.choices) n += c.output.size();
    return n;
  }

  json::object Usage(const Pending& p) const {
    const size_t prompt = p.prompt.size(), completion = CompletionTokens(p);
    return {{"prompt_tokens", prompt},
            {"completion_tokens", completion},
            {"total_tokens", prompt + completion},
            {"prompt_tokens_details", json::object{{"cached_tokens", p.cached_tokens}}}};
  }

  // The engine's native routed-experts fields of one choice, added to `choice` (vLLM) or
  // `top` (SGLang: the response's sglext; with several choices, each choice's own).
  // As the real engines' OpenAI responses, they do not echo the start that was asked for.
  // The first row of routed experts this worker has: prompt tokens whose KV came from a
  // prefill worker were never routed here (their rows are the prefill worker's).
  uint32_t ExpertsFrom(const Pending& p) const {
    return std::max(p.experts_start, p.transfer.imported_blocks * options.engine.block_size);
  }

  void AddExperts(const Pending& p, const Choice& c, json::object* choice,
                  json::object* top) const {
    if (!p.want_experts || !options.moe.enabled()) return;
    const std::vector<uint32_t> all = AllTokens(p, c);
    const uint32_t from = ExpertsFrom(p);
    switch (engines::TraitsOf(options.kind).experts_form) {
      case engines::ExpertsForm::kInt32Base64: {
        json::object* holder = p.choices.size() > 1 ? choice : top;
        if (holder == nullptr) break;
        (*holder)["sglext"] =
            json::object{{"routed_experts", Base64Encode(ExpertsInt32(all, from, options.moe))}};
        break;
      }
      case engines::ExpertsForm::kNpyBase64:
        if (choice) {
          (*choice)["routed_experts"] = Base64Encode(ExpertsNpy(all, from, options.moe));
        }
        break;
      case engines::ExpertsForm::kJsonLists:
        if (choice) {
          (*choice)["routed_experts"] = json::parse(ExpertsJsonLists(all, from, options.moe));
        }
        break;
      case engines::ExpertsForm::kNone:
        break;
    }
  }

  json::object GenerateMeta(const Pending& p, bool finished) const {
    const Choice& c = p.choices[0];
    json::object meta{
        {"id", fmt::format("gen-{}", p.id)},
        {"prompt_tokens", p.prompt.size()},
        {"completion_tokens", c.output.size()},
        {"cached_tokens", p.cached_tokens},
        {"finish_reason",
         finished ? json::value(json::object{{"type", "length"}, {"length", c.output.size()}})
                  : json::value(nullptr)}};
    if (finished && p.want_experts && options.moe.enabled()) {
      meta["routed_experts"] =
          Base64Encode(ExpertsInt32(AllTokens(p, c), ExpertsFrom(p), options.moe));
      meta["routed_experts_start_len"] = ExpertsFrom(p);
    }
    return meta;
  }

  // Logprobs of `tokens` (the choice's output from `from` on), with the prompt's first when
  // `with_prompt` (echo).
  json::value Logprobs(const Pending& p, const Choice& c, size_t from, bool with_prompt,
                       size_t text_offset) const {
    if (!p.top) return nullptr;
    const std::span<const uint32_t> out = std::span(c.output).subspan(from);
    const TokenTextFn output_text = [this](uint32_t t) { return OneTokenText(t); };
    if (p.api == Api::kChat) return ChatLogprobs(out, p.prompt.size() + from, *p.top, output_text);
    json::object lp =
        CompletionLogprobs(out, p.prompt.size() + from, *p.top,
                           text_offset + (with_prompt ? PromptText(p).size() : 0), output_text);
    if (!with_prompt) return lp;
    json::object all = CompletionLogprobs(p.prompt, 0, *p.top, text_offset, PromptTokenText());
    for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
      json::array& a = all[key].as_array();
      for (json::value& v : lp[key].as_array()) a.push_back(std::move(v));
    }
    return all;
  }

  json::object FinalBody(const Pending& p) const {
    if (p.api == Api::kGenerate) {
      const Choice& c = p.choices[0];
      return {{"text", Text(c.output)},
              {"output_ids", json::array(c.output.begin(), c.output.end())},
              {"meta_info", GenerateMeta(p, true)}};
    }
    json::object body{{"id", fmt::format("{}-{}", p.api == Api::kChat ? "chatcmpl" : "cmpl", p.id)},
                      {"object", p.api == Api::kChat ? "chat.completion" : "text_completion"},
                      {"created", p.created},
                      {"model", p.model}};
    json::array choices;
    for (uint32_t i = 0; i < p.choices.size(); ++i) {
      const Choice& c = p.choices[i];
      json::object choice{{"index", i}, {"finish_reason", "length"}};
      choice["logprobs"] = Logprobs(p, c, 0, p.echo, 0);
      if (p.api == Api::kChat) {
        choice["message"] = json::object{{"role", "assistant"}, {"content", Text(c.output)}};
      } else {
        choice["text"] = (p.echo ? PromptText(p) : std::string()) + Text(c.output);
      }
      if (p.return_token_ids) choice["token_ids"] = json::array(c.output.begin(), c.output.end());
      AddExperts(p, c, &choice, &body);
      choices.push_back(std::move(choice));
    }
    body["choices"] = std::move(choices);
    if (p.transfer.remote_decode) {
      body["kv_transfer_params"] = TransferParamsAnswer(
          fmt::format("mocker-{}", server->port()), options.host, server->port(), p.prompt_blocks);
    }
    if (p.return_token_ids)
      body["prompt_token_ids"] = json::array(p.prompt.begin(), p.prompt.end());
    body["usage"] = Usage(p);
    return body;
  }

  // Choice `index` has a new token; `done`: every choice has finished.
  void StreamToken(Pending& p, uint32_t index, bool done) {
    http::Responder& r = *p.responder;
    if (!p.began) r.Begin(200, "text/event-stream");
    p.began = true;
    Choice& c = p.choices[index];
    const bool first = c.output.size() == 1;
    if (p.api == Api::kGenerate) {
      // SGLang streams cumulative text and ids.
      r.Write(Sse(json::object{{"text", Text(c.output)},
                               {"output_ids", json::array(c.output.begin(), c.output.end())},
                               {"meta_info", GenerateMeta(p, done)}}));
      if (done) {
        r.Write(std::string(api::kSseDone));
        r.End();
      }
      return;
    }
    const bool chat = p.api == Api::kChat;
    json::object chunk{{"id", fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", p.id)},
                       {"object", chat ? "chat.completion.chunk" : "text_completion"},
                       {"created", p.created},
                       {"model", p.model}};
    std::string delta = TokenText(c.output.back());
    const size_t offset = c.sent_chars;
    if (options.tokenizer) {
      // The new text is the decode of everything so far minus what was already sent.
      // A token can end inside a UTF-8 character. Like vLLM's incremental detokenizer, hold
      // the partial character back until a later token completes it.
      const std::string all = Text(c.output);
      const size_t ready = c.finished ? all.size() : CompleteUtf8Prefix(all);
      delta = ready > c.sent_chars ? all.substr(c.sent_chars, ready - c.sent_chars) : "";
      c.sent_chars = std::max(c.sent_chars, ready);
    }
    const bool echo = p.echo && first && !chat;  // the prompt goes out with the first text
    json::object choice{{"index", index},
                        {"finish_reason", c.finished ? json::value("length") : nullptr},
                        {"logprobs", Logprobs(p, c, c.output.size() - 1, echo, offset)}};
    if (chat) {
      json::object d{{"content", delta}};
      if (first) d["role"] = "assistant";
      choice["delta"] = std::move(d);
    } else {
      choice["text"] = echo ? PromptText(p) + delta : delta;
    }
    if (p.return_token_ids) choice["token_ids"] = json::array{c.output.back()};
    json::object out = chunk;
    if (first && p.return_token_ids) {
      out["prompt_token_ids"] = json::array(p.prompt.begin(), p.prompt.end());
    }
    if (c.finished) AddExperts(p, c, &choice, nullptr);
    out["choices"] = json::array{std::move(choice)};
    r.Write(Sse(out));
    if (!done) return;
    if (options.kind == EngineKind::kSglang && p.choices.size() == 1 && p.want_experts &&
        options.moe.enabled()) {
      json::object extra = chunk;  // SGLang: an extra final chunk with no choices
      extra["choices"] = json::array{};
      AddExperts(p, p.choices[0], nullptr, &extra);
      r.Write(Sse(extra));
    }
    if (p.include_usage) {
      json::object usage = chunk;
      usage["choices"] = json::array{};
      usage["usage"] = Usage(p);
      r.Write(Sse(usage));
    }
    r.Write(std::string(api::kSseDone));
    r.End();
  }
};

MockerServer::MockerServer(MockerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

MockerServer::~MockerServer() { Stop(); }

Status MockerServer::Start() {
  Impl& s = *impl_;
  if (!s.options.kv_events.empty()) {
    if (Status st = s.publisher.Bind(s.options.kv_events, s.options.kv_replay); !st.ok()) return st;
  }
  http::ServerOptions so;
  so.host = s.options.host;
  so.port = s.options.port;
  so.threads = 1;
  so.error_formatter = api::OpenAiErrorResponse;
  s.server = std::make_unique<http::Server>(
      so, [&s](const http::Request& req, std::shared_ptr<http::Responder> r) {
        s.Handle(req, std::move(r));
      });
  if (Status st = s.server->Start(); !st.ok()) return st;
  const TransferConfig& t = s.options.transfer;
  if (t.role == Role::kPrefill && t.bootstrap_port != 0) {
    s.bootstrap = std::make_unique<BootstrapServer>();
    if (Status st = s.bootstrap->Start(s.options.host, t.bootstrap_port); !st.ok()) return st;
  }
  if (t.role == Role::kDecode) s.rooms = std::make_unique<RoomWaiter>();
  s.engine_thread = std::thread([&s] { s.EngineLoop(); });
  return Status::Ok();
}

uint16_t MockerServer::port() const { return impl_->server ? impl_->server->port() : 0; }

uint16_t MockerServer::bootstrap_port() const {
  return impl_->bootstrap ? impl_->bootstrap->port() : 0;
}

void MockerServer::Stop() {
  Impl& s = *impl_;
  s.stop = true;
  s.cv.notify_all();
  if (s.engine_thread.joinable()) s.engine_thread.join();
  s.rooms.reset();  // its callbacks queue into the engine: before the rest goes
  if (s.server) s.server->Stop(std::chrono::milliseconds(100));
  s.bootstrap.reset();
}

}  // namespace kvgate::mocker
