"""The tokenizer layer: llama.cpp's llama_vocab (SPM and byte-level BPE) read from GGUF.

    tok = Tokenizer.from_gguf(path)
    tok.encode(text, add_special=True, parse_special=False) -> list[int]      # llama_tokenize
    tok.decode(ids, remove_special=False, unparse_special=False) -> str       # llama_detokenize
    tok.token_to_piece(id, special=False, lstrip=0) -> bytes                  # llama_token_to_piece

Files: gguf_vocab.py (reading the GGUF keys), vocab.py (what llama.cpp's load() derives), pretok.py
(pre-tokenizer names), tokenizer.py (the API), chat_template.py (Jinja), gen_unicode_table.py (the Unicode
15.1 class table in csrc/tokenizer/tok_unicode_table.c); the algorithms are C in csrc/tokenizer/.
"""
from ubatch.tokenizer.errors import TokenizerError, UnsupportedVocabError
from ubatch.tokenizer.tokenizer import Tokenizer

__all__ = ["Tokenizer", "TokenizerError", "UnsupportedVocabError"]
