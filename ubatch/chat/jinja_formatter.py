"""JinjaChatFormat: a chat template (a GGUF's tokenizer.chat_template, or any Jinja text) as a chat format,
rendered as llama-cpp-python 0.3.36 renders it: in the chat environment (ubatch.chat.jinja) with messages,
bos_token / eos_token, add_generation_prompt, functions / function_call / tools / tool_choice, raise_exception,
strftime_now and any extra keyword; the eos text as stop string; the prompt counted as holding its BOS
(added_special); a stop on the last token when stop_token_ids are given. llama-cpp-python's
Jinja2ChatFormatter (ubatch.llama_cpp.llama_chat_format) is this class plus to_chat_handler()."""
from __future__ import annotations

from typing import Any, List, Optional

from ubatch.chat import jinja
from ubatch.chat.response import ChatFormatterResponse, StoppingCriteriaList


class JinjaChatFormat:
    IgnoreGenerationTags = jinja.GenerationTags
    tojson = staticmethod(jinja.tojson)
    strftime_now = staticmethod(jinja.strftime_now)

    def __init__(self, template: str, eos_token: str, bos_token: str, add_generation_prompt: bool = True,
                 stop_token_ids: Optional[List[int]] = None) -> None:
        self.template = template
        self.eos_token = eos_token
        self.bos_token = bos_token
        self.add_generation_prompt = add_generation_prompt
        self.stop_token_ids = set(stop_token_ids) if stop_token_ids is not None else None
        self._environment = jinja.compile_template(template)

    def __call__(self, *, messages: List[dict], functions=None, function_call=None, tools=None, tool_choice=None,
                 **kwargs: Any) -> ChatFormatterResponse:
        prompt = self._environment.render(messages=messages, eos_token=self.eos_token, bos_token=self.bos_token,
                                          raise_exception=jinja.raise_exception,
                                          add_generation_prompt=self.add_generation_prompt, functions=functions,
                                          function_call=function_call, tools=tools, tool_choice=tool_choice,
                                          strftime_now=self.strftime_now, **kwargs)
        criteria = None
        if self.stop_token_ids is not None:
            ids = self.stop_token_ids

            def stop_on_last_token(tokens, logits) -> bool:
                return tokens[-1] in ids

            criteria = StoppingCriteriaList([stop_on_last_token])
        return ChatFormatterResponse(prompt=prompt, stop=[self.eos_token], stopping_criteria=criteria,
                                     added_special=True)
