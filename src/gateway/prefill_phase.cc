#include "gateway/prefill_phase.h"

#include <random>

#include "api/request_fields.h"

namespace kvgate::gateway {
namespace {

namespace json = boost::json;

json::object ParseObject(std::string_view text) {
  boost::system::error_code ec;
  json::value v = api::ParseJson(text, ec);
  return !ec && v.is_object() ? std::move(v.as_object()) : json::object{};
}

}  // namespace

std::string VllmPrefillBody(std::string_view engine_body) {
  json::object o = ParseObject(engine_body);
  o["max_tokens"] = 1;
  if (o.contains("max_completion_tokens")) o["max_completion_tokens"] = 1;
  o["stream"] = false;
  o.erase("stream_options");
  o["kv_transfer_params"] = json::object{
      {"do_remote_decode", true},    {"do_remote_prefill", false}, {"remote_engine_id", nullptr},
      {"remote_block_ids", nullptr}, {"remote_host", nullptr},     {"remote_port", nullptr}};
  return json::serialize(o);
}

std::optional<json::object> TransferParamsOf(std::string_view answer) {
  json::object o = ParseObject(answer);
  json::value* params = o.if_contains("kv_transfer_params");
  if (params == nullptr || !params->is_object()) return std::nullopt;
  return std::move(params->as_object());
}

std::string WithFields(std::string_view body, const json::object& fields) {
  json::object o = ParseObject(body);
  for (const auto& [key, value] : fields) o[key] = value;
  return json::serialize(o);
}

std::string BootstrapPrefillBody(std::string_view engine_body, const json::object& fields) {
  json::object o = ParseObject(engine_body);
  for (const auto& [key, value] : fields) o[key] = value;
  o["stream"] = false;
  o.erase("stream_options");
  return json::serialize(o);
}

json::object BootstrapFields(const std::string& prefill_host, uint16_t bootstrap_port) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return {{"bootstrap_host", prefill_host},
          {"bootstrap_port", bootstrap_port},
          {"bootstrap_room", static_cast<int64_t>(rng() >> 1)}};  // 63 bits
}

void PrefillSink::OnBody(std::string_view data) {
  if (body_.size() < (size_t{1} << 20)) body_.append(data);
}

}  // namespace kvgate::gateway
