#include "discovery/etcd_client.h"

#include <fmt/format.h>

#include <boost/json.hpp>
#include <charconv>
#include <mutex>

#include "common/base64.h"

namespace kvgate::discovery {
namespace {

namespace json = boost::json;

// etcd's JSON gateway writes 64-bit integers as strings; absent means 0.
int64_t Int64Field(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return 0;
  if (v->is_int64()) return v->as_int64();
  if (!v->is_string()) return 0;
  int64_t n = 0;
  const json::string& s = v->as_string();
  std::from_chars(s.data(), s.data() + s.size(), n);
  return n;
}

std::string Bytes64Field(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_string()) return "";
  return Base64Decode(v->as_string()).value_or("");
}

// The end of the key range holding every key that starts with `prefix`.
std::string PrefixEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) != 0xff) {
      end.back() = static_cast<char>(end.back() + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

Status ParseAnswer(const std::string& text, json::object* out) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec || !v.is_object()) return Status::Error("etcd answered something that is not JSON");
  *out = std::move(v.as_object());
  return Status::Ok();
}

// Receives a watch stream: one JSON object per line, each {"result": {...}} or {"error": ...}.
class WatchSink : public http::ResponseSink {
 public:
  WatchSink(const std::function<void(const EtcdWatchEvent&)>& on_event,
            const std::atomic<bool>& stop)
      : on_event_(on_event), stop_(stop) {}

  void OnHeaders(int status, std::string_view) override { status_ = status; }
  void OnBody(std::string_view data) override {
    pending_.append(data);
    size_t start = 0;
    for (size_t nl; (nl = pending_.find('\n', start)) != std::string::npos; start = nl + 1) {
      Line(std::string_view(pending_).substr(start, nl - start));
    }
    pending_.erase(0, start);
  }
  void OnDone(const Status& status) override {
    if (!pending_.empty()) Line(pending_);
    Status end = status;
    if (status_ != 0 && status_ != 200) {
      end = Status::Error(fmt::format("etcd watch answered {}", status_));
    } else if (!failure_.ok()) {
      end = failure_;
    } else if (stop_ || (status.code() == StatusCode::kDeadlineExceeded && status_ == 200)) {
      end = Status::Ok();  // stopped, or quiet for a while: the caller watches again
    }
    done_.set_value(end);
  }
  bool Cancelled() const override { return stop_ || !failure_.ok(); }
  void OnCancellable(std::function<void()> cancel) override {
    std::lock_guard lock(mu_);
    cancel_ = std::move(cancel);
  }
  void Cancel() {
    std::lock_guard lock(mu_);
    if (cancel_) cancel_();
  }
  std::future<Status> Done() { return done_.get_future(); }

 private:
  void Line(std::string_view line) {
    if (line.find_first_not_of(" \r\t") == std::string_view::npos || !failure_.ok()) return;
    boost::system::error_code ec;
    json::value v = json::parse(line, ec);
    if (ec || !v.is_object()) {
      failure_ = Status::Error("etcd watch sent a line that is not JSON");
      return;
    }
    const json::object& o = v.as_object();
    const json::value* result = o.if_contains("result");
    if (result == nullptr || !result->is_object()) {
      failure_ = Status::Error(fmt::format("etcd watch failed: {}", line.substr(0, 200)));
      return;
    }
    const json::object& r = result->as_object();
    if (r.contains("canceled") || Int64Field(r, "compact_revision") != 0) {
      failure_ = Status::Error("etcd cancelled the watch (history compacted): listing again");
      return;
    }
    const json::value* events = r.if_contains("events");
    if (events == nullptr || !events->is_array()) return;  // created, or progress
    for (const json::value& e : events->as_array()) {
      if (!e.is_object() || !e.as_object().contains("kv")) continue;
      const json::object& eo = e.as_object();
      const json::value& kv = eo.at("kv");
      if (!kv.is_object()) continue;
      EtcdWatchEvent event;
      const json::value* type = eo.if_contains("type");
      event.deleted = type != nullptr && type->is_string() && type->as_string() == "DELETE";
      event.key = Bytes64Field(kv.as_object(), "key");
      event.value = Bytes64Field(kv.as_object(), "value");
      event.revision = Int64Field(kv.as_object(), "mod_revision");
      on_event_(event);
    }
  }

  const std::function<void(const EtcdWatchEvent&)>& on_event_;
  const std::atomic<bool>& stop_;
  int status_ = 0;
  std::string pending_;
  Status failure_;
  std::mutex mu_;
  std::function<void()> cancel_;
  std::promise<Status> done_;
};

}  // namespace

Status EtcdClient::Parse(std::string_view url, http::Endpoint* endpoint) {
  if (Status s = http::ParseBaseUrl(url, endpoint); !s.ok()) {
    return Status::InvalidArgument(fmt::format("etcd url '{}': {}", url, s.message()));
  }
  return Status::Ok();
}

EtcdClient::EtcdClient(http::Client& client, http::Endpoint endpoint,
                       std::chrono::milliseconds timeout)
    : client_(client), endpoint_(std::move(endpoint)), timeout_(timeout) {}

Status EtcdClient::Call(std::string_view path, std::string body, std::string* answer) {
  http::ClientRequest request;
  request.target = std::string(path);
  request.body = std::move(body);
  request.timeouts = {timeout_, timeout_, timeout_};
  std::future<http::WholeResponse> future =
      http::FetchWhole(client_, endpoint_, std::move(request));
  if (future.wait_for(timeout_ * 3) != std::future_status::ready) {
    return Status::Timeout(fmt::format("etcd {} did not answer", endpoint_.key()));
  }
  http::WholeResponse r;
  try {
    r = future.get();
  } catch (const std::future_error&) {
    return Status::Error("the HTTP client stopped");
  }
  if (!r.status.ok())
    return Status::Error(fmt::format("etcd {}: {}", endpoint_.key(), r.status.message()));
  if (r.code != 200) {
    return Status::Error(fmt::format("etcd {}{} answered {}: {}", endpoint_.key(), path, r.code,
                                     r.body.substr(0, 200)));
  }
  *answer = std::move(r.body);
  return Status::Ok();
}

Status EtcdClient::List(std::string_view prefix, std::vector<EtcdKeyValue>* out,
                        int64_t* revision) {
  std::string text;
  const json::object request{{"key", Base64Encode(prefix)},
                             {"range_end", Base64Encode(PrefixEnd(prefix))}};
  if (Status s = Call("/v3/kv/range", json::serialize(request), &text); !s.ok()) return s;
  json::object answer;
  if (Status s = ParseAnswer(text, &answer); !s.ok()) return s;
  out->clear();
  if (const json::value* kvs = answer.if_contains("kvs"); kvs != nullptr && kvs->is_array()) {
    for (const json::value& kv : kvs->as_array()) {
      if (!kv.is_object()) continue;
      out->push_back({Bytes64Field(kv.as_object(), "key"), Bytes64Field(kv.as_object(), "value")});
    }
  }
  const json::value* header = answer.if_contains("header");
  *revision = header && header->is_object() ? Int64Field(header->as_object(), "revision") : 0;
  return Status::Ok();
}

Status EtcdClient::Put(std::string_view key, std::string_view value, int64_t lease) {
  json::object request{{"key", Base64Encode(key)}, {"value", Base64Encode(value)}};
  if (lease != 0) request["lease"] = std::to_string(lease);
  std::string ignored;
  return Call("/v3/kv/put", json::serialize(request), &ignored);
}

Status EtcdClient::Delete(std::string_view key) {
  std::string ignored;
  return Call("/v3/kv/deleterange", json::serialize(json::object{{"key", Base64Encode(key)}}),
              &ignored);
}

Status EtcdClient::GrantLease(int64_t ttl_seconds, int64_t* lease) {
  std::string text;
  if (Status s =
          Call("/v3/lease/grant", json::serialize(json::object{{"TTL", ttl_seconds}}), &text);
      !s.ok()) {
    return s;
  }
  json::object answer;
  if (Status s = ParseAnswer(text, &answer); !s.ok()) return s;
  *lease = Int64Field(answer, "ID");
  if (*lease == 0)
    return Status::Error(fmt::format("etcd granted no lease: {}", text.substr(0, 200)));
  return Status::Ok();
}

Status EtcdClient::KeepAlive(int64_t lease, bool* alive) {
  std::string text;
  const std::string body = json::serialize(json::object{{"ID", std::to_string(lease)}});
  if (Status s = Call("/v3/lease/keepalive", body, &text); !s.ok()) return s;
  json::object answer;
  if (Status s = ParseAnswer(text, &answer); !s.ok()) return s;
  const json::value* result = answer.if_contains("result");
  // An expired lease comes back without a TTL.
  *alive = result && result->is_object() && Int64Field(result->as_object(), "TTL") > 0;
  return Status::Ok();
}

Status EtcdClient::Revoke(int64_t lease) {
  std::string ignored;
  return Call("/v3/lease/revoke", json::serialize(json::object{{"ID", std::to_string(lease)}}),
              &ignored);
}

Status EtcdClient::Watch(std::string_view prefix, int64_t start_revision,
                         const std::function<void(const EtcdWatchEvent&)>& on_event,
                         const std::atomic<bool>& stop, std::chrono::milliseconds idle) {
  json::object create{{"key", Base64Encode(prefix)},
                      {"range_end", Base64Encode(PrefixEnd(prefix))}};
  if (start_revision > 0) create["start_revision"] = std::to_string(start_revision);
  http::ClientRequest request;
  request.target = "/v3/watch";
  request.body = json::serialize(json::object{{"create_request", std::move(create)}});
  request.timeouts = {timeout_, timeout_, idle};
  auto sink = std::make_shared<WatchSink>(on_event, stop);
  std::future<Status> done = sink->Done();
  client_.Fetch(endpoint_, std::move(request), sink);
  while (done.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    if (stop) sink->Cancel();
  }
  try {
    return done.get();
  } catch (const std::future_error&) {
    return Status::Error("the HTTP client stopped");
  }
}

}  // namespace kvgate::discovery
