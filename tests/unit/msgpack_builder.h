// Builds msgpack payloads for tests with msgpack-cxx's own packer (independent of
// kvgate's encoder).
#pragma once

#include <cstdint>
#include <msgpack.hpp>
#include <string>

namespace kvgate::testing {

struct MsgpackBuilder {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk{buffer};
  std::string str() const { return std::string(buffer.data(), buffer.size()); }
  // `[0.0, [[tag, ...` of a batch holding one event of `fields` fields (tag included):
  // the caller packs the event's other fields.
  void BeginOneEventBatch(uint32_t fields, const char* tag) {
    pk.pack_array(2);
    pk.pack(0.0);
    pk.pack_array(1);
    pk.pack_array(fields);
    pk.pack(tag);
  }
};

}  // namespace kvgate::testing
