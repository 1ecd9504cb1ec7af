// api/routed_experts: every engine's native form to the one contract.
#include "api/routed_experts.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "common/base64.h"

namespace kvgate {
namespace {

namespace json = boost::json;
std::string Int32Bytes(const std::vector<int32_t>& v) {
  std::string out;
  for (int32_t x : v) {
    const auto u = static_cast<uint32_t>(x);
    for (int i = 0; i < 4; ++i) out += static_cast<char>(u >> (8 * i));
  }
  return out;
}

// A .npy v1 file as numpy writes it.
std::string Npy(const std::string& descr, const std::string& shape, const std::string& data) {
  std::string header =
      "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + data;
}

api::ExpertsContext Context(uint64_t prompt, uint64_t completion, uint64_t start = 0) {
  api::ExpertsContext c;
  c.layers = 2;
  c.top_k = 3;
  c.prompt_tokens = prompt;
  c.completion_tokens = completion;
  c.start = start;
  return c;
}

TEST(RoutedExperts, SglangStringPassesThroughUnchanged) {
  std::vector<int32_t> values(4 * 2 * 3);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<int32_t>(i * 7 % 64);
  const json::value native = json::string(Base64Encode(Int32Bytes(values)));
  std::string problem;
  json::value out = api::NormalizeRoutedExperts(native, Context(3, 3, 1), &problem);
  ASSERT_TRUE(out.is_object()) << problem;
  EXPECT_EQ(out.at("data"), native);
  EXPECT_EQ(out.at("dtype"), "int32");
  EXPECT_EQ(out.at("shape"), (json::array{4, 2, 3}));  // 3 + 3 - 1 - 1 rows
  EXPECT_EQ(out.at("start"), 1);
  // One row too few for the token counts: rejected, not guessed.
  out = api::NormalizeRoutedExperts(native, Context(3, 4, 1), &problem);
  EXPECT_TRUE(out.is_null());
  EXPECT_NE(problem.find("rows"), std::string::npos);
}

TEST(RoutedExperts, NpyHeaderStrippedForEveryDtype) {
  for (auto [descr, dtype, size] : {std::tuple{"|u1", "uint8", 1},
                                    {"<u2", "uint16", 2},
                                    {"<i2", "int16", 2},
                                    {"<i4", "int32", 4}}) {
    std::string data;
    for (int i = 0; i < 2 * 2 * 3 * size; ++i) data += static_cast<char>(i);
    const json::value native = json::string(Base64Encode(Npy(descr, "(2, 2, 3)", data)));
    std::string problem;
    const json::value out = api::NormalizeRoutedExperts(native, Context(2, 1), &problem);
    ASSERT_TRUE(out.is_object()) << descr << ": " << problem;
    EXPECT_EQ(out.at("dtype"), dtype);
    EXPECT_EQ(out.at("shape"), (json::array{2, 2, 3}));
    EXPECT_EQ(*Base64Decode(out.at("data").as_string()), data);
  }
}

TEST(RoutedExperts, BadNpyIsNull) {
  std::string problem;
  const std::string data(2 * 2 * 3, '\1');
  for (const std::string& npy :
       {Npy("<f4", "(2, 2, 3)", std::string(48, '\0')), Npy("|u1", "(2, 2)", data),
        Npy("|u1", "(2, 2, 3)", data.substr(1)), std::string("\x93NUMPY\x01\x00\xff\x00", 10),
        // 2 * (2^63 + 6) * 1 wraps to 12 bytes; a dimension past 2^64.
        Npy("|u1", "(2, 9223372036854775814, 1)", data),
        Npy("|u1", "(2, 99999999999999999999999, 3)", data)}) {
    const json::value out =
        api::NormalizeRoutedExperts(json::string(Base64Encode(npy)), Context(2, 1), &problem);
    EXPECT_TRUE(out.is_null());
    EXPECT_FALSE(problem.empty());
  }
}

TEST(RoutedExperts, NestedListsBecomeInt32) {
  const json::value lists = json::parse("[[[1,2,3],[4,5,6]],[[7,8,9],[10,11,12]]]");
  std::string problem;
  const json::value out = api::NormalizeRoutedExperts(lists, Context(2, 1), &problem);
  ASSERT_TRUE(out.is_object()) << problem;
  EXPECT_EQ(out.at("dtype"), "int32");
  EXPECT_EQ(out.at("shape"), (json::array{2, 2, 3}));
  EXPECT_EQ(*Base64Decode(out.at("data").as_string()),
            Int32Bytes({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
  for (const char* bad :
       {"[[[1,2,3],[4,5]]]", "[[[1,2,3]],[[4,5,6],[7,8,9]]]", "[[[1.5]]]", "[[1,2]]"}) {
    EXPECT_TRUE(api::NormalizeRoutedExperts(json::parse(bad), Context(1, 1), &problem).is_null())
        << bad;
  }
}

TEST(RoutedExperts, NormalizedObjectPassesAndOtherTypesAreNull) {
  const json::value ready =
      json::parse(R"({"data":"AAAA","dtype":"int32","shape":[1,1,1],"start":0})");
  std::string problem;
  EXPECT_EQ(api::NormalizeRoutedExperts(ready, Context(1, 1), &problem), ready);
  for (const char* bad : {"null", "42", "true", R"({"data":"AAAA"})"}) {
    problem.clear();
    EXPECT_TRUE(api::NormalizeRoutedExperts(json::parse(bad), Context(1, 1), &problem).is_null());
    EXPECT_FALSE(problem.empty()) << bad;
  }
}

// Rows [first, first + n) of a [rows, 2, 1] int32 array whose row r holds r and r + 1000.
json::value Rows(uint32_t first, uint32_t n, uint64_t start) {
  std::string bytes;
  for (uint32_t r = first; r < first + n; ++r) {
    for (int32_t v : {static_cast<int32_t>(r), static_cast<int32_t>(r + 1000)}) {
      bytes.append(reinterpret_cast<const char*>(&v), sizeof v);
    }
  }
  return json::object{{"data", Base64Encode(bytes)},
                      {"dtype", "int32"},
                      {"shape", json::array{n, 2, 1}},
                      {"start", start}};
}

TEST(RoutedExperts, StitchingPutsThePrefillRowsTheDecodeWorkerLacksInFront) {
  std::string problem;
  // The sequence needs 10 rows from start 0; the decode worker has the last 4; the prefill
  // worker rows 0-7 (its prompt, of which 6 are needed).
  json::value whole = api::StitchRoutedExperts(Rows(0, 8, 0), Rows(6, 4, 0), 10, &problem);
  EXPECT_EQ(problem, "");
  EXPECT_EQ(whole, Rows(0, 10, 0));
  // A decode worker that has them all needs nothing.
  EXPECT_EQ(api::StitchRoutedExperts(nullptr, Rows(0, 10, 0), 10, &problem), Rows(0, 10, 0));
  // Too few rows, another shape, or nothing from the prefill worker: null, and why.
  for (const json::value& head : {json::value(nullptr), Rows(0, 3, 0)}) {
    problem.clear();
    EXPECT_TRUE(api::StitchRoutedExperts(head, Rows(6, 4, 0), 10, &problem).is_null());
    EXPECT_NE(problem, "");
  }
  json::value other = Rows(0, 8, 0);
  other.as_object()["dtype"] = "int16";
  problem.clear();
  EXPECT_TRUE(api::StitchRoutedExperts(other, Rows(6, 4, 0), 10, &problem).is_null());
  EXPECT_NE(problem, "");
}

}  // namespace
}  // namespace kvgate
