"""The conversations, templates and tool requests the chat recordings were made with (record.py) and the tests
replay (tests/chat/test_chat_formats.py, tests/chat/test_chat_tools.py). Plain data, no dependency."""

CONVERSATIONS = {
    "user": [{"role": "user", "content": "Hello!"}],
    "system_user": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi there"}],
    "multi_turn": [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "What is 2+2?"},
                   {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"}],
    "no_system_multi": [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"},
                        {"role": "user", "content": "three"}],
    "empty_and_none": [{"role": "user", "content": ""}, {"role": "assistant", "content": None},
                       {"role": "user", "content": "again"}],
    "parts_content": [{"role": "user", "content": [{"type": "text", "text": "a list of parts"}]},
                      {"role": "user", "content": "then text"}],
    "two_systems": [{"role": "system", "content": "first {braces}"}, {"role": "system", "content": "second"},
                    {"role": "user", "content": "Grüße, 世界 🌍\nline two"}],
    "system_none": [{"role": "system", "content": None}, {"role": "user", "content": "x"}],
    "other_roles": [{"role": "user", "content": "call it"}, {"role": "tool", "content": "42", "tool_call_id": "c1"},
                    {"role": "function", "content": "43", "name": "f"}, {"role": "bot", "content": "bot says"},
                    {"role": "User", "content": "capital User"}, {"role": "Assistant", "content": "capital A"},
                    {"role": "user", "content": "last"}],
}

LOOP_TEMPLATE = ("{% for m in messages %}{% if m['role'] == 'system' %}{% continue %}{% endif %}"
                 "{% if loop.index > 3 %}{% break %}{% endif %}[{{ m['role'] }}|{{ m['content'] }}]"
                 "{% endfor %}{% if add_generation_prompt %}>>{% endif %}")
GENERATION_TEMPLATE = ("{% for m in messages %}{% if m['role'] == 'assistant' %}{% generation %}"
                       "{% set last = m['content'] %}A:{{ m['content'] }}{% endgeneration %}{% else %}"
                       "U:{{ m['content'] }}{% endif %}\n{% endfor %}last={{ last }}")
TOJSON_TEMPLATE = ("{{ tools | tojson }}|{{ tools | tojson(indent=2) }}|{{ tools | tojson(sort_keys=true) }}|"
                   "{{ {'k': 'é', 'a': [1, 2]} | tojson(separators=(',', ':')) }}|{{ bos_token }}|{{ eos_token }}|"
                   "{{ functions }}|{{ function_call }}|{{ tool_choice }}|{{ extra }}")
RAISE_TEMPLATE = ("{% if messages[0]['role'] != 'user' %}{{ raise_exception('first message must be the user\\'s') }}"
                  "{% endif %}ok")
STRFTIME_TEMPLATE = "{{ strftime_now('%Y') }}"

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "the city"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "array", "items": {"type": "integer"}},
            "where": {"$ref": "#/$defs/place"}},
            "required": ["city"], "$defs": {"place": {"type": "object", "properties": {"lat": {"type": "number"}}},
                                            "kind": {"enum": ["a", "b"]}}}}},
    {"type": "function", "function": {
        "name": "add", "parameters": {"type": "object", "properties": {"a": {"type": "integer"},
                                                                       "b": {"type": "integer"}},
                                      "required": ["a", "b"]}}},
]

TOOL_CONVERSATION = [{"role": "system", "content": "You can call tools."},
                     {"role": "user", "content": "Weather in Paris?"}]
TOOL_HISTORY = [{"role": "system", "content": "You can call tools."},
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": None,
                 "tool_calls": [{"id": "call_1", "type": "function",
                                 "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                {"role": "user", "content": "Thanks"}]
FUNCTION_HISTORY = [{"role": "user", "content": "Add 2 and 3"},
                    {"role": "assistant", "content": None, "function_call": {"name": "add",
                                                                             "arguments": "{\"a\": 2, \"b\": 3}"}},
                    {"role": "function", "name": "add", "content": "5"},
                    {"role": "assistant", "content": "It is 5.", "function_call": {"name": "add",
                                                                                   "arguments": "{}"}},
                    {"role": "user", "content": None}]

# Each handler case: the handler's keyword arguments (besides llama) and the completion texts the fake model
# returns, call after call.
HANDLER_CASES = {
    "chatml-function-calling": {
        "no_tools": ({"messages": CONVERSATIONS["multi_turn"]}, ["Sure."]),
        "tool_choice_none": ({"messages": TOOL_CONVERSATION, "tools": TOOLS, "tool_choice": "none"}, ["No tools."]),
        "forced": ({"messages": TOOL_CONVERSATION, "tools": TOOLS,
                    "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
                   ['{"city": "Paris"}']),
        "forced_history": ({"messages": TOOL_HISTORY, "tools": TOOLS,
                            "tool_choice": {"type": "function", "function": {"name": "add"}}, "stop": "END"},
                           ['{"a": 1, "b": 2}']),
        "legacy_functions": ({"messages": TOOL_CONVERSATION, "functions": [t["function"] for t in TOOLS],
                              "function_call": {"name": "add"}}, ['{"a": 5, "b": 6}']),
        "auto_message": ({"messages": TOOL_CONVERSATION, "tools": TOOLS, "tool_choice": "auto"},
                         ["message", "It is sunny."]),
        "auto_two_calls": ({"messages": TOOL_CONVERSATION, "tools": TOOLS, "tool_choice": "auto"},
                           ["functions.get_weather", '{"city": "Paris"}', "functions.add", '{"a": 1, "b": 2}',
                            "<|im_end|>"]),
        "auto_one_call": ({"messages": TOOL_CONVERSATION, "tools": TOOLS, "tool_choice": "auto"},
                          ["functions.add", '{"a": 1, "b": 2}', "<|im_end|>"]),
    },
    "functionary": {
        "no_functions": ({"messages": CONVERSATIONS["multi_turn"]}, ["Hello."]),
        "auto": ({"messages": TOOL_CONVERSATION, "tools": TOOLS}, [" to=functions.get_weather:",
                                                                    '{"city": "Paris"}']),
        "forced": ({"messages": TOOL_CONVERSATION, "tools": TOOLS,
                    "tool_choice": {"type": "function", "function": {"name": "add"}}}, ['{"a": 1, "b": 2}']),
        "history": ({"messages": FUNCTION_HISTORY, "functions": [t["function"] for t in TOOLS],
                     "function_call": "auto"}, [" to=functions.add:", '{"a": 7, "b": 8}']),
        "tool_history": ({"messages": TOOL_HISTORY, "tools": TOOLS, "tool_choice": "none"}, ["{}"]),
    },
}
FUNCTIONARY_V2_CASES = {
    "no_tools": ({"messages": CONVERSATIONS["multi_turn"]}, ["  Hi."]),
    "forced": ({"messages": TOOL_CONVERSATION, "tools": TOOLS,
                "tool_choice": {"type": "function", "function": {"name": "add"}}}, [' {"a": 1, "b": 2} ']),
    "auto_call": ({"messages": TOOL_CONVERSATION, "tools": TOOLS},
                  ["get_weather", '{"city": "Paris"}', "done"]),
    "auto_call_then_more": ({"messages": TOOL_CONVERSATION, "tools": TOOLS},
                            ["get_weather", '{"city": "Paris"}', "\n<|from|>assistant\n", "add", '{"a": 1}',
                             "end"]),
    "auto_text": ({"messages": TOOL_CONVERSATION, "tools": TOOLS}, ["all", "It is sunny."]),
    "tool_choice_none": ({"messages": TOOL_CONVERSATION, "tools": TOOLS, "tool_choice": "none"}, [" plain"]),
}
FUNCTIONARY_V1_CASES = {
    "auto_text": ({"messages": TOOL_CONVERSATION, "tools": TOOLS}, ["It is sunny."]),
    "auto_call": ({"messages": TOOL_CONVERSATION, "tools": TOOLS},
                  ["<|START_OF_FUNCTION_CALL|> get_weather:", '{"city": "Paris"}']),
    "forced": ({"messages": TOOL_CONVERSATION, "tools": TOOLS,
                "tool_choice": {"type": "function", "function": {"name": "add"}}}, ['{"a": 1, "b": 2}']),
}
# The stand-in for a functionary model's Hugging Face tokenizer template (functionary-v1 / v2 render the
# conversation with hf_tokenizer.apply_chat_template, then add their own suffix).
FUNCTIONARY_HF_TEMPLATE = ("{% for m in messages %}<|from|>{{ m['role'] }}\n<|recipient|>all\n<|content|>"
                           "{{ m['content'] }}{% if m['function_call'] %} fc={{ m['function_call']['name'] }}"
                           "{% endif %}\n{% endfor %}")
