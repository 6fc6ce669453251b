"""The create_chat_completion calls recorded by record_real.py on the real test models and replayed by
tests/chat/test_chat_realmodel.py (a module of its own: the test must import it without llama-cpp-python)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conversations as C  # noqa: E402

CASES = {
    "default": ({}, {"messages": C.CONVERSATIONS["multi_turn"]}),
    "default_tools": ({}, {"messages": C.TOOL_HISTORY, "tools": C.TOOLS}),
    "default_forced": ({}, {"messages": C.TOOL_CONVERSATION, "tools": C.TOOLS,
                            "tool_choice": {"type": "function", "function": {"name": "add"}}}),
    "gemma": ({"chat_format": "gemma"}, {"messages": C.CONVERSATIONS["two_systems"]}),
    "chatml": ({"chat_format": "chatml"}, {"messages": C.CONVERSATIONS["multi_turn"]}),
    "llama-2": ({"chat_format": "llama-2"}, {"messages": C.CONVERSATIONS["system_user"]}),
    "chatml-function-calling": ({"chat_format": "chatml-function-calling"},
                                {"messages": C.TOOL_CONVERSATION, "tools": C.TOOLS,
                                 "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}),
}

