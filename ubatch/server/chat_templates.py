"""Chat templates for models whose GGUF has none (tokenizer.chat_template missing), by architecture.

gemma3-270m's GGUF carries no template; Gemma's documented turn format is used for it: BOS, then per turn
`<start_of_turn>{user|model}\\n{content}<end_of_turn>\\n`, a system message folded into the first user turn
(Gemma has no system role), and `<start_of_turn>model\\n` as the generation prompt. `--chat-template FILE`
overrides any of this."""
from __future__ import annotations

from typing import Optional

GEMMA = (
    "{{ bos_token }}"
    "{%- set ns = namespace(system='') -%}"
    "{%- for m in messages -%}"
    "{%- if m['role'] in ['system', 'developer'] -%}"
    "{%- set ns.system = ns.system + m['content'] + '\\n\\n' -%}"
    "{%- else -%}"
    "{%- set role = 'model' if m['role'] == 'assistant' else 'user' -%}"
    "{{ '<start_of_turn>' + role + '\\n' + (ns.system if role == 'user' else '') + (m['content'] | trim)"
    " + '<end_of_turn>\\n' }}"
    "{%- if role == 'user' -%}{%- set ns.system = '' -%}{%- endif -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}"
)

BY_ARCH = {"gemma3": GEMMA, "gemma2": GEMMA, "gemma": GEMMA}


def fallback(arch: Optional[str]) -> Optional[str]:
    return BY_ARCH.get(arch or "")
