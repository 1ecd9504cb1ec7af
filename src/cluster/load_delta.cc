#include "cluster/load_delta.h"

#include <boost/json.hpp>

namespace kvgate::cluster {
namespace {

namespace json = boost::json;

constexpr std::string_view kKindNames[] = {"routed", "first_token", "finished", "heartbeat",
                                           "usage"};

bool ReadUint(const json::object& o, std::string_view key, uint64_t max, uint64_t* out) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return false;
  if (v->is_uint64()) {
    *out = v->as_uint64();
  } else if (v->is_int64() && v->as_int64() >= 0) {
    *out = static_cast<uint64_t>(v->as_int64());
  } else {
    return false;
  }
  return *out <= max;
}

template <typename Int>
bool Read(const json::object& o, std::string_view key, Int* out) {
  uint64_t n = 0;
  if (!ReadUint(o, key, std::numeric_limits<Int>::max(), &n)) return false;
  *out = static_cast<Int>(n);
  return true;
}

bool ReadInt(const json::object& o, std::string_view key, int64_t* out) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || !(v->is_int64() || (v->is_uint64() && v->as_uint64() <= INT64_MAX))) {
    return false;
  }
  *out = v->to_number<int64_t>();
  return true;
}

bool ReadString(const json::object& o, std::string_view key, std::string* out) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_string()) return false;
  *out = std::string(v->as_string());
  return true;
}

}  // namespace

std::string EncodeDelta(const LoadDelta& d) {
  json::object o{{"kind", kKindNames[static_cast<size_t>(d.kind)]},
                 {"instance", d.instance},
                 {"origin", d.origin},
                 {"seq", d.seq}};
  switch (d.kind) {
    case DeltaKind::kRouted:
      o["worker"] = d.worker;
      o["dp_rank"] = d.dp_rank;
      o["prefill_tokens"] = d.prefill_tokens;
      o["decode_blocks"] = d.decode_blocks;
      if (d.prefix_blocks > 0) {
        o["prefix"] =
            json::object{{"blocks", d.prefix_blocks},
                         {"hashes", json::array(d.prefix_hashes.begin(), d.prefix_hashes.end())}};
      }
      [[fallthrough]];
    case DeltaKind::kFirstToken:
    case DeltaKind::kFinished:
      o["request"] = d.request;
      break;
    case DeltaKind::kHeartbeat:
      o["replica"] = d.replica;
      o["in_flight"] = d.in_flight;
      break;
    case DeltaKind::kUsage: {
      json::array usage;
      for (const TenantUsage& u : d.usage) {
        usage.push_back(json::object{{"tenant", u.tenant},
                                     {"requests", u.requests},
                                     {"tokens", u.tokens},
                                     {"in_flight", u.in_flight}});
      }
      o["usage"] = std::move(usage);
      break;
    }
  }
  return json::serialize(o);
}

Status DecodeDelta(std::string_view text, LoadDelta* d) {
  boost::system::error_code ec;
  const json::value v = json::parse(text, ec);
  if (ec || !v.is_object()) return Status::InvalidArgument("load delta: not a JSON object");
  const json::object& o = v.as_object();
  *d = LoadDelta{};
  std::string kind;
  if (!ReadString(o, "kind", &kind)) return Status::InvalidArgument("load delta: no kind");
  const auto* it = std::find(std::begin(kKindNames), std::end(kKindNames), kind);
  if (it == std::end(kKindNames)) {
    return Status::InvalidArgument("load delta: unknown kind '" + kind + "'");
  }
  d->kind = static_cast<DeltaKind>(it - std::begin(kKindNames));
  bool ok =
      Read(o, "instance", &d->instance) && Read(o, "origin", &d->origin) && Read(o, "seq", &d->seq);
  switch (d->kind) {
    case DeltaKind::kRouted:
      ok = ok && ReadString(o, "worker", &d->worker) && Read(o, "dp_rank", &d->dp_rank) &&
           Read(o, "prefill_tokens", &d->prefill_tokens) &&
           Read(o, "decode_blocks", &d->decode_blocks);
      if (const json::value* prefix = o.if_contains("prefix"); ok && prefix != nullptr) {
        const json::object* p = prefix->if_object();
        const json::value* hashes = p ? p->if_contains("hashes") : nullptr;
        ok = p && Read(*p, "blocks", &d->prefix_blocks) && hashes && hashes->is_array() &&
             hashes->as_array().size() <= 64;
        for (size_t i = 0; ok && i < hashes->as_array().size(); ++i) {
          const json::value& h = hashes->as_array()[i];
          ok = h.is_uint64() || (h.is_int64() && h.as_int64() >= 0);
          if (ok) d->prefix_hashes.push_back(h.to_number<uint64_t>());
        }
      }
      [[fallthrough]];
    case DeltaKind::kFirstToken:
    case DeltaKind::kFinished:
      ok = ok && Read(o, "request", &d->request);
      break;
    case DeltaKind::kHeartbeat:
      ok = ok && ReadString(o, "replica", &d->replica) && Read(o, "in_flight", &d->in_flight);
      break;
    case DeltaKind::kUsage: {
      const json::value* usage = o.if_contains("usage");
      ok = ok && usage != nullptr && usage->is_array();
      for (size_t i = 0; ok && i < usage->as_array().size(); ++i) {
        const json::value& u = usage->as_array()[i];
        TenantUsage t;
        ok = u.is_object() && ReadString(u.as_object(), "tenant", &t.tenant) &&
             Read(u.as_object(), "requests", &t.requests) &&
             ReadInt(u.as_object(), "tokens", &t.tokens) &&
             Read(u.as_object(), "in_flight", &t.in_flight);
        d->usage.push_back(std::move(t));
      }
      break;
    }
  }
  if (!ok) return Status::InvalidArgument("load delta: a field is missing or out of range");
  return Status::Ok();
}

}  // namespace kvgate::cluster
