// The prefill phase of a disaggregated request (docs/design.md §12): the bodies each
// engine's protocol wants for it, what a vLLM prefill answer hands to the decode phase, and
// the sink that reads a prefill worker's answer for the call that waits on it.
#pragma once

#include <boost/json.hpp>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "http/client.h"

namespace kvgate::gateway {

// vLLM (NIXL connector): the client's body as a prefill phase: one token, not streamed,
// asking the worker to keep the KV for a remote decode.
std::string VllmPrefillBody(std::string_view engine_body);
// The `kv_transfer_params` of a vLLM prefill worker's JSON answer; nullopt if it has none.
std::optional<boost::json::object> TransferParamsOf(std::string_view answer);
// `body` (a JSON object) with `fields` added (replacing fields of the same name).
std::string WithFields(std::string_view body, const boost::json::object& fields);
// SGLang: where the two workers meet (the prefill worker's bootstrap server and a room).
boost::json::object BootstrapFields(const std::string& prefill_host, uint16_t bootstrap_port);
// SGLang: the prefill worker's body, with the meeting fields and answered whole (the
// gateway reads it for the prompt's routed experts).
std::string BootstrapPrefillBody(std::string_view engine_body, const boost::json::object& fields);

// Reads a prefill worker's whole answer and hands it over once it ended.
class PrefillSink : public http::ResponseSink {
 public:
  using Done = std::function<void(const Status& transfer, int code, std::string body)>;
  PrefillSink(Done done, std::function<bool()> cancelled)
      : done_(std::move(done)), cancelled_(std::move(cancelled)) {}
  void OnHeaders(int status, std::string_view) override { code_ = status; }
  void OnBody(std::string_view data) override;
  void OnDone(const Status& status) override { done_(status, code_, std::move(body_)); }
  bool Cancelled() const override { return cancelled_(); }

 private:
  Done done_;
  std::function<bool()> cancelled_;
  int code_ = 0;
  std::string body_;
};

}  // namespace kvgate::gateway
