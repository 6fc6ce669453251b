"""Chat formats: llama-cpp-python 0.3.36's named formats (formats.py), chat templates rendered in its Jinja
environment (jinja.py, jinja_formatter.py), the one resolution of a model's chat format used by the drop-in,
ubatch.LLM.chat and the server (resolve.py), and tool calls: prompts, constraints and parsing (tools.py).
ubatch.llama_cpp.llama_chat_format puts llama-cpp-python's completion handlers on top of these."""
from ubatch.chat.formats import FORMATTERS
from ubatch.chat.jinja_formatter import JinjaChatFormat
from ubatch.chat.resolve import ChatFormat, default_chat_format, prompt_ids, resolve_for
from ubatch.chat.response import ChatFormatterResponse

__all__ = ["ChatFormat", "ChatFormatterResponse", "FORMATTERS", "JinjaChatFormat", "default_chat_format",
           "prompt_ids", "resolve_for"]
