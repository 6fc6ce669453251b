"""Instructor's llama-cpp-python recipe runs unchanged on ubatch after install_as_llama_cpp():
instructor.patch(create=llm.create_chat_completion_openai_v1, mode=...) returns a pydantic model from Mode.JSON (a
JSON grammar from response_format json_object) and Mode.TOOLS (a forced tool call, the tool's schema as grammar);
Mode.JSON_SCHEMA fails as it fails over llama-cpp-python 0.3.36 (which does not read response_format type
"json_schema"); Mode.JSON streamed into instructor.Partial gives the same partial objects. Compared with what the
same calls returned over the real library (integrations.json)."""
import pytest

import ubatch.llama_cpp as L
from integrations_common import REF, cases, installed, require

require("instructor", "openai")
pytestmark = pytest.mark.realmodel


@pytest.fixture(scope="module")
def got():
    with installed() as llm:
        import llama_cpp
        assert llama_cpp is L
        yield cases.run_instructor(llm)


def test_response_models_equal_llama_cpp_python(got):
    ref = REF["instructor"]
    for mode in ("JSON", "TOOLS"):
        assert set(got[mode]) == {"name", "age"} and isinstance(got[mode]["age"], int), mode
        assert got[mode] == ref[mode], mode
    assert got["JSON"] == {"name": "Jason", "age": 25}


def test_partial_stream_equal_llama_cpp_python(got):
    parts = got["JSON.partial_stream"]
    assert parts == REF["instructor"]["JSON.partial_stream"]             # partial object for partial object
    assert len(parts) > 3 and parts[0] == {"name": None, "age": None} and parts[-1] == got["JSON"]


def test_json_schema_mode_fails_as_on_llama_cpp_python(got):
    assert got["JSON_SCHEMA"] == REF["instructor"]["JSON_SCHEMA"] == "raised InstructorRetryException"
