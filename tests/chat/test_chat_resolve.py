"""The one resolution of a model's chat format (ubatch.chat.resolve) and its three users: the drop-in Llama,
ubatch.LLM.chat and the server pick the same format and the same prompt ids."""
import pytest

import ubatch
from ubatch.chat import resolve as R
from ubatch.chat.formats import FORMATTERS

MSGS = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]


def test_the_rule():
    assert R.resolve({}, arch="gemma3").name == "gemma3"                      # template-less Gemma
    assert R.resolve({}, arch="gemma2").name == "gemma3"
    assert R.resolve({}, arch="llama").name == "llama-2"                      # llama-cpp-python's fallback
    assert R.resolve({"tokenizer.chat_template": R.CHATML_CHAT_TEMPLATE}).name == "chatml"   # guessed
    assert R.resolve({"tokenizer.chat_template": R.LLAMA3_INSTRUCT_CHAT_TEMPLATE}).name == "llama-3"
    assert R.resolve({"tokenizer.chat_template": R.MIXTRAL_INSTRUCT_CHAT_TEMPLATE}).name == "mistral-instruct"
    md = {"tokenizer.chat_template": "{{ bos_token }}{{ messages[0]['content'] }}",
          "tokenizer.chat_template.tool_use": "T:{{ messages | length }}"}
    f = R.resolve(md, bos_token="<s>", eos_token="</s>", eos_id=2)
    assert f.name == "chat_template.default"
    r = f(MSGS)
    assert (r.prompt, r.stop, r.added_special) == ("<s>Be brief.", ["</s>"], True)
    assert r.stopping_criteria([2], None)
    assert R.resolve(md, chat_format="chat_template.tool_use")(MSGS).prompt == "T:2"
    assert R.resolve(md, chat_format="zephyr")(MSGS).prompt == FORMATTERS["zephyr"](messages=MSGS).prompt
    assert R.resolve(md, template="X{{ eos_token }}", eos_token="</s>")(MSGS).prompt == "X</s>"
    with pytest.raises(ValueError, match=r"unknown chat format 'nope' \(valid formats: .*chatml.*"
                                         r"chat_template.tool_use"):
        R.resolve(md, chat_format="nope")


def test_gemma3_format_folds_the_system_message():
    r = R.format_gemma3(MSGS + [{"role": "assistant", "content": " Hello "}, {"role": "user", "content": "Bye"}])
    assert r.prompt == ("<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello"
                        "<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n")
    assert r.added_special and r.stop == ["<end_of_turn>"]


def test_prompt_ids_add_bos_only_when_the_text_has_none():
    class Tok:
        def encode(self, text, add_special=True, parse_special=False):
            return ([1] if add_special else []) + [ord(c) for c in text]
    from ubatch.chat.response import ChatFormatterResponse as CFR
    assert R.prompt_ids(Tok(), CFR(prompt="ab")) == [1, 97, 98]
    assert R.prompt_ids(Tok(), CFR(prompt="ab", added_special=True)) == [97, 98]


def test_tiny_model_paths_agree():
    """The tiny model (byte tokenizer): LLM.chat renders its transcript template, the drop-in the same rule."""
    llm = ubatch.LLM(ubatch.models.tiny_llama(), n_ctx=256, n_seq_max=1)
    fmt = llm.chat_format()
    assert fmt.name == "chat_template.default"
    assert fmt(MSGS).prompt == llm.tokenizer.apply_chat_template(MSGS)
    c = llm.chat(MSGS, max_tokens=3)
    assert c.prompt_tokens == len(llm.tokenizer.apply_chat_template(MSGS).encode())
    assert llm.chat(MSGS, chat_format="chatml", max_tokens=3).prompt_tokens == \
        len(FORMATTERS["chatml"](messages=MSGS).prompt.encode())
    with pytest.raises(ValueError, match="unknown chat format"):
        llm.chat(MSGS, chat_format="nope")


@pytest.mark.realmodel
@pytest.mark.parametrize("name,want", [("gemma3-270m", "gemma3"), ("qwen2.5-0.5b", "chat_template.default")])
def test_real_models_one_path(name, want):
    """gemma3-270m (no template in its GGUF) and qwen2.5 (its own template): Llama, LLM.chat and the server's
    state resolve the same format and give the same prompt ids."""
    from ubatch.model import fetch
    import ubatch.llama_cpp as L
    from ubatch.server.prompts import chat_tokens
    from ubatch.server.schemas import ChatMessage
    path = str(fetch.path(name))
    llm = ubatch.LLM(path, n_ctx=512, n_seq_max=1)
    fmt = llm.chat_format()
    assert fmt.name == want
    ids = R.prompt_ids(llm.tokenizer, fmt(MSGS))
    c = llm.chat(MSGS, max_tokens=4)
    assert c.prompt_tokens == len(ids) and c.text.strip()
    drop = L.Llama(path, n_ctx=512, verbose=False)
    assert drop.chat_format == want
    r = drop.create_chat_completion(MSGS, max_tokens=4, temperature=0.0)
    assert r["usage"]["prompt_tokens"] == len(ids)
    drop.close()
    server_ids = chat_tokens(llm.tokenizer, [ChatMessage(**m) for m in MSGS],
                             R.resolve_for(llm.tokenizer, llm.model.arch))
    assert server_ids == ids
    if name == "gemma3-270m":
        assert ids[0] == llm.tokenizer.bos and ids.count(llm.tokenizer.bos) == 1


def test_llm_chat_with_tools():
    """LLM.chat(tools=...): the same ToolPlan as the server (a forced call on the tiny model; errors named)."""
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {
        "a": {"type": "integer"}}}}}]
    llm = ubatch.LLM(ubatch.models.tiny_llama(), n_ctx=1024, n_seq_max=1)      # (the tool listing: bytes)
    c = llm.chat(MSGS, tools=tools, tool_choice="required", max_tokens=6)
    (call,) = c.tool_calls
    assert call["function"]["name"] == "add" and call["function"]["arguments"].startswith('{"')
    assert c.finish_reason in ("tool_calls", "length") and c.text == ""
    from ubatch.chat.tool_plan import ToolError
    with pytest.raises(ToolError, match="no tool named 'x'") as ei:
        llm.chat(MSGS, tools=tools, tool_choice={"type": "function", "function": {"name": "x"}})
    assert ei.value.param == "tool_choice"
    plain = llm.chat(MSGS, tools=tools, tool_choice="none", max_tokens=3)
    assert plain.tool_calls is None and plain.tokens == llm.chat(MSGS, max_tokens=3).tokens
