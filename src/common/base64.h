// Standard base64 (RFC 4648, with padding): routed-expert arrays travel as base64 in JSON.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kvgate {

std::string Base64Encode(std::string_view bytes);
// nullopt on characters outside the alphabet or a bad length.
std::optional<std::string> Base64Decode(std::string_view text);

}  // namespace kvgate
