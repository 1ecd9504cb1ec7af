#include "discovery/worker_record.h"

#include <fmt/format.h>

#include <boost/json.hpp>

namespace kvgate::discovery {
namespace {

namespace json = boost::json;

Status FieldError(std::string_view field, std::string_view what) {
  return Status::InvalidArgument(fmt::format("worker record: '{}' {}", field, what));
}

Status ReadString(const json::value& v, std::string_view field, std::string* out) {
  if (!v.is_string()) return FieldError(field, "must be a string");
  *out = std::string(v.as_string());
  return Status::Ok();
}

template <typename Int>
Status ReadCount(const json::value& v, std::string_view field, Int* out) {
  const auto n = v.if_int64();
  if (n == nullptr || *n < 0 || static_cast<uint64_t>(*n) > std::numeric_limits<Int>::max()) {
    return FieldError(field, "must be a non-negative integer in range");
  }
  *out = static_cast<Int>(*n);
  return Status::Ok();
}

// A string naming one of a set of choices (`parse` maps a name to one, or to nullopt).
template <typename T, typename Parse>
Status ReadChoice(const json::value& v, std::string_view field, Parse parse,
                  std::string_view choices, T* out) {
  std::string name;
  if (Status s = ReadString(v, field, &name); !s.ok()) return s;
  const std::optional<T> choice = parse(name);
  if (!choice) return FieldError(field, fmt::format("must be one of {}", choices));
  *out = *choice;
  return Status::Ok();
}

Status ReadRecord(const json::value& value, WorkerRecord* r) {
  const json::object* o = value.if_object();
  if (o == nullptr) return Status::InvalidArgument("worker record: must be a JSON object");
  *r = WorkerRecord{};
  for (const auto& [key, v] : *o) {
    Status s;
    if (key == "id") {
      s = ReadString(v, key, &r->id);
    } else if (key == "url") {
      s = ReadString(v, key, &r->url);
    } else if (key == "engine") {
      s = ReadChoice(v, key, engines::ParseEngineKind, engines::EngineNames(), &r->engine);
    } else if (key == "kv_events") {
      s = ReadString(v, key, &r->kv_events);
    } else if (key == "kv_replay") {
      s = ReadString(v, key, &r->kv_replay);
    } else if (key == "dp_size") {
      s = ReadCount(v, key, &r->dp_size);
    } else if (key == "role") {
      s = ReadChoice(v, key, ParseRole, "both, prefill, decode", &r->role);
    } else if (key == "bootstrap_port") {
      s = ReadCount(v, key, &r->bootstrap_port);
    } else if (key == "model") {
      s = ReadString(v, key, &r->model);
    } else if (key == "block_size") {
      s = ReadCount(v, key, &r->block_size);
    } else {
      s = FieldError(key, "is not a worker record field");
    }
    if (!s.ok()) return s;
  }
  return FinishWorkerRecord(r);
}

}  // namespace

std::string DefaultWorkerId(std::string_view url) {
  std::string_view rest = url;
  if (const size_t scheme = rest.find("://"); scheme != std::string_view::npos) {
    rest.remove_prefix(scheme + 3);
  }
  rest = rest.substr(0, rest.find('/'));
  // FNV-1a (32 bits) of the lower-cased host:port: fixed by its definition, not by a library.
  uint32_t hash = 2166136261u;
  for (char c : rest) {
    hash ^= static_cast<unsigned char>(std::tolower(static_cast<unsigned char>(c)));
    hash *= 16777619u;
  }
  return fmt::format("w-{:08x}", hash);
}

Status ParseWorkerRecord(std::string_view text, WorkerRecord* record) {
  boost::system::error_code ec;
  const json::value v = json::parse(text, ec);
  if (ec) return Status::InvalidArgument(fmt::format("worker record: not JSON ({})", ec.message()));
  return ReadRecord(v, record);
}

Status FinishWorkerRecord(WorkerRecord* r) {
  if (!r->url.starts_with("http://") || r->url.size() <= 7) {
    return FieldError("url", "must be http://host[:port]");
  }
  if (r->id.empty()) r->id = DefaultWorkerId(r->url);
  if (r->id.size() > 128) return FieldError("id", "is longer than 128 characters");
  for (char c : r->id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_' &&
        c != ':') {
      return FieldError("id", "may hold only letters, digits and . - _ :");
    }
  }
  if (r->dp_size == 0) return FieldError("dp_size", "must be positive");
  return Status::Ok();
}

json::object ToJson(const WorkerRecord& r) {
  return json::object{{"id", r.id},
                      {"url", r.url},
                      {"engine", engines::EngineName(r.engine)},
                      {"kv_events", r.kv_events},
                      {"kv_replay", r.kv_replay},
                      {"dp_size", r.dp_size},
                      {"role", RoleName(r.role)},
                      {"bootstrap_port", r.bootstrap_port},
                      {"model", r.model},
                      {"block_size", r.block_size}};
}

std::string ToJsonText(const WorkerRecord& r) { return json::serialize(ToJson(r)); }

}  // namespace kvgate::discovery
