"""ByteTokenizer: token t is the byte t (a vocabulary of 256 tokens, no special tokens). The tokenizer the engine
uses for a 256-token model without a vocabulary of its own, i.e. the embedded tiny model (so text prompts,
streaming and stop strings work on it; its random weights make the bytes it generates arbitrary, often not valid
UTF-8, which is what the incremental decoder must cope with)."""
from __future__ import annotations

from typing import Iterable, List, Sequence, Union


class ByteTokenizer:
    """The subset of ubatch.Tokenizer's API the engine uses (docs/api.md)."""

    n_vocab = 256
    bos = eos = eot = -1
    # the plain 'role: content' transcript of apply_chat_template, as the "GGUF template" chat formats see
    chat_template = ("{% for m in messages %}{{ m['role'] + ': ' + (m['content'] | string) + '\n' }}{% endfor %}"
                     "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}")

    def encode(self, text: Union[str, bytes], *, add_special: bool = True, parse_special: bool = False) -> List[int]:
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        return list(data)

    def token_to_piece(self, token: int, *, special: bool = False, lstrip: int = 0) -> bytes:
        t = int(token)
        if not 0 <= t < 256:
            raise ValueError(f"token id {t} is outside the byte vocabulary [0, 256)")
        return bytes((t,))

    def decode(self, ids: Iterable[int], *, remove_special: bool = False, unparse_special: bool = False) -> str:
        return b"".join(self.token_to_piece(t) for t in ids).decode("utf-8", errors="replace")

    def is_eog(self, token: int) -> bool:
        return False

    def is_control(self, token: int) -> bool:
        return False

    def apply_chat_template(self, messages: Sequence[dict], *, add_generation_prompt: bool = True) -> str:
        """A plain 'role: content' transcript (the tiny model has no template)."""
        text = "".join(f"{m['role']}: {m['content']}\n" for m in messages)
        return text + ("assistant: " if add_generation_prompt else "")


__all__ = ["ByteTokenizer"]
