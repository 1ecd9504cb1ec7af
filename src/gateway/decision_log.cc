#include "gateway/decision_log.h"

#include <boost/json.hpp>

#include "gateway/route_explain.h"

namespace kvgate::gateway {

void DecisionLog::Record(LoggedDecision d) {
  std::lock_guard lock(mu_);
  latest_.push_front(std::move(d));
  if (latest_.size() > capacity_) latest_.pop_back();
}

std::string DecisionLog::Json(size_t limit) const {
  boost::json::array list;
  std::lock_guard lock(mu_);
  for (const LoggedDecision& d : latest_) {
    if (list.size() >= limit) break;
    list.push_back(boost::json::object{{"request_id", std::to_string(d.decision.id)},
                                       {"unix_ms", d.unix_ms},
                                       {"worker", d.worker},
                                       {"dp_rank", d.decision.worker.dp_rank},
                                       {"tenant", d.tenant},
                                       {"prompt_tokens", d.prompt_tokens},
                                       {"cached_blocks", d.decision.cached_blocks},
                                       {"overlap", OverlapJson(d.decision.overlap)},
                                       {"load", LoadJson(d.decision.load)},
                                       {"cost", d.decision.cost}});
  }
  return boost::json::serialize(boost::json::object{{"decisions", std::move(list)}});
}

}  // namespace kvgate::gateway
