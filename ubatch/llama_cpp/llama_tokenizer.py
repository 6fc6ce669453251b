"""llama_cpp.llama_tokenizer: LlamaTokenizer (the model's own vocabulary) and LlamaHFTokenizer (a Hugging Face
tokenizer object passed as Llama(tokenizer=...))."""
from __future__ import annotations

from typing import Any, List, Optional  # noqa: F401

from ubatch.llama_cpp.llama import BaseLlamaTokenizer, LlamaTokenizer  # noqa: F401


class LlamaHFTokenizer:
    def __init__(self, hf_tokenizer) -> None:
        self.hf_tokenizer = hf_tokenizer

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = True) -> List[int]:
        return self.hf_tokenizer.encode(text.decode("utf-8", errors="ignore"), add_special_tokens=special)

    def detokenize(self, tokens: List[int], prev_tokens: Optional[List[int]] = None, special: bool = False) -> bytes:
        skip = not special
        if prev_tokens is not None:
            text = self.hf_tokenizer.decode(prev_tokens + tokens, skip_special_tokens=skip).encode("utf-8", "ignore")
            prev = self.hf_tokenizer.decode(prev_tokens, skip_special_tokens=skip).encode("utf-8", "ignore")
            return text[len(prev):]
        return self.hf_tokenizer.decode(tokens, skip_special_tokens=skip).encode("utf-8", "ignore")

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str) -> "LlamaHFTokenizer":
        try:
            from transformers import AutoTokenizer
        except ImportError as e:
            raise ImportError("LlamaHFTokenizer.from_pretrained needs transformers (pip install transformers)") from e
        return cls(AutoTokenizer.from_pretrained(pretrained_model_name_or_path))
