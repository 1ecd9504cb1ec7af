// The decoder is a msgpack-cxx visitor driven by a small stack of frames. Each frame knows
// what its container is (the batch, the event list, one event, a field's list, a bigram
// pair); every scalar is routed by the top frame to the one place it belongs. A problem
// inside an event marks only that event failed: its remaining values are skipped and the
// arenas are rolled back to where the event began.
#include "wire/decode.h"

#include <cstring>
#include <limits>
#include <msgpack.hpp>

#include <fmt/format.h>

namespace kvgate::wire {
namespace {

enum class Tag : uint8_t { kNone, kStored, kRemoved, kCleared };

// What a value fills, decided by the enclosing frame.
enum class Slot : uint8_t {
  kSkip,
  kBatch,
  kTs,
  kEvents,
  kDpRank,
  kEvent,
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
  kHashItem,
  kTokenItem,
  kPairItem,
  kExtraItem,
};

// Positional layouts after the tag (DESIGN.md §3). lora_id and the sliding window size are
// read past and ignored.
constexpr Slot kStoredLayout[] = {Slot::kBlockHashes, Slot::kParentHash, Slot::kTokenIds,
                                  Slot::kBlockSize,   Slot::kSkip,       Slot::kMedium,
                                  Slot::kLoraName,    Slot::kExtraKeys,  Slot::kGroupIdx,
                                  Slot::kSpecKind,    Slot::kSkip};
constexpr Slot kRemovedLayout[] = {Slot::kBlockHashes, Slot::kMedium, Slot::kGroupIdx};

Slot EventKeySlot(std::string_view key) {
  if (key == "type") return Slot::kType;
  if (key == "block_hashes") return Slot::kBlockHashes;
  if (key == "parent_block_hash") return Slot::kParentHash;
  if (key == "token_ids") return Slot::kTokenIds;
  if (key == "block_size") return Slot::kBlockSize;
  if (key == "medium") return Slot::kMedium;
  if (key == "lora_name") return Slot::kLoraName;
  if (key == "extra_keys") return Slot::kExtraKeys;
  if (key == "group_idx") return Slot::kGroupIdx;
  if (key == "kv_cache_spec_kind") return Slot::kSpecKind;
  return Slot::kSkip;
}

Slot BatchKeySlot(std::string_view key) {
  if (key == "ts") return Slot::kTs;
  if (key == "events") return Slot::kEvents;
  if (key == "data_parallel_rank") return Slot::kDpRank;
  return Slot::kSkip;
}

Slot BatchIndexSlot(uint32_t index) {
  switch (index) {
    case 0:
      return Slot::kTs;
    case 1:
      return Slot::kEvents;
    case 2:
      return Slot::kDpRank;
    default:
      return Slot::kSkip;
  }
}

std::string_view SlotName(Slot slot) {
  switch (slot) {
    case Slot::kBatch:
      return "top-level value";
    case Slot::kTs:
      return "ts";
    case Slot::kEvents:
      return "events";
    case Slot::kDpRank:
      return "data_parallel_rank";
    case Slot::kBlockHashes:
      return "block_hashes";
    case Slot::kParentHash:
      return "parent_block_hash";
    case Slot::kTokenIds:
      return "token_ids";
    case Slot::kBlockSize:
      return "block_size";
    case Slot::kMedium:
      return "medium";
    case Slot::kLoraName:
      return "lora_name";
    case Slot::kExtraKeys:
      return "extra_keys";
    case Slot::kGroupIdx:
      return "group_idx";
    case Slot::kSpecKind:
      return "kv_cache_spec_kind";
    case Slot::kType:
      return "type";
    case Slot::kHashItem:
      return "block_hashes item";
    case Slot::kTokenItem:
    case Slot::kPairItem:
      return "token_ids item";
    default:
      return "value";
  }
}

Tier TierFromMedium(std::string_view m, bool* unknown) {
  *unknown = false;
  if (m.empty() || m == "GPU" || m == "DEVICE") return Tier::kDevice;
  if (m == "CPU" || m == "CPU_PINNED" || m == "CPU_TIER1") return Tier::kHost;
  if (m == "CPU_TIER2" || m == "DISK" || m == "NVME") return Tier::kDisk;
  if (m == "EXTERNAL" || m == "NETWORK" || m == "REMOTE" || m == "SHARED") return Tier::kExternal;
  *unknown = true;
  return Tier::kDevice;
}

bool ReusableSpecKind(std::string_view kind) {
  return kind == "full_attention" || kind == "mla_attention" || kind == "sink_full_attention";
}

uint64_t HashFromBytes(const char* p, uint32_t size) {
  const uint32_t n = size < 8 ? size : 8;
  const auto* bytes = reinterpret_cast<const unsigned char*>(p + size - n);
  uint64_t v = 0;
  for (uint32_t i = 0; i < n; ++i) v = (v << 8) | bytes[i];
  return v;
}

class BatchVisitor : public msgpack::null_visitor {
 public:
  explicit BatchVisitor(DecodedBatch& out) : out_(out) { stack_.reserve(8); }

  const std::string& error() const { return error_; }
  bool saw_batch() const { return saw_batch_; }
  bool saw_events() const { return saw_events_; }

  // --- scalars ---
  bool visit_nil() {
    if (Skipping()) return true;
    if (InKey()) return NonStringKey();
    switch (CurrentSlot()) {
      case Slot::kSkip:
      case Slot::kDpRank:
      case Slot::kParentHash:
      case Slot::kMedium:
      case Slot::kLoraName:
      case Slot::kGroupIdx:
      case Slot::kSpecKind:
      case Slot::kExtraKeys:
      case Slot::kExtraItem:
        return true;
      default:
        return WrongType("nil");
    }
  }
  bool visit_boolean(bool) {
    if (Skipping()) return true;
    if (InKey()) return NonStringKey();
    const Slot s = CurrentSlot();
    if (s == Slot::kSkip || s == Slot::kExtraItem) return true;
    return WrongType("a boolean");
  }
  bool visit_positive_integer(uint64_t v) {
    if (Skipping()) return true;
    if (InKey()) return NonStringKey();
    switch (CurrentSlot()) {
      case Slot::kTokenItem:
        if (pairs_) [[unlikely]]
          return FailEvent("token_ids mixes integers and pairs");
        out_.tokens.push_back(v <= std::numeric_limits<uint32_t>::max() ? static_cast<uint32_t>(v)
                                                                        : FoldWideTokenId(v));
        return true;
      case Slot::kPairItem:
        return PairItem(v);
      case Slot::kHashItem:
        out_.hashes.push_back(v);
        return true;
      case Slot::kParentHash:
        event().parent_hash = v;
        event().has_parent = true;
        return true;
      case Slot::kBlockSize:
        if (v == 0 || v > std::numeric_limits<uint32_t>::max()) {
          return FailEvent(fmt::format("block_size {} is out of range", v));
        }
        event().block_size = static_cast<uint32_t>(v);
        seen_block_size_ = true;
        return true;
      case Slot::kGroupIdx:
        event().group_idx = static_cast<uint32_t>(v);
        return true;
      case Slot::kTs:
        out_.ts = static_cast<double>(v);
        return true;
      case Slot::kDpRank:
        out_.dp_rank = static_cast<int64_t>(v);
        return true;
      case Slot::kSkip:
      case Slot::kExtraItem:
        return true;
      default:
        return WrongType("an integer");
    }
  }
  bool visit_negative_integer(int64_t v) {
    if (Skipping()) return true;
    if (InKey()) return NonStringKey();
    switch (CurrentSlot()) {
      case Slot::kHashItem:
        out_.hashes.push_back(static_cast<uint64_t>(v));
        return true;
      case Slot::kParentHash:
        event().parent_hash = static_cast<uint64_t>(v);
        event().has_parent = true;
        return true;
      case Slot::kTokenItem:
      case Slot::kPairItem:
        return FailEvent(fmt::format("negative token id {}", v));
      case Slot::kTs:
        out_.ts = static_cast<double>(v);
        return true;
      case Slot::kDpRank:
        out_.dp_rank = v;
        return true;
      case Slot::kSkip:
      case Slot::kExtraItem:
        return true;
      default:
        return WrongType("a negative integer");
    }
  }
  bool visit_float32(float v) { return visit_float64(v); }
  bool visit_float64(double v) {
    if (Skipping()) return true;
    if (InKey()) return NonStringKey();
    switch (CurrentSlot()) {
      case Slot::kTs:
        out_.ts = v;
        return true;
      case Slot::kTokenItem:
      case Slot::kPairItem:
        return FailEvent("non-integer token id");
      case Slot::kSkip:
      case Slot::kExtraItem:
        return true;
      default:
        return WrongType("a float");
    }
  }
  bool visit_str(const char* p, uint32_t size) {
    const std::string_view s(p, size);
    if (Skipping()) return true;
    if (InKey()) {
      Frame& f = stack_.back();
      f.pending = f.role == Role::kBatch ? BatchKeySlot(s) : EventKeySlot(s);
      return true;
    }
    switch (CurrentSlot()) {
      case Slot::kType:
        return SetTag(s);
      case Slot::kMedium:
        event().medium = TierFromMedium(s, &event().unknown_medium);
        return true;
      case Slot::kLoraName:
        event().has_lora_name = true;
        event().lora_name = AppendText(s);
        return true;
      case Slot::kSpecKind:
        if (!ReusableSpecKind(s)) dropped_kind_.assign(s);
        return true;
      case Slot::kExtraItem:
      case Slot::kExtraKeys:
        out_.extra_keys.push_back(AppendText(s));
        ++event().extra_keys.size;
        return true;
      case Slot::kSkip:
        return true;
      default:
        return WrongType("a string");
    }
  }
  bool visit_bin(const char* p, uint32_t size) {
    if (Skipping()) return true;
    if (InKey()) return NonStringKey();
    switch (CurrentSlot()) {
      case Slot::kHashItem:
        out_.hashes.push_back(HashFromBytes(p, size));
        return true;
      case Slot::kParentHash:
        event().parent_hash = HashFromBytes(p, size);
        event().has_parent = true;
        return true;
      case Slot::kSkip:
      case Slot::kExtraItem:
        return true;
      default:
        return WrongType("bytes");
    }
  }
  bool visit_ext(const char*, uint32_t) {
    if (Skipping()) return true;
    if (InKey()) return NonStringKey();
    const Slot s = CurrentSlot();
    if (s == Slot::kSkip || s == Slot::kExtraItem) return true;
    return WrongType("an ext value");
  }

  // --- containers ---
  bool start_array(uint32_t n) { return StartContainer(n, /*is_map=*/false); }
  bool start_map(uint32_t n) { return StartContainer(n, /*is_map=*/true); }
  bool end_array_item() {
    if (skip_depth_ == 0) ++stack_.back().index;
    return true;
  }
  bool start_map_key() {
    if (skip_depth_ == 0) stack_.back().in_key = true;
    return true;
  }
  bool end_map_key() {
    if (skip_depth_ == 0) stack_.back().in_key = false;
    return true;
  }
  bool end_map_value() {
    if (skip_depth_ == 0) {
      ++stack_.back().index;
      stack_.back().pending = Slot::kSkip;
    }
    return true;
  }
  bool end_array() { return EndContainer(); }
  bool end_map() { return EndContainer(); }

  void parse_error(size_t, size_t error_offset) {
    if (error_.empty()) error_ = fmt::format("not an EventBatch: malformed msgpack at byte {}", error_offset);
  }
  void insufficient_bytes(size_t, size_t error_offset) {
    if (error_.empty()) error_ = fmt::format("not an EventBatch: truncated msgpack at byte {}", error_offset);
  }

 private:
  enum class Role : uint8_t { kBatch, kEvents, kEvent, kHashes, kTokens, kPair, kExtraKeys };

  struct Frame {
    Role role;
    bool is_map;
    bool in_key = false;
    Slot pending = Slot::kSkip;  // map frames: the slot of the value after the current key
    uint32_t index = 0;          // current item (arrays) or pair (maps)
    uint32_t size = 0;
  };

  Event& event() { return out_.events.back(); }
  bool Skipping() const { return skip_depth_ > 0; }
  bool InKey() const { return !stack_.empty() && stack_.back().in_key; }

  Slot CurrentSlot() const {
    if (stack_.empty()) return Slot::kBatch;
    const Frame& f = stack_.back();
    switch (f.role) {
      case Role::kBatch:
        return f.is_map ? f.pending : BatchIndexSlot(f.index);
      case Role::kEvents:
        return Slot::kEvent;
      case Role::kEvent:
        if (event_failed_) return Slot::kSkip;
        if (f.is_map) return f.pending;
        if (f.index == 0) return Slot::kType;
        return PositionalSlot(f.index - 1);
      case Role::kHashes:
        return Slot::kHashItem;
      case Role::kTokens:
        return Slot::kTokenItem;
      case Role::kPair:
        return Slot::kPairItem;
      case Role::kExtraKeys:
        return Slot::kExtraItem;
    }
    return Slot::kSkip;
  }

  Slot PositionalSlot(uint32_t field) const {
    switch (tag_) {
      case Tag::kStored:
        return field < std::size(kStoredLayout) ? kStoredLayout[field] : Slot::kSkip;
      case Tag::kRemoved:
        return field < std::size(kRemovedLayout) ? kRemovedLayout[field] : Slot::kSkip;
      default:
        return Slot::kSkip;
    }
  }

  bool NonStringKey() {
    stack_.back().pending = Slot::kSkip;
    return true;
  }

  bool StartContainer(uint32_t n, bool is_map) {
    if (Skipping()) {
      ++skip_depth_;
      return true;
    }
    if (InKey()) {  // a container used as a map key: ignore that entry
      stack_.back().pending = Slot::kSkip;
      ++skip_depth_;
      return true;
    }
    const Slot slot = CurrentSlot();
    switch (slot) {
      case Slot::kBatch:
        if (!is_map && n < 2) return BatchError("an EventBatch array needs at least 2 elements");
        saw_batch_ = true;
        return Push(Role::kBatch, is_map, n);
      case Slot::kEvents:
        if (is_map) return BatchError("events is a map, expected an array");
        saw_events_ = true;
        out_.events.reserve(n);
        return Push(Role::kEvents, false, n);
      case Slot::kEvent:
        BeginEvent();
        return Push(Role::kEvent, is_map, n);
      case Slot::kBlockHashes:
        if (is_map) return ContainerWrongType(slot);
        seen_hashes_ = true;
        event().block_hashes.offset = static_cast<uint32_t>(out_.hashes.size());
        out_.hashes.reserve(out_.hashes.size() + n);
        return Push(Role::kHashes, false, n);
      case Slot::kTokenIds:
        if (is_map) return ContainerWrongType(slot);
        seen_tokens_ = true;
        event().token_ids.offset = static_cast<uint32_t>(out_.tokens.size());
        out_.tokens.reserve(out_.tokens.size() + n + 1);
        pairs_ = false;
        return Push(Role::kTokens, false, n);
      case Slot::kTokenItem:
        return StartPair(n, is_map);
      case Slot::kExtraKeys:
        event().extra_keys.offset = static_cast<uint32_t>(out_.extra_keys.size());
        return Push(Role::kExtraKeys, is_map, n);
      case Slot::kExtraItem:
        if (stack_.size() >= kMaxExtraDepth) {
          ++skip_depth_;
          return true;
        }
        return Push(Role::kExtraKeys, is_map, n);
      case Slot::kSkip:
        ++skip_depth_;
        return true;
      default:
        return ContainerWrongType(slot);
    }
  }

  bool StartPair(uint32_t n, bool is_map) {
    const Frame& tokens = stack_.back();
    if (tokens.index == 0) {
      pairs_ = true;
      event().is_eagle = true;
    } else if (!pairs_) {
      return FailContainer("token_ids mixes integers and pairs");
    }
    if (is_map || n != 2) return FailContainer("token_ids pair must be a 2-element array");
    return Push(Role::kPair, false, n);
  }

  bool PairItem(uint64_t v) {
    const Frame& pair = stack_.back();
    const Frame& tokens = stack_[stack_.size() - 2];
    // The sequence is each pair's first token plus the last pair's second token.
    if (pair.index == 0 || tokens.index + 1 == tokens.size) {
      out_.tokens.push_back(v <= std::numeric_limits<uint32_t>::max() ? static_cast<uint32_t>(v)
                                                                      : FoldWideTokenId(v));
    }
    return true;
  }

  bool Push(Role role, bool is_map, uint32_t n) {
    stack_.push_back(Frame{role, is_map, false, Slot::kSkip, 0, n});
    return true;
  }

  bool EndContainer() {
    if (skip_depth_ > 0) {
      --skip_depth_;
      return true;
    }
    const Frame f = stack_.back();
    stack_.pop_back();
    switch (f.role) {
      case Role::kHashes:
        event().block_hashes.size =
            static_cast<uint32_t>(out_.hashes.size()) - event().block_hashes.offset;
        break;
      case Role::kTokens:
        event().token_ids.size =
            static_cast<uint32_t>(out_.tokens.size()) - event().token_ids.offset;
        break;
      case Role::kEvent:
        EndEvent(f);
        break;
      case Role::kBatch:
        if (f.is_map && !saw_events_) return BatchError("EventBatch map has no events");
        break;
      default:
        break;
    }
    return true;
  }

  void BeginEvent() {
    Event& e = out_.events.emplace_back();
    e.index = stack_.back().index;
    tag_ = Tag::kNone;
    event_failed_ = false;
    seen_hashes_ = seen_tokens_ = seen_block_size_ = false;
    dropped_kind_.clear();
    rollback_ = {out_.hashes.size(), out_.tokens.size(), out_.text.size(),
                 out_.extra_keys.size()};
    e.extra_keys.offset = static_cast<uint32_t>(out_.extra_keys.size());
  }

  void EndEvent(const Frame& f) {
    Event& e = event();
    if (!event_failed_) {
      const char* missing = nullptr;
      const std::string_view type = tag_ == Tag::kStored ? "BlockStored" : "BlockRemoved";
      switch (tag_) {
        case Tag::kNone:
          MarkFailed("event has no type");
          break;
        case Tag::kStored:
          if (!seen_hashes_) missing = "block_hashes";
          else if (!seen_tokens_) missing = "token_ids";
          else if (!seen_block_size_) missing = "block_size";
          break;
        case Tag::kRemoved:
          if (!seen_hashes_) missing = "block_hashes";
          break;
        case Tag::kCleared:
          break;
      }
      if (missing != nullptr) {
        MarkFailed(f.is_map ? fmt::format("{} without {}", type, missing)
                           : fmt::format("truncated {} ({} fields, no {})", type, f.size, missing));
      }
    }
    if (event_failed_) {
      out_.hashes.resize(rollback_.hashes);
      out_.tokens.resize(rollback_.tokens);
      out_.text.resize(rollback_.text);
      out_.extra_keys.resize(rollback_.extra_keys);
      const uint32_t index = e.index;
      std::string message = std::move(e.message);
      e = Event{};
      e.kind = EventKind::kInvalid;
      e.index = index;
      e.message = std::move(message);
      return;
    }
    if (!dropped_kind_.empty()) {
      e.kind = EventKind::kDropped;
      e.message = fmt::format("kv_cache_spec_kind '{}' is not prefix-reusable", dropped_kind_);
    }
  }

  bool SetTag(std::string_view s) {
    if (s == "BlockStored") {
      tag_ = Tag::kStored;
      event().kind = EventKind::kStored;
    } else if (s == "BlockRemoved") {
      tag_ = Tag::kRemoved;
      event().kind = EventKind::kRemoved;
    } else if (s == "AllBlocksCleared") {
      tag_ = Tag::kCleared;
      event().kind = EventKind::kCleared;
    } else {
      return FailEvent(fmt::format("unknown event type '{}'", s));
    }
    return true;
  }

  Slice AppendText(std::string_view s) {
    Slice slice{static_cast<uint32_t>(out_.text.size()), static_cast<uint32_t>(s.size())};
    out_.text.append(s);
    return slice;
  }

  void MarkFailed(std::string message) {
    if (!event_failed_) {
      event_failed_ = true;
      event().message = std::move(message);
    }
  }

  // Marks the current event invalid; everything up to its end is then skipped.
  bool FailEvent(std::string message) {
    MarkFailed(std::move(message));
    while (stack_.back().role != Role::kEvent) {  // skip the rest of open field containers
      stack_.pop_back();
      ++skip_depth_;
    }
    return true;
  }

  // FailEvent for a container that is starting now (its end must be skipped too).
  bool FailContainer(std::string message) {
    FailEvent(std::move(message));
    ++skip_depth_;
    return true;
  }

  bool WrongType(std::string_view what) {
    const Slot slot = CurrentSlot();
    if (slot == Slot::kEvent) {
      BeginEvent();
      event().kind = EventKind::kInvalid;
      event().message = fmt::format("event is {}, expected an array or map", what);
      return true;
    }
    if (InsideEvent()) return FailEvent(fmt::format("{} is {}", SlotName(slot), what));
    return BatchError(fmt::format("{} is {}", SlotName(slot), what));
  }

  bool ContainerWrongType(Slot slot) {
    const std::string message = fmt::format("{} has the wrong type (a container)", SlotName(slot));
    return InsideEvent() ? FailContainer(message) : BatchError(message);
  }

  bool InsideEvent() const {
    for (auto it = stack_.rbegin(); it != stack_.rend(); ++it) {
      if (it->role == Role::kEvent) return true;
    }
    return false;
  }

  bool BatchError(std::string message) {
    error_ = fmt::format("not an EventBatch: {}", message);
    return false;
  }

  static constexpr size_t kMaxExtraDepth = 16;

  DecodedBatch& out_;
  std::vector<Frame> stack_;
  uint32_t skip_depth_ = 0;
  std::string error_;
  bool saw_batch_ = false;
  bool saw_events_ = false;

  // State of the event being decoded.
  Tag tag_ = Tag::kNone;
  bool event_failed_ = false;
  bool seen_hashes_ = false;
  bool seen_tokens_ = false;
  bool seen_block_size_ = false;
  bool pairs_ = false;
  std::string dropped_kind_;
  struct {
    size_t hashes, tokens, text, extra_keys;
  } rollback_{};
};

}  // namespace

Status DecodeEventBatch(std::string_view payload, DecodedBatch& out) {
  out.Clear();
  BatchVisitor visitor(out);
  size_t offset = 0;
  const bool ok = msgpack::parse(payload.data(), payload.size(), offset, visitor);
  if (!visitor.error().empty()) {
    out.Clear();
    return Status::Error(visitor.error());
  }
  if (!ok || !visitor.saw_batch()) {
    out.Clear();
    return Status::Error(
        payload.empty() ? "not an EventBatch: empty payload"
                        : "not an EventBatch: top-level value is not an array or map");
  }
  if (!visitor.saw_events()) {
    out.Clear();
    return Status::Error("not an EventBatch: no events array");
  }
  if (offset != payload.size()) {
    out.Clear();
    return Status::Error(
        fmt::format("not an EventBatch: {} trailing bytes", payload.size() - offset));
  }
  return Status::Ok();
}

}  // namespace kvgate::wire
