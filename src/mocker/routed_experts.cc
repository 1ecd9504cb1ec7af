#include "mocker/routed_experts.h"

#include <fmt/format.h>

namespace kvgate::mocker {
namespace {

size_t Rows(std::span<const uint32_t> tokens, uint32_t start) {
  return tokens.size() > size_t{start} + 1 ? tokens.size() - 1 - start : 0;
}

template <typename T>
void AppendLittleEndian(std::string& out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

template <typename T>
std::string Values(std::span<const uint32_t> tokens, uint32_t start, const MoeShape& s) {
  std::string out;
  const size_t rows = Rows(tokens, start);
  out.reserve(rows * s.layers * s.top_k * sizeof(T));
  for (size_t r = 0; r < rows; ++r) {
    const uint64_t position = start + r;
    for (uint32_t l = 0; l < s.layers; ++l) {
      for (uint32_t k = 0; k < s.top_k; ++k) {
        AppendLittleEndian(out,
                           static_cast<T>(ExpertFor(tokens[position], position, l, k, s.experts)));
      }
    }
  }
  return out;
}

}  // namespace

std::string ExpertsInt32(std::span<const uint32_t> tokens, uint32_t start, const MoeShape& shape) {
  return Values<uint32_t>(tokens, start, shape);
}

std::string ExpertsNpy(std::span<const uint32_t> tokens, uint32_t start, const MoeShape& shape) {
  const bool small = shape.experts <= 256;
  std::string header =
      fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}, {}, {}), }}",
                  small ? "|u1" : "<u2", Rows(tokens, start), shape.layers, shape.top_k);
  // NPY v1.0: magic, version, u16 header length; header padded so data starts 64-aligned.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  AppendLittleEndian(out, static_cast<uint16_t>(header.size()));
  out += header;
  out += small ? Values<uint8_t>(tokens, start, shape) : Values<uint16_t>(tokens, start, shape);
  return out;
}

std::string ExpertsJsonLists(std::span<const uint32_t> tokens, uint32_t start,
                             const MoeShape& shape) {
  std::string out = "[";
  const size_t rows = Rows(tokens, start);
  for (size_t r = 0; r < rows; ++r) {
    const uint64_t position = start + r;
    out += r ? ",[" : "[";
    for (uint32_t l = 0; l < shape.layers; ++l) {
      out += l ? ",[" : "[";
      for (uint32_t k = 0; k < shape.top_k; ++k) {
        if (k) out += ',';
        out += std::to_string(ExpertFor(tokens[position], position, l, k, shape.experts));
      }
      out += ']';
    }
    out += ']';
  }
  return out + "]";
}

}  // namespace kvgate::mocker
