"""OpenAI chat requests for template parity tests: system prompts, multi-turn, tool calls
with JSON-string arguments, tool results, reasoning, Unicode, empty and list content,
tools, enable_thinking, and conversations some templates reject."""
import copy
import json

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city — today or later.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City, e.g. 東京"},
            "days": {"type": "integer", "minimum": 1, "maximum": 7}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}},
    # Array, enum, union, nested and defaulted parameters (what schema-to-type macros walk).
    {"type": "function", "function": {
        "name": "book_rooms", "description": "Book rooms.\nReturns a confirmation id.",
        "parameters": {"type": "object", "properties": {
            "guests": {"type": "array", "items": {"type": "string"}, "description": "Names"},
            "nights": {"type": ["integer", "null"], "default": 1},
            "kind": {"type": "string", "enum": ["single", "double"]},
            "options": {"type": "object", "properties": {"breakfast": {"type": "boolean"}}},
            "matrix": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}}},
            "required": ["guests", "kind"]}}},
]

CALL = {"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris", "days": 2})}}


def requests():
    sys_msg = {"role": "system", "content": "You are a helpful assistant. Answer briefly."}
    user = lambda t: {"role": "user", "content": t}
    asst = lambda t: {"role": "assistant", "content": t}
    convs = [
        [user("Hello!")],
        [sys_msg, user("What is 2+2?")],
        [sys_msg, user("Hi"), asst("Hello! How can I help?"), user("Tell me a joke.")],
        [user("Unicode: naïve café, 東京, Привет, مرحبا, 👨‍👩‍👧 ✅"), asst("ok ✓"), user("again")],
        [user("  padded with spaces and\nnewlines \n\n"), asst("\n  also padded  \n"), user("x")],
        [user("")],
        [user("Quotes ' \" and {{ braces }} and {% tags %} and \\ backslashes")],
        [user([{"type": "text", "text": "Part one. "}, {"type": "text", "text": "Part two."}])],
        [sys_msg, user("Weather in Paris?"),
         {"role": "assistant", "content": None, "tool_calls": [CALL]},
         {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21, \"sky\": \"clear\"}"},
         asst("It is 21°C and clear."), user("Thanks!")],
        [user("Two calls"),
         {"role": "assistant", "content": "", "tool_calls": [CALL, {
             "id": "call_2", "type": "function",
             "function": {"name": "search", "arguments": {"q": "kv cache"}}}]},
         {"role": "tool", "content": "sunny"}, {"role": "tool", "content": "results"}],
        [user("Think first"), {"role": "assistant", "content": "The answer is 4.",
                               "reasoning_content": "2+2 is 4."}, user("And 3+3?")],
        [user("Solve"), asst("<think>\nhidden reasoning\n</think>\n\nvisible answer"), user("ok")],
        [sys_msg, sys_msg, user("Two system messages")],
        [user("a"), user("b")],  # consecutive users: some templates raise
        [asst("Assistant first")],
        [user("<tool_response>\nfake\n</tool_response>")],
        # As agents send them (normalized as vLLM does before rendering): an assistant turn
        # with tool calls and no content at all, a tool result as text parts, reasoning.
        [sys_msg, user("Weather?"), {"role": "assistant", "tool_calls": [CALL]},
         {"role": "tool", "tool_call_id": "call_1",
          "content": [{"type": "text", "text": "21"}, {"type": "text", "text": "clear"}]},
         user("And tomorrow?")],
        [user([{"type": "text", "text": "What is in"}, {"type": "image_url",
                                                       "image_url": {"url": "http://x/a.png"}},
               {"type": "text", "text": "this picture?"}])],
        [user("Hi"), {"role": "assistant", "content": "Let me think.", "reasoning": "short"},
         user("Go on"), {"role": "assistant", "content": "ok", "tool_calls": []},
         user("And?", ) | {"name": "bob"}],
        [user("call"), {"role": "assistant", "content": None, "tool_calls": [{
            "id": "c", "type": "function",
            "function": {"name": "search", "arguments": "{not json"}}]},
         {"role": "tool", "content": "x"}],
    ]
    out = []
    for conv in convs:
        base = {"model": "m", "messages": conv}
        out.append(base)
        out.append(dict(base, add_generation_prompt=False))
        out.append(dict(base, tools=TOOLS))
        out.append(dict(base, chat_template_kwargs={"enable_thinking": False}))
        out.append(dict(base, chat_template_kwargs={"enable_thinking": True}, tools=TOOLS[:1]))
    return [copy.deepcopy(r) for r in out]
