// Recursive descent over a msgpack cursor. An event that fails to decode is rewound to its
// first byte and skipped whole, its partial output rolled back, so the events around it
// decode as if it were not there.
#include "wire/decode.h"

#include <fmt/format.h>

#include <cctype>
#include <cstring>
#include <limits>

#include "wire/msgpack_reader.h"

namespace kvgate::wire {
namespace {

enum class Field : uint8_t {
  kSkip,
  kType,
  kBlockHashes,
  kParentHash,
  kTokenIds,
  kBlockSize,
  kMedium,
  kLoraName,
  kExtraKeys,
  kGroupIdx,
  kSpecKind,
  kCopyCounts,
};

enum class Tag : uint8_t { kNone, kStored, kRemoved, kCleared };

// Positional layouts after the tag (docs/design.md §3); lora_id and the sliding-window size are
// read past.
constexpr Field kStoredLayout[] = {Field::kBlockHashes, Field::kParentHash, Field::kTokenIds,
                                   Field::kBlockSize,   Field::kSkip,       Field::kMedium,
                                   Field::kLoraName,    Field::kExtraKeys,  Field::kGroupIdx,
                                   Field::kSpecKind,    Field::kSkip};
constexpr Field kRemovedLayout[] = {Field::kBlockHashes, Field::kMedium, Field::kGroupIdx,
                                    Field::kCopyCounts};

Field FieldNamed(std::string_view key) {
  if (key == "type") return Field::kType;
  if (key == "block_hashes") return Field::kBlockHashes;
  if (key == "parent_block_hash") return Field::kParentHash;
  if (key == "token_ids") return Field::kTokenIds;
  if (key == "block_size") return Field::kBlockSize;
  if (key == "medium") return Field::kMedium;
  if (key == "lora_name") return Field::kLoraName;
  if (key == "extra_keys") return Field::kExtraKeys;
  if (key == "group_idx") return Field::kGroupIdx;
  if (key == "kv_cache_spec_kind") return Field::kSpecKind;
  if (key == "remaining_copy_counts") return Field::kCopyCounts;
  return Field::kSkip;
}

std::string_view TypeName(MsgType t) {
  switch (t) {
    case MsgType::kNil:
      return "nil";
    case MsgType::kBool:
      return "a boolean";
    case MsgType::kUint:
    case MsgType::kInt:
      return "an integer";
    case MsgType::kFloat:
      return "a float";
    case MsgType::kStr:
      return "a string";
    case MsgType::kBin:
      return "bytes";
    case MsgType::kArray:
      return "an array";
    case MsgType::kMap:
      return "a map";
    case MsgType::kExt:
      return "an ext value";
    case MsgType::kInvalid:
      return "truncated or malformed";
  }
  return "unknown";
}

// Media names engines and connectors publish, in any case ("gpu", "GPU"). Storage shared
// beyond the worker (a storage or object-store connector) is the external tier: it is
// credited least, never as device memory.
Tier TierFromMedium(std::string_view medium, bool* unknown) {
  *unknown = false;
  std::string m(medium);
  for (char& c : m) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (m.empty() || m == "GPU" || m == "DEVICE" || m == "HBM") return Tier::kDevice;
  if (m == "CPU" || m == "CPU_PINNED" || m == "CPU_TIER1" || m == "HOST") return Tier::kHost;
  if (m == "CPU_TIER2" || m == "DISK" || m == "NVME" || m == "LOCAL_DISK" || m == "SSD") {
    return Tier::kDisk;
  }
  if (m == "EXTERNAL" || m == "NETWORK" || m == "REMOTE" || m == "SHARED" ||
      m == "SHARED_STORAGE" || m == "OBJECT_STORE" || m == "STORAGE") {
    return Tier::kExternal;
  }
  *unknown = true;
  return Tier::kDevice;
}

bool ReusableSpecKind(std::string_view kind) {
  return kind == "full_attention" || kind == "mla_attention" || kind == "sink_full_attention";
}

uint32_t TokenFromU64(uint64_t v) {
  return v <= std::numeric_limits<uint32_t>::max() ? static_cast<uint32_t>(v) : FoldWideTokenId(v);
}

enum class IdResult : uint8_t { kOk, kNegative, kNotInteger };

class BatchDecoder {
 public:
  BatchDecoder(std::string_view payload, DecodedBatch& out) : r_(payload), out_(out) {}

  Status Decode() {
    uint32_t n;
    bool saw_events = false;
    if (r_.ReadArrayHeader(&n)) {
      if (n < 2) return BatchError("an EventBatch array needs at least 2 elements");
      if (!r_.ReadNumber(&out_.ts)) return BatchError(Is("ts"));
      if (!DecodeEvents()) return BatchError(error_);
      saw_events = true;
      if (n >= 3 && !ReadDpRank()) return BatchError(Is("data_parallel_rank"));
      for (uint32_t i = 3; i < n; ++i) {
        if (!r_.Skip()) return BatchError("truncated msgpack");
      }
    } else if (r_.ReadMapHeader(&n)) {
      for (uint32_t i = 0; i < n; ++i) {
        std::string_view key;
        if (!r_.ReadStr(&key) && !r_.Skip()) {  // a non-string key: skip it and its value
          return BatchError("truncated msgpack");
        }
        if (key == "ts") {
          if (!r_.ReadNumber(&out_.ts)) return BatchError(Is("ts"));
        } else if (key == "events") {
          if (!DecodeEvents()) return BatchError(error_);
          saw_events = true;
        } else if (key == "data_parallel_rank") {
          if (!ReadDpRank()) return BatchError(Is("data_parallel_rank"));
        } else if (!r_.Skip()) {
          return BatchError("truncated msgpack");
        }
      }
      if (!saw_events) return BatchError("EventBatch map has no events");
    } else {
      return BatchError(r_.at_end() ? "empty payload" : Is("top-level value"));
    }
    if (!r_.at_end()) return BatchError(fmt::format("{} trailing bytes", r_.remaining()));
    return Status::Ok();
  }

 private:
  std::string Is(std::string_view what) const {
    return fmt::format("{} is {}", what, TypeName(r_.Peek()));
  }

  Status BatchError(std::string_view message) {
    out_.Clear();
    return Status::Error(fmt::format("not an EventBatch: {}", message));
  }

  bool ReadDpRank() {
    if (r_.ReadNil()) return true;
    uint64_t u;
    bool negative = false;
    if (!r_.ReadInteger(&u, &negative)) return false;
    out_.dp_rank = static_cast<int64_t>(u);
    return true;
  }

  bool DecodeEvents() {
    uint32_t n;
    if (!r_.ReadArrayHeader(&n)) {
      error_ = Is("events");
      return false;
    }
    out_.events.reserve(out_.events.size() + std::min<size_t>(n, r_.remaining()));
    for (uint32_t i = 0; i < n; ++i) {
      if (!DecodeEvent(i)) return false;
    }
    return true;
  }

  // Returns false only when the payload itself is broken (the event cannot be skipped).
  bool DecodeEvent(uint32_t index) {
    const size_t start = r_.offset();
    const Rollback rollback{out_.hashes.size(), out_.tokens.size(), out_.text.size(),
                            out_.extra_keys.size(), out_.copy_counts.size()};
    Event& e = out_.events.emplace_back();
    e.index = index;
    e.extra_keys.offset = static_cast<uint32_t>(out_.extra_keys.size());
    tag_ = Tag::kNone;
    event_ = {};
    dropped_kind_.clear();
    // llm-d's storage publisher wraps each event as msgpack bytes: decode the inner event.
    std::string_view wrapped;
    const bool is_wrapped = r_.ReadBin(&wrapped);
    bool decoded;
    if (is_wrapped) {
      const MsgpackReader outer = r_;  // past the bytes
      r_ = MsgpackReader(wrapped);
      decoded = DecodeEventBody(e);
      if (decoded && !r_.at_end()) decoded = Fail("bytes after the wrapped event");
      r_ = outer;
    } else {
      decoded = DecodeEventBody(e);
    }
    if (decoded) {
      if (dropped_kind_.empty()) return true;
      Reset(e, rollback, EventKind::kDropped,
            fmt::format("kv_cache_spec_kind '{}' is not prefix-reusable", dropped_kind_));
      return true;
    }
    Reset(e, rollback, EventKind::kInvalid, std::move(error_));
    if (is_wrapped) return true;  // (already past it)
    r_.Seek(start);
    if (!r_.Skip()) {
      error_ = "truncated msgpack";
      return false;
    }
    return true;
  }

  struct Rollback {
    size_t hashes, tokens, text, extra_keys, copy_counts;
  };
  void Reset(Event& e, const Rollback& rb, EventKind kind, std::string message) {
    out_.hashes.resize(rb.hashes);
    out_.tokens.resize(rb.tokens);
    out_.text.resize(rb.text);
    out_.extra_keys.resize(rb.extra_keys);
    out_.copy_counts.resize(rb.copy_counts);
    const uint32_t index = e.index;
    e = Event{};
    e.kind = kind;
    e.index = index;
    e.message = std::move(message);
  }

  bool DecodeEventBody(Event& e) {
    uint32_t n;
    bool positional;
    if (r_.ReadArrayHeader(&n)) {
      positional = true;
      if (n == 0) return Fail("event has no type");
      if (!DecodeField(Field::kType, e)) return false;
      const std::span<const Field> layout =
          tag_ == Tag::kStored    ? std::span<const Field>(kStoredLayout)
          : tag_ == Tag::kRemoved ? std::span<const Field>(kRemovedLayout)
                                  : std::span<const Field>();
      for (uint32_t i = 1; i < n; ++i) {
        const Field f = i - 1 < layout.size() ? layout[i - 1] : Field::kSkip;
        if (!DecodeField(f, e)) return false;
      }
    } else if (r_.ReadMapHeader(&n)) {
      positional = false;
      for (uint32_t i = 0; i < n; ++i) {
        std::string_view key;
        Field f = Field::kSkip;
        if (r_.ReadStr(&key)) {
          f = FieldNamed(key);
        } else if (!r_.Skip()) {
          return Fail("truncated event");
        }
        if (!DecodeField(f, e)) return false;
      }
    } else {
      return Fail(fmt::format("event is {}, expected an array or map", TypeName(r_.Peek())));
    }
    return Validate(positional, n) && Complete(e);
  }

  // What only the whole event tells: fields that must agree, and vLLM's cache salt.
  bool Complete(Event& e) {
    if (e.has_copy_counts && e.remaining_copy_counts.size != e.block_hashes.size) {
      return Fail(fmt::format("remaining_copy_counts has {} entries for {} block_hashes",
                              e.remaining_copy_counts.size, e.block_hashes.size));
    }
    // vLLM keys the first block of a salted request by (lora name, media ids..., salt): the
    // salt is the last string there, at the root of a chain. (A root block holding media but
    // no salt takes its last media id as the salt; harmless: kvgate never routes on blocks
    // past a request's first media part.)
    if (tag_ == Tag::kStored && !e.has_cache_salt && !e.has_parent && e.extra_keys.size > 0) {
      const Slice last = out_.extra_keys[e.extra_keys.offset + e.extra_keys.size - 1];
      const bool lora_only =
          e.extra_keys.size == 1 && e.has_lora_name && out_.Text(last) == out_.Text(e.lora_name);
      if (!lora_only) {
        e.has_cache_salt = true;
        e.cache_salt = last;
      }
    }
    return true;
  }

  bool Validate(bool positional, uint32_t fields) {
    const char* missing = nullptr;
    std::string_view type;
    switch (tag_) {
      case Tag::kNone:
        return Fail("event has no type");
      case Tag::kStored:
        type = "BlockStored";
        if (!event_.hashes)
          missing = "block_hashes";
        else if (!event_.tokens)
          missing = "token_ids";
        else if (!event_.block_size)
          missing = "block_size";
        break;
      case Tag::kRemoved:
        type = "BlockRemoved";
        if (!event_.hashes) missing = "block_hashes";
        break;
      case Tag::kCleared:
        break;
    }
    if (missing == nullptr) return true;
    return Fail(positional ? fmt::format("truncated {} ({} fields, no {})", type, fields, missing)
                           : fmt::format("{} without {}", type, missing));
  }

  bool DecodeField(Field field, Event& e) {
    switch (field) {
      case Field::kSkip:
        return r_.Skip() || Fail("truncated event");
      case Field::kType:
        return ReadTag(e);
      case Field::kBlockHashes:
        return ReadHashes(e);
      case Field::kParentHash:
        if (r_.ReadNil()) return true;
        if (!ReadHash(&e.parent_hash)) return Fail(Is("parent_block_hash"));
        e.has_parent = true;
        return true;
      case Field::kTokenIds:
        return ReadTokens(e);
      case Field::kBlockSize: {
        uint64_t v = 0;
        bool negative = false;
        if (!r_.ReadInteger(&v, &negative)) return Fail(Is("block_size"));
        if (negative || v == 0 || v > std::numeric_limits<uint32_t>::max()) {
          return Fail(fmt::format("block_size {} is out of range", static_cast<int64_t>(v)));
        }
        e.block_size = static_cast<uint32_t>(v);
        event_.block_size = true;
        return true;
      }
      case Field::kMedium: {
        std::string_view s;
        if (r_.ReadNil()) return true;
        if (!r_.ReadStr(&s)) return Fail(Is("medium"));
        e.medium = TierFromMedium(s, &e.unknown_medium);
        return true;
      }
      case Field::kLoraName: {
        std::string_view s;
        if (r_.ReadNil()) return true;
        uint32_t n = 0;
        if (r_.ReadMapHeader(&n)) return ReadStoreMetadata(e, n);
        if (!r_.ReadStr(&s)) return Fail(Is("lora_name"));
        e.has_lora_name = true;
        e.lora_name = AppendText(s);
        return true;
      }
      case Field::kExtraKeys:
        return ReadExtraKeys(e);
      case Field::kCopyCounts:
        return ReadCopyCounts(e);
      case Field::kGroupIdx: {
        uint64_t v = 0;
        bool negative = false;
        if (r_.ReadNil()) return true;
        if (!r_.ReadInteger(&v, &negative) || negative) return Fail(Is("group_idx"));
        e.group_idx = static_cast<uint32_t>(v);
        return true;
      }
      case Field::kSpecKind: {
        std::string_view s;
        if (r_.ReadNil()) return true;
        if (!r_.ReadStr(&s)) return Fail(Is("kv_cache_spec_kind"));
        if (!ReusableSpecKind(s)) dropped_kind_.assign(s);
        return true;
      }
    }
    return Fail("unreachable");
  }

  bool ReadTag(Event& e) {
    std::string_view s;
    if (!r_.ReadStr(&s)) return Fail(Is("type"));
    if (s == "BlockStored") {
      tag_ = Tag::kStored;
      e.kind = EventKind::kStored;
    } else if (s == "BlockRemoved") {
      tag_ = Tag::kRemoved;
      e.kind = EventKind::kRemoved;
    } else if (s == "AllBlocksCleared") {
      tag_ = Tag::kCleared;
      e.kind = EventKind::kCleared;
    } else {
      return Fail(fmt::format("unknown event type '{}'", s));
    }
    return true;
  }

  bool ReadHash(uint64_t* h) {
    uint64_t u;
    bool negative = false;
    if (r_.ReadInteger(&u, &negative)) {
      *h = u;  // signed values keep their two's-complement bits
      return true;
    }
    std::string_view bytes;
    if (!r_.ReadBin(&bytes)) return false;
    const size_t n = std::min<size_t>(bytes.size(), 8);
    *h = MsgpackReader::BigEndian(reinterpret_cast<const uint8_t*>(bytes.data() + bytes.size() - n),
                                  n);
    return true;
  }

  bool ReadHashes(Event& e) {
    uint32_t n;
    if (!r_.ReadArrayHeader(&n)) return Fail(Is("block_hashes"));
    e.block_hashes.offset = static_cast<uint32_t>(out_.hashes.size());
    out_.hashes.reserve(out_.hashes.size() + std::min<size_t>(n, r_.remaining()));
    for (uint32_t i = 0; i < n; ++i) {
      uint64_t h;
      if (!ReadHash(&h)) return Fail(fmt::format("block_hashes[{}] is {}", i, TypeName(r_.Peek())));
      out_.hashes.push_back(h);
    }
    e.block_hashes.size = n;
    event_.hashes = true;
    return true;
  }

  // The hot loop: one id, straight to u32. The common encodings are handled inline.
  IdResult ReadTokenId(uint32_t* id) {
    const uint8_t* p = r_.cursor();
    const size_t left = r_.remaining();
    if (left > 0 && p[0] <= 0x7f) {
      *id = p[0];
      r_.Advance(1);
      return IdResult::kOk;
    }
    if (left >= 5 && (p[0] == 0xcd || p[0] == 0xce)) {
      // uint16 and uint32 ids mix at random in real prompts: one branch-free path for both.
      uint32_t be;
      std::memcpy(&be, p + 1, 4);
      const bool wide = p[0] == 0xce;
      *id = __builtin_bswap32(be) >> (wide ? 0 : 16);
      r_.Advance(wide ? 5 : 3);
      return IdResult::kOk;
    }
    if (left >= 9 && p[0] == 0xcf) {  // u64: SGLang's wide image-pad ids fold here
      uint64_t be;
      std::memcpy(&be, p + 1, 8);
      *id = TokenFromU64(__builtin_bswap64(be));
      r_.Advance(9);
      return IdResult::kOk;
    }
    uint64_t u;
    bool negative = false;
    if (!r_.ReadInteger(&u, &negative)) return IdResult::kNotInteger;
    if (negative) return IdResult::kNegative;
    *id = TokenFromU64(u);
    return IdResult::kOk;
  }

  bool TokenError(IdResult result) {
    if (result == IdResult::kNegative) return Fail("negative token id");
    return Fail(fmt::format("token id is {}", TypeName(r_.Peek())));
  }

  bool ReadTokens(Event& e) {
    uint32_t n;
    if (!r_.ReadArrayHeader(&n)) return Fail(Is("token_ids"));
    if (n > r_.remaining()) return Fail("truncated token_ids");
    e.token_ids.offset = static_cast<uint32_t>(out_.tokens.size());
    event_.tokens = true;
    if (n > 0 && r_.Peek() == MsgType::kArray) return ReadBigramTokens(e, n);
    std::vector<uint32_t>& tokens = out_.tokens;
    tokens.reserve(tokens.size() + n);
    for (uint32_t i = 0; i < n; ++i) {
      uint32_t id;
      const IdResult result = ReadTokenId(&id);
      if (result != IdResult::kOk) [[unlikely]] {
        if (r_.Peek() == MsgType::kArray) return Fail("token_ids mixes integers and pairs");
        return TokenError(result);
      }
      tokens.push_back(id);
    }
    e.token_ids.size = n;
    return true;
  }

  // EAGLE bigrams [[a,b],[b,c],...]: each pair's first token, plus the last pair's second.
  bool ReadBigramTokens(Event& e, uint32_t pairs) {
    e.is_eagle = true;
    out_.tokens.reserve(out_.tokens.size() + pairs + 1);
    for (uint32_t i = 0; i < pairs; ++i) {
      uint32_t two;
      if (!r_.ReadArrayHeader(&two)) return Fail("token_ids mixes integers and pairs");
      if (two != 2) return Fail("token_ids pair must be a 2-element array");
      uint32_t first, second;
      IdResult result = ReadTokenId(&first);
      if (result != IdResult::kOk) return TokenError(result);
      result = ReadTokenId(&second);
      if (result != IdResult::kOk) return TokenError(result);
      out_.tokens.push_back(first);
      if (i + 1 == pairs) out_.tokens.push_back(second);
    }
    e.token_ids.size = pairs + 1;
    return true;
  }

  // extra_keys (per-block tuples of mm hashes, LoRA name, cache salt...): keep the string
  // leaves in order; everything else is read past.
  // SGLang (0.5.18 on) puts a metadata map where vLLM has lora_name: {"cache_salt": s or
  // nil, "session_id": ...}. A salt seeds the stored chain's hashes as it seeds requests'.
  bool ReadStoreMetadata(Event& e, uint32_t entries) {
    for (uint32_t i = 0; i < entries; ++i) {
      std::string_view key;
      if (!r_.ReadStr(&key)) {
        if (!r_.Skip() || !r_.Skip()) return Fail("truncated msgpack");
        continue;
      }
      if (key != "cache_salt") {
        if (!r_.Skip()) return Fail("truncated msgpack");
        continue;
      }
      std::string_view salt;
      if (r_.ReadNil()) continue;
      if (!r_.ReadStr(&salt)) return Fail(Is("cache_salt"));
      e.has_cache_salt = true;
      e.cache_salt = AppendText(salt);
    }
    return true;
  }

  // extra_keys: one entry per block (a tuple or nil). Only the first block's string leaves
  // are kept (they carry vLLM's cache salt); the other blocks' entries are read past.
  bool ReadExtraKeys(Event& e) {
    uint32_t blocks;
    if (!r_.ReadArrayHeader(&blocks)) return r_.Skip() || Fail("truncated extra_keys");
    if (blocks == 0) return true;
    uint64_t pending = 1;
    while (pending > 0) {
      --pending;
      uint32_t n;
      std::string_view s;
      if (r_.ReadArrayHeader(&n)) {
        pending += n;
      } else if (r_.ReadMapHeader(&n)) {
        pending += uint64_t{n} * 2;
      } else if (r_.ReadStr(&s)) {
        out_.extra_keys.push_back(AppendText(s));
        ++e.extra_keys.size;
      } else if (!r_.Skip()) {
        return Fail("truncated extra_keys");
      }
    }
    for (uint32_t i = 1; i < blocks; ++i) {
      if (!r_.Skip()) return Fail("truncated extra_keys");
    }
    return true;
  }

  bool ReadCopyCounts(Event& e) {
    if (r_.ReadNil()) return true;
    uint32_t n;
    if (!r_.ReadArrayHeader(&n)) return Fail(Is("remaining_copy_counts"));
    e.has_copy_counts = true;
    e.remaining_copy_counts.offset = static_cast<uint32_t>(out_.copy_counts.size());
    for (uint32_t i = 0; i < n; ++i) {
      uint64_t v = 0;
      bool negative = false;
      if (!r_.ReadInteger(&v, &negative) || negative || v > UINT32_MAX) {
        return Fail(fmt::format("remaining_copy_counts[{}] is not a count", i));
      }
      out_.copy_counts.push_back(static_cast<uint32_t>(v));
    }
    e.remaining_copy_counts.size = n;
    return true;
  }

  Slice AppendText(std::string_view s) {
    Slice slice{static_cast<uint32_t>(out_.text.size()), static_cast<uint32_t>(s.size())};
    out_.text.append(s);
    return slice;
  }

  bool Fail(std::string message) {
    error_ = std::move(message);
    return false;
  }

  MsgpackReader r_;
  DecodedBatch& out_;
  std::string error_;
  // Per event.
  Tag tag_ = Tag::kNone;
  struct {
    bool hashes = false, tokens = false, block_size = false;
  } event_;
  std::string dropped_kind_;
};

}  // namespace

Status DecodeEventBatch(std::string_view payload, DecodedBatch& out) {
  out.Clear();
  return BatchDecoder(payload, out).Decode();
}

}  // namespace kvgate::wire
