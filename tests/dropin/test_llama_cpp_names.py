"""Name coverage of ubatch.llama_cpp against llama-cpp-python 0.3.36's public names (tests/data/llama_cpp_python/
names.json, written by record_names.py from the real package): the low-level module has every name but the ones
listed here with their reason, and the names that exist only to raise NotImplementedError are exactly the listed
families (each one raising, naming its feature); every other module has all of its module's names but MISSING_OK.
The coverage of every module is printed (pytest -s)."""
import importlib
import json
import os

import pytest

import suite_paths  # noqa: E402
DATA = os.path.join(suite_paths.DATA, "llama_cpp_python")
NAMES = json.load(open(os.path.join(DATA, "names.json")))

# llama-cpp-python's own machinery for binding a shared library: ubatch has no such library to bind
NOT_IN_LOW_LEVEL = {"ctypes_function", "ctypes_function_for_shared_library", "load_shared_library"}
# families that raise NotImplementedError (docs/compat.md "What is not there")
RAISING_PREFIXES = ("llama_adapter_", "llama_set_adapter", "llama_apply_adapter_cvec", "llama_chat_apply_template",
                    "llama_chat_builtin_templates", "llama_model_save_to_file",
                    "llama_batch_ext_", "llama_process", "llama_opt_", "llama_model_load_from_file_ptr",
                    "llama_model_init_from_user", "llama_set_sampler", "llama_sampler_copy",
                    "llama_vocab_get_suppress_tokens", "llama_sampler_init_adaptive_p")
# names no module lacks but these: llama-cpp-python's ctypes binding machinery (above); in llama_grammar the sample
# grammars (llama.cpp's grammars/*.gbnf text, not copied) and the private tables of its JSON-schema converter
# (ubatch's converter, ubatch.grammar.schema, is its own)
MISSING_OK = {"llama_cpp": NOT_IN_LOW_LEVEL, "llama_cpp.llama_cpp": NOT_IN_LOW_LEVEL,
              "llama_cpp.llama_grammar": {"ARITHMETIC_GBNF", "CHESS_GBNF", "C_GBNF", "JAPANESE_GBNF", "JSON_ARR_GBNF",
                                          "LIST_GBNF", "ESCAPED_IN_REGEXPS_BUT_NOT_IN_LITERALS",
                                          "GRAMMAR_LITERAL_ESCAPES", "GRAMMAR_LITERAL_ESCAPE_RE",
                                          "INVALID_RULE_CHARS_RE", "NON_LITERAL_SET"}}


def _module(name):
    try:
        return importlib.import_module("ubatch." + name)
    except ModuleNotFoundError:
        return None


def test_low_level_module_has_every_name():
    mod = _module("llama_cpp.llama_cpp")
    missing = {n for n in NAMES["llama_cpp.llama_cpp"] if not hasattr(mod, n)}
    assert missing <= NOT_IN_LOW_LEVEL, sorted(missing - NOT_IN_LOW_LEVEL)


def test_top_level_has_the_low_level_names_and_llama():
    top = _module("llama_cpp")
    low = set(NAMES["llama_cpp.llama_cpp"]) - NOT_IN_LOW_LEVEL
    assert all(hasattr(top, n) for n in low)
    for n in ("Llama", "LlamaState", "LogitsProcessorList", "StoppingCriteriaList", "LlamaRAMCache",
              "LlamaDiskCache", "LlamaCache", "LlamaTokenizer", "LlamaGrammar", "install_as_llama_cpp"):
        assert hasattr(top, n), n


def test_raising_names_are_the_listed_families():
    mod = _module("llama_cpp.llama_cpp")
    raising = sorted(n for n in NAMES["llama_cpp.llama_cpp"] if hasattr(getattr(mod, n, None), "ubatch_unsupported"))
    assert raising and all(n.startswith(RAISING_PREFIXES) for n in raising), raising
    for n in raising:
        with pytest.raises(NotImplementedError, match=n):
            getattr(mod, n)(0, 0, 0)
    print(f"\nllama_cpp.llama_cpp: {len(raising)} of {len(NAMES['llama_cpp.llama_cpp'])} names raise "
          f"NotImplementedError: {raising}")


def test_coverage_report():
    lines = []
    for name, names in NAMES.items():
        if name == "llama_cpp_python":
            continue
        mod = _module(name)
        have = [n for n in names if mod is not None and hasattr(mod, n)]
        lines.append(f"{name}: {len(have)} / {len(names)}" + ("" if mod is not None else " (module absent)"))
        assert set(names) - set(have) <= MISSING_OK.get(name, set()), (name, sorted(set(names) - set(have)))
    print("\n" + "\n".join(lines))
    assert NAMES["llama_cpp_python"] == "0.3.36"
