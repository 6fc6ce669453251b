"""Tokenizer exceptions."""
from ubatch.common.errors import UbatchError


class TokenizerError(UbatchError, ValueError):
    """A vocabulary cannot be loaded, or an input cannot be tokenized / detokenized; the message names the
    culprit (key, token id, byte offset, ...)."""


class UnsupportedVocabError(TokenizerError, NotImplementedError):
    """The GGUF's tokenizer type or pre-tokenizer is one this tokenizer does not implement."""
