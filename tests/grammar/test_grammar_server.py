"""`ubatch serve` with OpenAI's response_format: json_object and json_schema {name, schema, strict} give JSON
that parses (and validates against the schema), through the openai client; bad formats are 400s naming the
field."""
from __future__ import annotations

import json

import pytest

from server_util import ServerProcess

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                           "days": {"type": "integer"},
                                           "sunny": {"type": "boolean"}},
          "required": ["city", "days", "sunny"], "additionalProperties": False}


@pytest.mark.realmodel
def test_response_format_json_schema_and_object():
    from openai import OpenAI
    with ServerProcess("--parallel", "2", "--n-ctx", "2048", model="gemma3-270m") as s:
        cl = OpenAI(base_url=s.url + "/v1", api_key="-")
        msgs = [{"role": "user", "content": "Weather forecast for Paris as JSON."}]
        r = cl.chat.completions.create(model="gemma3-270m", messages=msgs, max_tokens=60, temperature=0.7, seed=1,
                                       response_format={"type": "json_schema", "json_schema": {
                                           "name": "forecast", "schema": SCHEMA, "strict": True}})
        obj = json.loads(r.choices[0].message.content)
        assert set(obj) == {"city", "days", "sunny"} and isinstance(obj["days"], int) \
            and isinstance(obj["sunny"], bool) and len(obj["city"]) <= 20
        r = cl.chat.completions.create(model="gemma3-270m", messages=msgs, max_tokens=60, temperature=0,
                                       response_format={"type": "json_object"})
        assert r.choices[0].finish_reason == "length" or isinstance(json.loads(r.choices[0].message.content), dict)
        parts = list(cl.chat.completions.create(model="gemma3-270m", messages=msgs, max_tokens=60, temperature=0.7,
                                                seed=1, stream=True, response_format={
                                                    "type": "json_schema",
                                                    "json_schema": {"name": "forecast", "schema": SCHEMA}}))
        text = "".join(p.choices[0].delta.content or "" for p in parts if p.choices)
        assert json.loads(text) == obj
        for rf, param in (({"type": "xml"}, "response_format.type"),
                          ({"type": "json_schema"}, "response_format.json_schema"),
                          ({"type": "json_schema", "json_schema": {"name": "a b", "schema": {}}},
                           "response_format.json_schema.name"),
                          ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}},
                           "response_format.json_schema.schema")):
            r = s.client().post("/v1/chat/completions", json={"model": "gemma3-270m", "messages": msgs,
                                                              "response_format": rf})
            assert r.status_code == 400 and r.json()["error"]["param"] == param, (rf, r.text)
