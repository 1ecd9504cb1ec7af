// Bytes and their text forms: GPT-2's byte-level alphabet (each byte shown as a printable
// character, as byte-level BPE vocabularies spell tokens) and UTF-8 validity.
#pragma once

#include <string>
#include <string_view>

namespace kvgate::tokenizer {

// GPT-2's byte <-> printable-char mapping used by byte-level BPE.
std::string BytesToByteLevel(std::string_view bytes);
// Inverse; false if a char is outside the byte-level alphabet.
bool ByteLevelToBytes(std::string_view text, std::string& out);

// Valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
bool IsValidUtf8(std::string_view text);
// `bytes` with each maximal invalid subsequence replaced by U+FFFD, as HF's decoders do
// (Rust's String::from_utf8_lossy).
std::string LossyUtf8(std::string_view bytes);

}  // namespace kvgate::tokenizer
