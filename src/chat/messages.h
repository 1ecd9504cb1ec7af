// The messages of an OpenAI chat request as vLLM hands them to a chat template: content
// made a string (text parts joined by "\n", null or absent content "") or, for templates
// that loop over content, a list of parts; only the fields vLLM keeps (role, content;
// assistant tool_calls with arguments parsed from JSON, reasoning; tool_call_id; name).
#pragma once

#include <boost/json/fwd.hpp>
#include <deque>

#include "chat/heap.h"
#include "chat/value.h"
#include "common/status.h"

namespace kvgate::chat {

// Text to stand for each media part of a conversation; `used` tells whether one did.
struct MediaMarker {
  std::string_view text;
  bool used = false;
};

// `messages` must be a JSON array; each message an object (else an error). Values view
// the JSON's strings; JSON parsed from tool-call arguments is kept in `parsed`. With
// `media`, each media part becomes a text part holding its text.
Status TemplateMessages(Heap& heap, const boost::json::value& messages, bool content_as_parts,
                        MediaMarker* media, std::deque<boost::json::value>& parsed, Value* out);

}  // namespace kvgate::chat
