// Builds msgpack payloads for tests with msgpack-cxx's own packer (independent of
// kvgate's encoder).
#pragma once

#include <msgpack.hpp>
#include <string>

namespace kvgate::testing {

struct MsgpackBuilder {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk{buffer};
  std::string str() const { return std::string(buffer.data(), buffer.size()); }
};

}  // namespace kvgate::testing
