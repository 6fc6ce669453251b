"""ByteVocab: a stand-in vocabulary for the tiny model (which has none): token t <-> byte t, EOS = 7 (a token the
tiny model emits). The drop-in tests install it with `_model._load_tokenizer`; the engine's and the chat tools'
tests use it too."""

EOS = 7


class ByteVocab:
    """Token t is the byte t; no BOS, no EOT, one end-of-generation token (EOS)."""
    n_vocab, bos, eos, eot = 256, -1, EOS, -1

    def encode(self, text, add_special=True, parse_special=False):
        return list(bytes(text))

    def token_to_piece(self, token, special=False, lstrip=0):
        return bytes([token])

    def decode_bytes(self, ids, remove_special=False, unparse_special=False):
        return bytes(ids)

    def is_eog(self, token):
        return token == EOS

    def is_control(self, token):
        return False
