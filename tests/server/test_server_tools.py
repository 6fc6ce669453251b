"""tools / tool_choice -> tool_calls in `ubatch serve`: the parsing and streaming of calls (ubatch.chat.tools),
the request checks, and over real HTTP on 127.0.0.1 with the openai client: a forced call on the tiny model
(plain and streamed, the same arguments), "none", the errors; and Qwen 2.5 choosing a call by itself
(realmodel)."""
from __future__ import annotations

import json
import os
import random

import pytest

import suite_paths
from ubatch.chat import tools as T
from ubatch.chat.resolve import resolve

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                           "parameters": {"type": "object", "properties": {
                                               "city": {"type": "string"}}, "required": ["city"]}}},
         {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {
             "a": {"type": "integer"}, "b": {"type": "integer"}}}}}]
NAMES = ["get_weather", "add"]
MSGS = [{"role": "user", "content": "Weather in Paris?"}]


def test_parse_calls_and_content():
    text = ('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
            '<tool_call>{"name": "add", "arguments": "{\\"a\\": 1}"}</tool_call>')
    content, calls = T.parse(text, NAMES)
    assert content == "Let me check."
    assert calls == [{"name": "get_weather", "arguments": '{"city": "Paris"}'}, {"name": "add", "arguments": '{"a": 1}'}]
    assert T.parse('<tool_call>{"name": "add", "arguments": {}}', NAMES) == (None, [{"name": "add",
                                                                                      "arguments": "{}"}])
    assert T.parse(' {"name": "add", "arguments": {"a": 2}} ', NAMES) == (None, [{"name": "add",
                                                                                 "arguments": '{"a": 2}'}])
    # not calls: an unknown name, broken JSON, JSON that is not a call
    for t in ('<tool_call>{"name": "rm", "arguments": {}}</tool_call>', "<tool_call>{oops</tool_call>",
              '{"city": "Paris"}', "plain text"):
        assert T.parse(t, NAMES) == (t.strip(), []), t


def test_json_value_end():
    t = ' {"a": "}", "b": [1, {"c": "\\""}]} tail'
    assert T.json_value_end(t) == t.index(" tail") and json.loads(t[:T.json_value_end(t)])["b"][1]["c"] == '"'
    assert T.json_value_end('{"a": [1, 2') is None and T.json_value_end("") is None
    assert T.json_value_end('"x\\"y" z') == 6 and T.json_value_end("12") is None and T.json_value_end("12 ") == 2
    assert T.forced_arguments(' {"city": "Paris"}}\n</tool_call>') == '{"city": "Paris"}'


def _stream(ts, text, rng):
    deltas, i = [], 0
    while i < len(text):
        k = rng.randint(1, 5)
        deltas += ts.feed(text[i:i + k])
        i += k
    rest, called = ts.finish()
    return deltas + rest, called


def test_tool_stream_equals_the_whole_parse():
    rng = random.Random(1)
    texts = ['Sure<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>', "no call <tool_ here",
             '<tool_call>{"name": "get_weather", "arguments": {"city": "<x>"}}</tool_call>after', "<tool", ' {"name": "add", "arguments": {"a": 1}}', '{"not": "a call"} but text', "  "]
    for text in texts * 5:
        deltas, called = _stream(T.ToolStream(NAMES), text, rng)
        content, calls = T.parse(text, NAMES)
        got = "".join(d.get("content", "") for d in deltas)
        assert (got.strip() or None) == content and called == bool(calls)
        got_calls = [tc["function"] for d in deltas for tc in d.get("tool_calls", [])]
        assert got_calls == calls
    for text in [' {"city": "Pa\\"ris"}}\n</tool_call> junk', ' {"a": [1, 2], "b": {}}']:
        deltas, called = _stream(T.ToolStream(NAMES, forced="add"), text, rng)
        head = deltas[0]["tool_calls"][0]
        assert called and head["function"] == {"name": "add", "arguments": ""} and head["id"].startswith("call_")
        args = "".join(tc["function"]["arguments"] for d in deltas[1:] for tc in d["tool_calls"])
        assert args == T.forced_arguments(text)


def test_prompt_with_tools():
    qwen = open(os.path.join(suite_paths.DATA, "chat", "qwen_template.jinja"), encoding="utf-8").read()
    fq = resolve({"tokenizer.chat_template": qwen})
    assert T.knows_tools(fq)
    p = T.render(fq, MSGS, TOOLS, "auto").prompt
    assert "<tools>" in p and '"name": "get_weather"' in p
    assert "<tools>" not in T.render(fq, MSGS, TOOLS, "none").prompt
    fg = resolve({}, arch="gemma3")
    assert not T.knows_tools(fg)
    hist = MSGS + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
    p = T.render(fg, hist, TOOLS, "auto").prompt
    assert p.startswith("<bos><start_of_turn>user\n# Tools") and "Weather in Paris?" in p
    assert '<start_of_turn>model\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n' \
           '</tool_call><end_of_turn>' in p
    assert "<start_of_turn>user\n<tool_response>\nsunny\n</tool_response><end_of_turn>" in p


# ---- over HTTP ------------------------------------------------------------------------------------------------
openai = pytest.importorskip("openai", reason="the openai client is not installed")
pytest.importorskip("fastapi", reason="the [server] extra (fastapi, uvicorn) is not installed")
from server_util import ServerProcess  # noqa: E402


@pytest.fixture(scope="module")
def server():
    with ServerProcess("--parallel", "4", "--n-ctx", "4096") as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def _valid_add(args: str) -> dict:
    """The arguments of `add`, checked against its schema (an object of integer a / b, nothing else)."""
    v = json.loads(args)
    assert isinstance(v, dict) and set(v) <= {"a", "b"}, v
    assert all(isinstance(x, int) and not isinstance(x, bool) for x in v.values()), v
    return v


def test_forced_call_tiny_model(server, client):
    """The tiny model's random weights, forced to call `add`: its arguments are sampled under add's JSON
    schema, so they parse and validate (plain, streamed — the same —, and at several seeds)."""
    choice = {"type": "function", "function": {"name": "add"}}
    r = client.chat.completions.create(model="tiny-llama", messages=MSGS, tools=TOOLS, tool_choice=choice,
                                       max_tokens=200, temperature=0)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and c.message.content is None
    (call,) = c.message.tool_calls
    assert call.type == "function" and call.function.name == "add" and call.id.startswith("call_")
    _valid_add(call.function.arguments)
    for seed in range(4):
        rs = client.chat.completions.create(model="tiny-llama", messages=MSGS, tools=TOOLS, tool_choice=choice,
                                            max_tokens=200, temperature=1.0, seed=seed)
        assert rs.choices[0].finish_reason == "tool_calls"
        _valid_add(rs.choices[0].message.tool_calls[0].function.arguments)
    parts = list(client.chat.completions.create(model="tiny-llama", messages=MSGS, tools=TOOLS, tool_choice=choice,
                                                max_tokens=200, temperature=0, stream=True))
    deltas = [tc for p in parts if p.choices for tc in (p.choices[0].delta.tool_calls or [])]
    assert deltas[0].function.name == "add" and deltas[0].id.startswith("call_")
    assert "".join(d.function.arguments or "" for d in deltas) == call.function.arguments
    assert parts[-1].choices[0].finish_reason == c.finish_reason
    # "required" with one tool is that tool; "none" answers in text
    r2 = client.chat.completions.create(model="tiny-llama", messages=MSGS, tools=TOOLS[:1], tool_choice="required",
                                        max_tokens=4, temperature=0)
    assert r2.choices[0].message.tool_calls[0].function.name == "get_weather"
    r3 = client.chat.completions.create(model="tiny-llama", messages=MSGS, tools=TOOLS, tool_choice="none",
                                        max_tokens=4, temperature=0)
    assert r3.choices[0].message.tool_calls is None and r3.choices[0].finish_reason in ("stop", "length")
    server.wait_idle()


@pytest.mark.parametrize("body,param", [
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools.0.function.name"),
    ({"tools": [{"type": "code"}]}, "tools.0"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": [TOOLS[0], TOOLS[0]]}, "tools.1.function.name"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]}, "tools.0.function.parameters"),
])
def test_tool_request_errors(server, body, param):
    with server.client() as c:
        r = c.post("/v1/chat/completions", json=dict({"model": "tiny-llama", "messages": MSGS}, **body))
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


@pytest.mark.realmodel
def test_qwen_chooses_a_call():
    """Qwen2.5-Coder 0.5B Instruct with its own template: asked about the weather with get_weather offered, it
    answers with a call (greedy), which the openai client reads; the streamed answer gives the same call."""
    with ServerProcess("--parallel", "1", "--n-ctx", "2048", model="qwen2.5-0.5b") as s:
        cl = openai.OpenAI(base_url=s.url + "/v1", api_key="-", max_retries=0, timeout=300)
        msgs = [{"role": "user", "content": "What is the weather like in Paris today?"}]
        r = cl.chat.completions.create(model="qwen2.5-0.5b", messages=msgs, tools=TOOLS[:1], max_tokens=40,
                                       temperature=0)
        c = r.choices[0]
        assert c.finish_reason == "tool_calls", c
        (call,) = c.message.tool_calls
        assert call.function.name == "get_weather" and json.loads(call.function.arguments)["city"] == "Paris"
        parts = list(cl.chat.completions.create(model="qwen2.5-0.5b", messages=msgs, tools=TOOLS[:1],
                                                max_tokens=40, temperature=0, stream=True))
        tcs = [tc for p in parts if p.choices for tc in (p.choices[0].delta.tool_calls or [])]
        assert [(t.function.name, t.function.arguments) for t in tcs] == [("get_weather", call.function.arguments)]
        assert parts[-1].choices[0].finish_reason == "tool_calls"
        # a forced call: the model writes the arguments of the opened call, cut at their JSON value
        r = cl.chat.completions.create(model="qwen2.5-0.5b", messages=[{"role": "user", "content": "Add 2 and 3."}],
                                       tools=TOOLS, tool_choice={"type": "function", "function": {"name": "add"}},
                                       max_tokens=24, temperature=0)
        (call,) = r.choices[0].message.tool_calls
        assert call.function.name == "add" and json.loads(call.function.arguments) == {"a": 2, "b": 3}


def test_tool_plan_answers():
    from ubatch.server import tools as S
    two = '<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call><tool_call>{"name": "add", "arguments": {}}'
    msg, fin = S.check(TOOLS, "auto").message(two, "stop")
    assert fin == "tool_calls" and [c["function"]["arguments"] for c in msg["tool_calls"]] == ['{"a": 1}', "{}"]
    msg, fin = S.check(TOOLS, "auto", parallel_tool_calls=False).message(two, "stop")
    assert len(msg["tool_calls"]) == 1 and msg["content"] is None
    assert S.check(TOOLS, "auto").message("just text", "stop") == ({"role": "assistant", "content": "just text"},
                                                                   "stop")
    from ubatch.chat.tool_plan import check as plan_of
    choice = {"type": "function", "function": {"name": "add"}}
    constrained = S.check(TOOLS, choice)   # the grammar engine is built in
    assert constrained.constrained and constrained.sampling() == {
        "json_schema": TOOLS[1]["function"]["parameters"], "grammar_prefix": '{"'}
    forced = plan_of(TOOLS, choice, constrained=False)           # without it: the same opened call
    assert not forced.constrained and forced.sampling() == {}
    assert forced.prefix == '<tool_call>\n{"name": "add", "arguments": {"'       # the arguments opened
    msg, fin = forced.message('a": 1', "length")                      # cut by max_tokens: said so
    assert fin == "length" and msg["tool_calls"][0]["function"] == {"name": "add", "arguments": '{"a": 1'}
    msg, fin = forced.message('a": 1, "b": 2}}\n', "stop")
    assert fin == "tool_calls" and msg["tool_calls"][0]["function"]["arguments"] == '{"a": 1, "b": 2}'
    ts = forced.stream()
    deltas = ts.feed('a": 1}') + ts.finish()[0]
    assert "".join(d["tool_calls"][0]["function"]["arguments"] for d in deltas) == '{"a": 1}'
    assert deltas[0]["tool_calls"][0]["function"]["name"] == "add"
    req = S.check(TOOLS, "required")                                  # several tools: the model names one
    assert req.prefix == "<tool_call>\n" and req.forced is None
    assert req.message('{"name": "add", "arguments": {"b": 2}}\n</tool_call>', "stop")[0]["tool_calls"][0][
        "function"] == {"name": "add", "arguments": '{"b": 2}'}
    from ubatch.engine.sampling import SamplingParams
    p = S.constrain(SamplingParams(stop=["x"]), forced)
    assert p.stop == ["x", "</tool_call>"] and p.json_schema is None
    p = S.constrain(SamplingParams(), constrained)
    assert p.json_schema == TOOLS[1]["function"]["parameters"] and p.grammar_prefix == '{"'
    assert S.constrain(SamplingParams(), S.check(TOOLS, "auto")).stop is None


def test_tool_history_round_trip(server, client):
    """An earlier call and its result go back to the model (the tiny model's transcript template knows no
    tools: they are written out in the <tool_call> convention)."""
    hist = MSGS + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    r = client.chat.completions.create(model="tiny-llama", messages=hist, tools=TOOLS, max_tokens=3, temperature=0)
    from ubatch.chat import tools as CT
    from ubatch.chat.resolve import resolve_for
    from ubatch.engine.byte_tokenizer import ByteTokenizer
    want = CT.render(resolve_for(ByteTokenizer()), [dict(m) for m in hist], TOOLS, "auto").prompt
    assert "<tool_response>\nsunny\n</tool_response>" in want and r.usage.prompt_tokens == len(want.encode())


def test_serve_chat_format_flag():
    """--chat-format NAME: the server renders with that registry format; an unknown name stops the start-up
    with the valid names."""
    import subprocess
    import sys
    from child_process import CHILD_CWD, child_env
    from ubatch.chat.formats import FORMATTERS
    with ServerProcess("--parallel", "1", "--chat-format", "chatml") as s:
        cl = openai.OpenAI(base_url=s.url + "/v1", api_key="-", max_retries=0, timeout=60)
        r = cl.chat.completions.create(model="tiny-llama", messages=MSGS, max_tokens=2, temperature=0)
        assert r.usage.prompt_tokens == len(FORMATTERS["chatml"](messages=MSGS).prompt.encode())
    p = subprocess.run([sys.executable, "-m", "ubatch", "serve", "--model", "tiny-llama", "--port", "0",
                        "--chat-format", "nope"], cwd=CHILD_CWD, env=child_env(), capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2 and "unknown chat format 'nope'" in p.stderr and "chatml" in p.stderr
