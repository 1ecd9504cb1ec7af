#include "mocker/logprobs.h"

#include <boost/json.hpp>

#include "common/splitmix.h"

namespace kvgate::mocker {
namespace {

namespace json = boost::json;

// The k-th alternative to `token` (k >= 1): another token, less likely than it.
uint32_t Alternative(uint32_t token, uint32_t k) { return token + 7919 * k; }

json::array Bytes(const std::string& s) {
  json::array a;
  for (unsigned char c : s) a.emplace_back(c);
  return a;
}

}  // namespace

double TokenLogprob(uint32_t token, size_t position) {
  return -static_cast<double>(SplitMix64(uint64_t{token} << 32 ^ position) % 4000 + 1) / 1000.0;
}

json::object CompletionLogprobs(std::span<const uint32_t> tokens, size_t first_position,
                                uint32_t top, size_t text_offset, const TokenTextFn& text) {
  json::array texts, logprobs, tops, offsets;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const size_t position = first_position + i;
    const std::string t = text(tokens[i]);
    texts.emplace_back(t);
    offsets.emplace_back(text_offset);
    text_offset += t.size();
    if (position == 0) {  // nothing comes before the first token
      logprobs.emplace_back(nullptr);
      tops.emplace_back(nullptr);
      continue;
    }
    const double lp = TokenLogprob(tokens[i], position);
    logprobs.emplace_back(lp);
    json::object alternatives;
    if (top > 0) alternatives[t] = lp;
    for (uint32_t k = 1; k < top; ++k) {
      alternatives[text(Alternative(tokens[i], k))] = lp - k;
    }
    tops.emplace_back(std::move(alternatives));
  }
  return {{"tokens", std::move(texts)},
          {"token_logprobs", std::move(logprobs)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

json::object ChatLogprobs(std::span<const uint32_t> tokens, size_t first_position, uint32_t top,
                          const TokenTextFn& text) {
  json::array content;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const double lp = TokenLogprob(tokens[i], first_position + i);
    const std::string t = text(tokens[i]);
    json::array alternatives;
    for (uint32_t k = 0; k < top; ++k) {
      const std::string alt = k == 0 ? t : text(Alternative(tokens[i], k));
      alternatives.push_back(
          json::object{{"token", alt}, {"logprob", lp - k}, {"bytes", Bytes(alt)}});
    }
    content.push_back(json::object{{"token", t},
                                   {"logprob", lp},
                                   {"bytes", Bytes(t)},
                                   {"top_logprobs", std::move(alternatives)}});
  }
  return {{"content", std::move(content)}};
}

}  // namespace kvgate::mocker
