#include "wire/encode.h"

#include <msgpack.hpp>

namespace kvgate::wire {
namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

class EventWriter {
 public:
  EventWriter(Packer& pk, const EncodeOptions& options) : pk_(pk), options_(options) {}

  void operator()(const StoredBlocks& e) {
    const bool positional = options_.format != EventFormat::kVllmMap;
    const bool metadata = e.cache_salt && options_.format == EventFormat::kSglang;
    const bool salted_keys =
        e.cache_salt && options_.format != EventFormat::kSglang && !e.parent_hash;
    if (positional) {
      pk_.pack_array(salted_keys ? 9 : e.lora_name || metadata ? 8 : 7);
      pk_.pack("BlockStored");
    } else {
      pk_.pack_map(salted_keys ? 9 : e.lora_name ? 8 : 7);
      Key("type");
      pk_.pack("BlockStored");
      Key("block_hashes");
    }
    Hashes(e.block_hashes);
    if (!positional) Key("parent_block_hash");
    if (e.parent_hash) {
      Hash(*e.parent_hash);
    } else {
      pk_.pack_nil();
    }
    if (!positional) Key("token_ids");
    Tokens(e.token_ids, e.bigram);
    if (!positional) Key("block_size");
    pk_.pack(e.block_size);
    if (!positional) Key("lora_id");
    pk_.pack_nil();
    if (!positional) Key("medium");
    pk_.pack(MediumName(e.medium));
    if (metadata) {
      pk_.pack_map(1);
      Key("cache_salt");
      pk_.pack(*e.cache_salt);
    } else if (e.lora_name || salted_keys) {
      if (!positional) Key("lora_name");
      if (e.lora_name) {
        pk_.pack(*e.lora_name);
      } else {
        pk_.pack_nil();
      }
    }
    if (salted_keys) {  // vLLM: (lora name, media ids..., salt) for the first block, nil after
      if (!positional) Key("extra_keys");
      pk_.pack_array(static_cast<uint32_t>(e.block_hashes.size()));
      pk_.pack_array(e.lora_name ? 2 : 1);
      if (e.lora_name) pk_.pack(*e.lora_name);
      pk_.pack(*e.cache_salt);
      for (size_t i = 1; i < e.block_hashes.size(); ++i) pk_.pack_nil();
    }
  }

  void operator()(const RemovedBlocks& e) {
    const bool counts = !e.remaining_copy_counts.empty();
    if (options_.format != EventFormat::kVllmMap) {
      pk_.pack_array(counts ? 5 : 3);
      pk_.pack("BlockRemoved");
      Hashes(e.block_hashes);
      pk_.pack(MediumName(e.medium));
      if (counts) {
        pk_.pack_nil();  // group_idx
        pk_.pack(e.remaining_copy_counts);
      }
      return;
    }
    pk_.pack_map(counts ? 4 : 3);
    Key("type");
    pk_.pack("BlockRemoved");
    Key("block_hashes");
    Hashes(e.block_hashes);
    Key("medium");
    pk_.pack(MediumName(e.medium));
    if (counts) {
      Key("remaining_copy_counts");
      pk_.pack(e.remaining_copy_counts);
    }
  }

  void operator()(const UnknownEvent& e) {
    if (options_.format != EventFormat::kVllmMap) {
      pk_.pack_array(2);
      pk_.pack(e.tag);
    } else {
      pk_.pack_map(2);
      Key("type");
      pk_.pack(e.tag);
      Key("block_hashes");
    }
    pk_.pack_array(0);
  }

  void operator()(const AllCleared&) {
    if (options_.format != EventFormat::kVllmMap) {
      pk_.pack_array(1);
    } else {
      pk_.pack_map(1);
      Key("type");
    }
    pk_.pack("AllBlocksCleared");
  }

 private:
  void Key(std::string_view k) { pk_.pack(k); }

  void Hash(uint64_t h) {
    if (options_.hash_format == HashFormat::kInt) {
      // Engines write Python ints; values above i64 max come out as uint64.
      pk_.pack_uint64(h);
      return;
    }
    // A 32-byte digest whose last 8 bytes, big-endian, are the hash.
    char digest[32];
    for (int i = 0; i < 24; ++i)
      digest[i] = static_cast<char>(((h >> ((i % 8) * 8)) & 0xff) ^ 0xa5);
    for (int i = 0; i < 8; ++i) digest[24 + i] = static_cast<char>((h >> (56 - 8 * i)) & 0xff);
    pk_.pack_bin(sizeof digest);
    pk_.pack_bin_body(digest, sizeof digest);
  }

  void Hashes(const std::vector<uint64_t>& hashes) {
    pk_.pack_array(static_cast<uint32_t>(hashes.size()));
    for (uint64_t h : hashes) Hash(h);
  }

  void Tokens(const std::vector<uint64_t>& ids, bool bigram) {
    if (!bigram || ids.size() < 2) {
      pk_.pack_array(static_cast<uint32_t>(ids.size()));
      for (uint64_t t : ids) pk_.pack_uint64(t);
      return;
    }
    pk_.pack_array(static_cast<uint32_t>(ids.size() - 1));
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      pk_.pack_array(2);
      pk_.pack_uint64(ids[i]);
      pk_.pack_uint64(ids[i + 1]);
    }
  }

  Packer& pk_;
  const EncodeOptions& options_;
};

}  // namespace

std::string_view MediumName(Tier tier) {
  switch (tier) {
    case Tier::kDevice:
      return "GPU";
    case Tier::kHost:
      return "CPU";
    case Tier::kDisk:
      return "DISK";
    case Tier::kExternal:
      return "EXTERNAL";
  }
  return "GPU";
}

std::string EncodeEventBatch(double ts, std::optional<int64_t> dp_rank,
                             std::span<const OutEvent> events, const EncodeOptions& options) {
  msgpack::sbuffer buffer;
  Packer pk(buffer);
  pk.pack_array(3);
  pk.pack_double(ts);
  pk.pack_array(static_cast<uint32_t>(events.size()));
  EventWriter writer(pk, options);
  for (const OutEvent& e : events) std::visit(writer, e);
  if (dp_rank) {
    pk.pack_int64(*dp_rank);
  } else {
    pk.pack_nil();
  }
  return std::string(buffer.data(), buffer.size());
}

}  // namespace kvgate::wire
