"""A stand-in for llama_cpp.Llama in the chat-handler recordings and tests: tokenize() returns a marker of the
text it was given, create_completion() records its arguments (prompt, stop, stream, max_tokens, temperature, the
grammar's text, logprobs) and answers with the next canned text (streamed: two halves and a finish chunk)."""
import copy
import random
import types

import jinja2


def grammar_text(g):
    """The GBNF text of a grammar object (llama-cpp-python's and ubatch's LlamaGrammar keep it in _grammar)."""
    return None if g is None else getattr(g, "_grammar", None)


class FakeLlama:
    """A stand-in for llama_cpp.Llama: records create_completion calls and answers with canned texts."""

    verbose = False

    def __init__(self, texts, hf_template=None, v1=False):
        self.texts, self.calls, self.n = list(texts), [], 0
        if hf_template is not None:
            env = jinja2.Environment()
            tpl = env.from_string(hf_template)

            class HF:
                additional_special_tokens = ["<|START_OF_FUNCTION_CALL|>"] if v1 else []

                def apply_chat_template(self, messages, tokenize=False):
                    return tpl.render(messages=messages)

            self.tokenizer_ = types.SimpleNamespace(hf_tokenizer=HF())

    def tokenize(self, text, add_bos=True, special=False):
        return {"tokens_of": text.decode("utf-8"), "add_bos": add_bos, "special": special}

    def create_completion(self, prompt, **kw):
        g = kw.get("grammar")
        call = {"prompt": prompt, "stop": kw.get("stop"), "stream": kw.get("stream", False),
                "max_tokens": kw.get("max_tokens"), "temperature": kw.get("temperature"),
                "grammar": grammar_text(g), "logprobs": kw.get("logprobs")}
        self.calls.append(call)
        text = self.texts.pop(0) if self.texts else ""
        self.n += 1
        cid = f"cmpl-{self.n}"
        if call["stream"]:
            half = len(text) // 2
            pieces = [text[:half], text[half:]]

            def chunks():
                for p in pieces:
                    yield {"id": cid, "object": "text_completion", "created": 7, "model": "m",
                           "choices": [{"text": p, "index": 0, "logprobs": None, "finish_reason": None}]}
                yield {"id": cid, "object": "text_completion", "created": 7, "model": "m",
                       "choices": [{"text": "", "index": 0, "logprobs": None, "finish_reason": "stop"}]}
            return chunks()
        return {"id": cid, "object": "text_completion", "created": 7, "model": "m",
                "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10 * self.n, "completion_tokens": self.n, "total_tokens": 11 * self.n}}


def run_handler(handler, kwargs, texts, stream=False, **fake):
    llama = FakeLlama(texts, **fake)
    random.seed(0)
    try:
        r = handler(llama=llama, stream=stream, **copy.deepcopy(kwargs))
        if stream:
            r = list(r)
        result = r
    except Exception as e:                              # noqa: BLE001
        result = {"error": type(e).__name__, "message": str(e)}
    return {"calls": llama.calls, "result": result}


