"""The framework calls of tests/dropin/test_{haystack,outlines,instructor,guidance}.py and record_integrations.py:
Haystack's LlamaCppChatGenerator (llama-cpp-haystack), Outlines' from_llamacpp, Instructor's patch of
Llama.create_chat_completion_openai_v1 and Guidance's models.LlamaCpp, each used as its documentation shows, greedy
(temperature 0), on Qwen2.5-Coder 0.5B. Whichever `llama_cpp` is importable (the real one, or ubatch's after
install_as_llama_cpp()) runs them. The free-text prompts are those of frameworks_cases.py (COUNTING, HELLO), whose
greedy tokens and margins frameworks.json holds; every structured call is checked for validity by the tests too."""
import warnings

N_CTX = 512
MODEL = "qwen2.5-0.5b"
COUNTING = "Count: one, two,"
HELLO = "Say hello"
MAX_TOKENS, JSON_TOKENS = 12, 40
PERSON_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                 "required": ["name", "age"]}
CHOICES = ["yes", "no"]
YEAR_RE = r" [0-9]{4}"


def person_model():
    from pydantic import BaseModel

    class Person(BaseModel):
        name: str
        age: int
    return Person


def run_haystack(path: str) -> dict:
    """LlamaCppChatGenerator.run: a reply, a streamed reply (the callback's chunks), a stop sequence, a JSON reply
    constrained by response_format's schema, a reply with a tool offered (rendered by the GGUF template; the model's
    tool-call JSON comes back as text, llama-cpp-python 0.3.36 parsing no tool calls out of a template's reply)."""
    warnings.simplefilter("ignore")
    from haystack.dataclasses import ChatMessage
    from haystack.tools import Tool
    from haystack_integrations.components.generators.llama_cpp import LlamaCppChatGenerator

    g = LlamaCppChatGenerator(model=path, n_ctx=N_CTX, model_kwargs={"verbose": False},
                              generation_kwargs={"max_tokens": MAX_TOKENS, "temperature": 0.0})
    g.warm_up()
    out = {}
    r = g.run([ChatMessage.from_user(HELLO)])["replies"][0]
    out["chat"], out["chat.finish_reason"], out["chat.usage"] = r.text, r.meta["finish_reason"], r.meta["usage"]
    chunks = []
    r = g.run([ChatMessage.from_user(HELLO)], streaming_callback=lambda c: chunks.append(c.content))["replies"][0]
    out["stream"], out["stream.text"] = chunks, r.text
    out["stop"] = g.run([ChatMessage.from_user(HELLO)], generation_kwargs={"stop": ["!"]})["replies"][0].text
    out["json"] = g.run([ChatMessage.from_user("Give a person as JSON")], generation_kwargs={
        "max_tokens": JSON_TOKENS, "response_format": {"type": "json_object", "schema": PERSON_SCHEMA}})[
        "replies"][0].text
    weather = Tool(name="get_weather", description="The weather in a city", function=lambda city: f"sunny in {city}",
                   parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    r = g.run([ChatMessage.from_user("What is the weather in Paris?")], tools=[weather],
              generation_kwargs={"max_tokens": JSON_TOKENS})["replies"][0]
    out["tools"] = [r.text, [[t.tool_name, t.arguments] for t in r.tool_calls]]
    g.close()
    return out


def run_outlines(llm) -> dict:
    """outlines.from_llamacpp over a Llama: text generation (plain prompt and chat), streaming, a stop sequence,
    and the structured outputs (a choice, a regex, a pydantic model's JSON schema) through the llguidance backend
    (Outlines' default, outlines_core, needs numba for numpy logits: see docs/compat.md)."""
    warnings.simplefilter("ignore")
    from typing import Literal

    import outlines
    from outlines.types import Regex

    out = {}
    m = outlines.from_llamacpp(llm, chat_mode=False)
    out["generate"] = m(COUNTING, max_tokens=MAX_TOKENS, temperature=0.0)
    out["stream"] = list(m.stream(COUNTING, max_tokens=MAX_TOKENS, temperature=0.0))
    out["stop"] = m(COUNTING, max_tokens=MAX_TOKENS, temperature=0.0, stop=[","])
    out["choice"] = m("Is Paris in France? Answer:", Literal[tuple(CHOICES)], max_tokens=5, temperature=0.0,
                      backend="llguidance")
    out["regex"] = m("The year the Eiffel tower was built:", Regex(YEAR_RE), max_tokens=8, temperature=0.0,
                     backend="llguidance")
    out["json"] = m("A person as JSON:", person_model(), max_tokens=JSON_TOKENS, temperature=0.0,
                    backend="llguidance")
    mc = outlines.from_llamacpp(llm)
    out["chat"] = mc(HELLO, max_tokens=MAX_TOKENS, temperature=0.0)
    out["chat_stream"] = list(mc.stream(HELLO, max_tokens=MAX_TOKENS, temperature=0.0))
    return out


def run_instructor(llm) -> dict:
    """instructor.patch(create=llm.create_chat_completion_openai_v1, mode=...) with a pydantic response_model:
    Mode.JSON (response_format json_object: a JSON grammar) and Mode.TOOLS (a forced tool call: the tool's schema
    as grammar); Mode.JSON_SCHEMA's response_format type "json_schema" is not one llama-cpp-python 0.3.36 reads
    (it generates free text, which fails validation), recorded as the exception's class; Mode.JSON streamed into
    instructor.Partial (the partial objects as the chunks arrive)."""
    warnings.simplefilter("ignore")
    import instructor

    person = person_model()
    out = {}
    for mode in ("JSON", "TOOLS", "JSON_SCHEMA"):
        create = instructor.patch(create=llm.create_chat_completion_openai_v1, mode=getattr(instructor.Mode, mode))
        try:
            p = create(messages=[{"role": "user", "content": "Extract: Jason is 25 years old"}], response_model=person,
                       max_tokens=JSON_TOKENS, temperature=0.0, max_retries=0)
            out[mode] = p.model_dump()
        except Exception as e:   # noqa: BLE001 (recorded: the same failure on both libraries)
            out[mode] = f"raised {type(e).__name__}"
    create = instructor.patch(create=llm.create_chat_completion_openai_v1, mode=instructor.Mode.JSON)
    parts = create(messages=[{"role": "user", "content": "Extract: Jason is 25 years old"}], stream=True,
                   response_model=instructor.Partial[person], max_tokens=JSON_TOKENS, temperature=0.0, max_retries=0)
    out["JSON.partial_stream"] = [p.model_dump() for p in parts]
    return out


def run_guidance(llm) -> dict:
    """guidance.models.LlamaCpp over a Llama (its engine decodes through llama_batch_init / llama_decode /
    llama_get_logits / llama_memory_seq_rm and tokenizes through the C llama_tokenize llguidance calls):
    gen, gen with stop, select, gen with a regex, guidance.json with a pydantic schema, a chat turn."""
    warnings.simplefilter("ignore")
    import guidance
    from guidance import assistant, gen, select, user

    lm0 = guidance.models.LlamaCpp(llm, echo=False)
    out = {}
    out["gen"] = (lm0 + COUNTING + gen("a", max_tokens=MAX_TOKENS, temperature=0.0))["a"]
    out["stop"] = (lm0 + COUNTING + gen("a", max_tokens=MAX_TOKENS, stop=",", temperature=0.0))["a"]
    out["select"] = (lm0 + "Is Paris in France? Answer: " + select(CHOICES, name="a"))["a"]
    out["regex"] = (lm0 + "The Eiffel tower was built in" + gen("a", regex=YEAR_RE, temperature=0.0))["a"]
    out["json"] = (lm0 + "A person as JSON: " + guidance.json(name="a", schema=person_model(),
                                                             max_tokens=JSON_TOKENS, temperature=0.0))["a"]
    with user():
        lm = lm0 + HELLO
    with assistant():
        lm += gen("a", max_tokens=MAX_TOKENS, temperature=0.0)
    out["chat"] = lm["a"]
    return out
