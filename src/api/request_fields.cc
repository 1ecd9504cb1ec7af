#include "api/request_fields.h"

#include <fmt/format.h>

#include <boost/json.hpp>

namespace kvgate::api {

boost::json::value ParseJson(std::string_view text, boost::system::error_code& ec) {
  boost::json::parse_options options;
  options.max_depth = kMaxJsonDepth;
  return boost::json::parse(text, ec, {}, options);
}

const boost::json::value* Field(const boost::json::object& o, std::string_view key) {
  const boost::json::value* v = o.if_contains(key);
  return v == nullptr || v->is_null() ? nullptr : v;
}

bool BoolField(const boost::json::object& o, std::string_view key) {
  const boost::json::value* v = Field(o, key);
  if (v == nullptr) return false;
  if (!v->is_bool()) throw BadField{fmt::format("'{}' must be a boolean", key)};
  return v->as_bool();
}

std::string_view StringField(const boost::json::object& o, std::string_view key) {
  const boost::json::value* v = Field(o, key);
  if (v == nullptr) return {};
  if (!v->is_string()) throw BadField{fmt::format("'{}' must be a string", key)};
  return v->as_string();
}

}  // namespace kvgate::api
