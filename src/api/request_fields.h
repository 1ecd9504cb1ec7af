// Reading fields of a request body: an absent field and a null one are the same, and a field
// of the wrong type is the client's error (BadField, whose message is the 400's).
#pragma once

#include <boost/json/fwd.hpp>
#include <boost/system/error_code.hpp>
#include <string>
#include <string_view>

namespace kvgate::api {

// JSON of requests and responses, nested up to 256 levels (Boost.JSON's default, 32, turns
// away real tool schemas). The values built from it are walked recursively, so there is a
// limit.
inline constexpr int kMaxJsonDepth = 256;
boost::json::value ParseJson(std::string_view text, boost::system::error_code& ec);

struct BadField {
  std::string message;
};

// The field's value; null when it is absent or JSON null.
const boost::json::value* Field(const boost::json::object& o, std::string_view key);
// False when absent; throws BadField when not a boolean.
bool BoolField(const boost::json::object& o, std::string_view key);
// Empty when absent; throws BadField when not a string.
std::string_view StringField(const boost::json::object& o, std::string_view key);

}  // namespace kvgate::api
