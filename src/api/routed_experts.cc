#include "api/routed_experts.h"

#include <fmt/format.h>

#include <boost/json.hpp>
#include <string_view>

#include "common/base64.h"

namespace kvgate::api {
namespace {

namespace json = boost::json;

// base64 of "\x93NUMPY": every .npy payload starts with it.
constexpr std::string_view kNpyBase64Prefix = "k05VTVBZ";

// Decoded size of a padded base64 string, without decoding it.
std::optional<uint64_t> Base64DecodedSize(std::string_view s) {
  if (s.size() % 4 != 0) return std::nullopt;
  uint64_t n = s.size() / 4 * 3;
  if (!s.empty() && s.back() == '=') --n;
  if (s.size() > 1 && s[s.size() - 2] == '=') --n;
  return n;
}

json::object Result(json::value data, std::string_view dtype, uint64_t rows, uint64_t layers,
                    uint64_t top_k, uint64_t start) {
  return json::object{{"data", std::move(data)},
                      {"dtype", dtype},
                      {"shape", json::array{rows, layers, top_k}},
                      {"start", start}};
}

// Rows the token counts imply: [start, prompt + completion - 1).
std::optional<uint64_t> RowsFromCounts(const ExpertsContext& c) {
  if (!c.prompt_tokens || !c.completion_tokens) return std::nullopt;
  const uint64_t total = *c.prompt_tokens + *c.completion_tokens;
  return total > c.start + 1 ? total - 1 - c.start : 0;
}

json::value FromRawInt32(const json::string& data, const ExpertsContext& c, std::string* problem) {
  if (c.layers == 0 || c.top_k == 0) {
    *problem = "routed experts came as raw int32 but the model's layers/top_k are unknown";
    return nullptr;
  }
  const auto bytes = Base64DecodedSize(data);
  const uint64_t row_bytes = uint64_t{c.layers} * c.top_k * 4;
  if (!bytes || *bytes % row_bytes != 0) {
    *problem = "routed experts: data size is not a whole number of rows";
    return nullptr;
  }
  const uint64_t rows = *bytes / row_bytes;
  if (auto expected = RowsFromCounts(c); expected && *expected != rows) {
    *problem =
        fmt::format("routed experts: {} rows, but the token counts imply {}", rows, *expected);
    return nullptr;
  }
  return Result(data, "int32", rows, c.layers, c.top_k, c.start);  // the engine's string as is
}

// A .npy header: "\x93NUMPY", version, header length, then a Python dict literal.
json::value FromNpy(std::string_view b64, const ExpertsContext& c, std::string* problem) {
  const auto bytes = Base64Decode(b64);
  if (!bytes || bytes->size() < 10) {
    *problem = "routed experts: invalid base64 .npy";
    return nullptr;
  }
  const std::string& npy = *bytes;
  const uint8_t major = static_cast<uint8_t>(npy[6]);
  size_t header_len = 0, offset = 0;
  if (major == 1) {
    header_len = static_cast<uint8_t>(npy[8]) | (static_cast<uint8_t>(npy[9]) << 8);
    offset = 10;
  } else if (npy.size() >= 12) {
    for (int i = 3; i >= 0; --i) header_len = header_len << 8 | static_cast<uint8_t>(npy[8 + i]);
    offset = 12;
  }
  if (offset == 0 || offset + header_len > npy.size()) {
    *problem = "routed experts: truncated .npy header";
    return nullptr;
  }
  const std::string_view header(npy.data() + offset, header_len);
  auto value_after = [&](std::string_view key) -> std::string_view {
    const size_t k = header.find(key);
    if (k == std::string_view::npos) return {};
    size_t v = header.find(':', k);
    if (v == std::string_view::npos) return {};
    ++v;
    while (v < header.size() && header[v] == ' ') ++v;
    return header.substr(v);
  };
  std::string_view descr = value_after("'descr'");
  std::string_view dtype;
  size_t itemsize = 0;
  for (auto [code, name, size] : {std::tuple{"'|u1'", "uint8", 1},
                                  {"'<u1'", "uint8", 1},
                                  {"'<u2'", "uint16", 2},
                                  {"'<i2'", "int16", 2},
                                  {"'<i4'", "int32", 4}}) {
    if (descr.substr(0, std::string_view(code).size()) == code) {
      dtype = name;
      itemsize = static_cast<size_t>(size);
    }
  }
  if (itemsize == 0) {
    *problem = fmt::format("routed experts: unsupported .npy dtype {}", descr.substr(0, 6));
    return nullptr;
  }
  if (value_after("'fortran_order'").substr(0, 5) != "False") {
    *problem = "routed experts: Fortran-order .npy";
    return nullptr;
  }
  std::string_view shape_text = value_after("'shape'");
  std::vector<uint64_t> shape;
  if (!shape_text.empty() && shape_text[0] == '(') {
    size_t i = 1;
    while (i < shape_text.size() && shape_text[i] != ')') {
      if (shape_text[i] >= '0' && shape_text[i] <= '9') {
        uint64_t n = 0;
        bool overflow = false;
        while (i < shape_text.size() && shape_text[i] >= '0' && shape_text[i] <= '9') {
          overflow |= __builtin_mul_overflow(n, 10, &n) ||
                      __builtin_add_overflow(n, static_cast<uint64_t>(shape_text[i++] - '0'), &n);
        }
        if (overflow) {
          *problem = "routed experts: .npy shape out of range";
          return nullptr;
        }
        shape.push_back(n);
      } else {
        ++i;
      }
    }
  }
  if (shape.size() != 3) {
    *problem = "routed experts: .npy shape is not [rows, layers, top_k]";
    return nullptr;
  }
  const std::string_view data(npy.data() + offset + header_len, npy.size() - offset - header_len);
  // The size the shape implies, checked: a crafted shape must not wrap around to match.
  uint64_t implied = itemsize;
  bool overflow = false;
  for (uint64_t dim : shape) overflow |= __builtin_mul_overflow(implied, dim, &implied);
  if (overflow || data.size() != implied) {
    *problem = "routed experts: .npy data size does not match its shape";
    return nullptr;
  }
  if (auto expected = RowsFromCounts(c); expected && *expected != shape[0]) {
    *problem =
        fmt::format("routed experts: {} rows, but the token counts imply {}", shape[0], *expected);
    return nullptr;
  }
  return Result(json::string(Base64Encode(data)), dtype, shape[0], shape[1], shape[2], c.start);
}

json::value FromLists(const json::array& rows, const ExpertsContext& c, std::string* problem) {
  uint64_t layers = 0, top_k = 0;
  std::string bytes;
  for (const json::value& row : rows) {
    const json::array* r = row.if_array();
    if (r == nullptr || (layers != 0 && r->size() != layers) || r->empty()) {
      *problem = "routed experts: ragged nested lists";
      return nullptr;
    }
    layers = r->size();
    for (const json::value& layer : *r) {
      const json::array* l = layer.if_array();
      if (l == nullptr || (top_k != 0 && l->size() != top_k) || l->empty()) {
        *problem = "routed experts: ragged nested lists";
        return nullptr;
      }
      top_k = l->size();
      for (const json::value& e : *l) {
        if (!e.is_int64() || e.as_int64() < INT32_MIN || e.as_int64() > INT32_MAX) {
          *problem = "routed experts: lists hold a non-integer";
          return nullptr;
        }
        const auto v = static_cast<uint32_t>(static_cast<int32_t>(e.as_int64()));
        const char le[4] = {static_cast<char>(v), static_cast<char>(v >> 8),
                            static_cast<char>(v >> 16), static_cast<char>(v >> 24)};
        bytes.append(le, 4);
      }
    }
  }
  if (auto expected = RowsFromCounts(c); expected && *expected != rows.size()) {
    *problem = fmt::format("routed experts: {} rows, but the token counts imply {}", rows.size(),
                           *expected);
    return nullptr;
  }
  if (rows.empty()) {
    layers = c.layers;
    top_k = c.top_k;
  }
  return Result(json::string(Base64Encode(bytes)), "int32", rows.size(), layers, top_k, c.start);
}

}  // namespace

json::value NormalizeRoutedExperts(const json::value& native, const ExpertsContext& context,
                                   std::string* problem) {
  if (const json::string* s = native.if_string()) {
    if (std::string_view(*s).substr(0, kNpyBase64Prefix.size()) == kNpyBase64Prefix) {
      return FromNpy(*s, context, problem);
    }
    return FromRawInt32(*s, context, problem);
  }
  if (const json::array* a = native.if_array()) return FromLists(*a, context, problem);
  if (const json::object* o = native.if_object()) {
    if (o->contains("data") && o->contains("shape") && o->contains("dtype")) return native;
  }
  *problem = native.is_null() ? "the engine returned no routed experts"
                              : "routed experts of an unknown form";
  return nullptr;
}

json::value StitchRoutedExperts(const json::value& head, const json::value& tail, uint64_t rows,
                                std::string* problem) {
  auto shape = [](const json::object& o, size_t i) {
    return o.at("shape").as_array()[i].to_number<uint64_t>();
  };
  if (!tail.is_object()) {
    *problem = "routed experts: the decode worker returned none";
    return nullptr;
  }
  const json::object& t = tail.as_object();
  const uint64_t tail_rows = shape(t, 0);
  if (tail_rows == rows) return tail;  // the decode worker has them all
  if (!head.is_object()) {
    *problem = "routed experts: the prompt rows the prefill worker computed are missing";
    return nullptr;
  }
  const json::object& h = head.as_object();
  const uint64_t needed = rows > tail_rows ? rows - tail_rows : 0;
  if (tail_rows > rows || shape(h, 0) < needed || h.at("dtype") != t.at("dtype") ||
      shape(h, 1) != shape(t, 1) || shape(h, 2) != shape(t, 2)) {
    *problem = fmt::format(
        "routed experts: the prefill worker's {} rows and the decode worker's {} do not make "
        "the sequence's {}",
        shape(h, 0), tail_rows, rows);
    return nullptr;
  }
  const std::optional<std::string> head_bytes = Base64Decode(h.at("data").as_string());
  const std::optional<std::string> tail_bytes = Base64Decode(t.at("data").as_string());
  if (!head_bytes || !tail_bytes || shape(h, 0) == 0) {
    *problem = "routed experts: undecodable data";
    return nullptr;
  }
  const size_t row_bytes = head_bytes->size() / shape(h, 0);
  std::string bytes = head_bytes->substr(0, needed * row_bytes);
  bytes += *tail_bytes;
  json::object out = h;
  out["data"] = Base64Encode(bytes);
  out["shape"] = json::array{rows, shape(h, 1), shape(h, 2)};
  return out;
}

}  // namespace kvgate::api
