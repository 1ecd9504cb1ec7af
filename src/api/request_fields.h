// Reading fields of a request body: an absent field and a null one are the same, and a field
// of the wrong type is the client's error (BadField, whose message is the 400's).
#pragma once

#include <boost/json/fwd.hpp>
#include <string>
#include <string_view>

namespace kvgate::api {

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
