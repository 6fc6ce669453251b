"""The low-level API converts its arguments as llama-cpp-python's ctypes argtypes do: the client script
tests/data/llama_cpp_python/argtypes_client.py (ctypes / numpy scalars for ints, ints and None for bools, arrays,
pointers and byref for buffers, a buffer of the wrong width, extra and keyword arguments) prints over
ubatch.llama_cpp installed as `llama_cpp` what it printed over the real llama-cpp-python 0.3.36 (REFERENCE, on
Gemma 3 270M), but for MORE_PERMISSIVE / REFUSED, each with its reason."""
import subprocess
import sys

import pytest

import suite_paths
from child_process import CHILD_CWD, child_env

pytestmark = pytest.mark.realmodel
CLIENT = suite_paths.DATA + "/llama_cpp_python/argtypes_client.py"
RUN = ("import sys, runpy, ubatch.llama_cpp; ubatch.llama_cpp.install_as_llama_cpp(); sys.argv = sys.argv[1:]; "
       "runpy.run_path(sys.argv[0], run_name='__main__')")

REFERENCE = """\
tok ints ok 3
tok c_int32 len ok 3
tok c_int len ok 3
tok c_int64 len ArgumentError
tok np int len ok 3
tok np int64 len ok 3
tok bool 0/1 ok 3
tok bool None ok 2
tok str text ArgumentError
tok bytearray ArgumentError
tok byref toks ArgumentError
tok pointer toks ok 3
tok c_int array ok 3
tok c_int64 array ArgumentError
tok None toks ok -3
tok float len ArgumentError
tok c_void_p vocab ok 3
tok extra arg ok 3
tok kwargs TypeError
piece c_int token ok 3
piece llama_token ok 3
piece np token ok 3
piece np int64 token ok 3
piece char array ok 3
piece bytes buf ok 3
piece c_char_p buf ok 3
attr c_int ok 16
attr llama_token ok 16
text c_int ok b'[multimodal]'
score np ok -1000.0
is_eog c_int ok True
decode get_one ok 0
logits_ith c_int ok LP_c_float
logits_ith np ok LP_c_float
logits_ith float ArgumentError
get_one c_int n ok llama_batch
get_one array c_int ok llama_batch
get_one ptr ok llama_batch
get_one byref ArgumentError
get_one list ArgumentError
seq_rm c_int ok True
seq_pos_max np ok 1
n_ctx c_void_p ok 256
temp c_float ok True
temp c_double ArgumentError
temp int ok True
temp np ok True
top_k c_int ok True
top_p c_size_t ok True
dist c_uint32 ok True
dist -1 ok True
dist big ok True
sample c_int idx ok 236888
sample np idx ok 236888
accept c_int ok None
chain_n c_void_p ArgumentError
chain_get c_int ok True
apply byref ok None
apply pointer ok None
apply struct ok None
selected 3
n_vocab c_void_p ok 262144
"""
# ubatch accepts (ctypes refuses): byref of a token array of the right type, a c_void_p naming a sampler
MORE_PERMISSIVE = {"tok byref toks": "ok 3", "get_one byref": "ok llama_batch", "chain_n c_void_p": "ok 1"}
# ctypes lets llama.cpp write the piece into an immutable `bytes` object; ubatch refuses the buffer
REFUSED = {"piece bytes buf": "ArgumentError"}


def test_arguments_convert_as_llama_cpp_pythons_argtypes():
    from ubatch.model import fetch
    p = subprocess.run([sys.executable, "-c", RUN, CLIENT, fetch.path("gemma3-270m")], capture_output=True,
                       text=True, timeout=300, env=child_env(), cwd=CHILD_CWD)
    assert p.returncode == 0, p.stderr[-3000:]
    got = p.stdout.splitlines()
    ref = REFERENCE.splitlines()
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        label = r.rsplit(" ok ", 1)[0] if " ok " in r else r.rsplit(" ", 1)[0]
        want = dict(MORE_PERMISSIVE, **REFUSED).get(label)
        assert g == (f"{label} {want}" if want else r), (g, r)
