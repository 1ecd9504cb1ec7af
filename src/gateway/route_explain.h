// POST /admin/route/explain (docs/design.md §15): what the router would do with a chat or
// completions body, and why (every candidate's cached blocks per tier, load terms, cost),
// without sending anything or counting any load.
#pragma once

#include <boost/json.hpp>
#include <functional>
#include <string>

#include "common/status.h"
#include "gateway/inference_call.h"
#include "routing/router.h"

namespace kvgate::gateway {

// {"device": n, "host": n, "disk": n, "external": n}
boost::json::object OverlapJson(const kv::Overlap& overlap);
// {"requests": n, "prefill_tokens": n, "decode_blocks": n}
boost::json::object LoadJson(const routing::WorkerLoad& load);

// The explanation's JSON for `body` (a chat body when it has "messages", else a completions
// one); errors are the client's, with their code. `worker_id` names a worker slot.
Status ExplainRoute(CallServices& services, const http::Request& req,
                    const std::function<std::string(uint32_t slot)>& worker_id, std::string* out);

}  // namespace kvgate::gateway
