"""llama_cpp._internals as 0.3.36 defines it: tests/data/llama_cpp_python/internals_client.py (LlamaModel's
accessors, LlamaContext over LlamaBatch, LlamaTokenDataArray + llama_sampler_apply, LlamaSampler with every add_*,
a CustomSampler in a chain, clone / get_seed, the KV calls, LlamaSamplingParams / LlamaSamplingContext and the
deprecated methods that raise in 0.3.36 too) runs unchanged over ubatch.llama_cpp installed as `llama_cpp` and
prints what it printed over the real llama-cpp-python 0.3.36 on Gemma 3 270M (REFERENCE, recorded on this machine
with `python internals_client.py <gemma3-270m path>`)."""
import ast
import os
import subprocess
import sys

import pytest

import suite_paths
from child_process import CHILD_CWD, child_env

pytestmark = pytest.mark.realmodel
CLIENT = os.path.join(suite_paths.DATA, "llama_cpp_python", "internals_client.py")
RUN = ("import sys, runpy, ubatch.llama_cpp; ubatch.llama_cpp.install_as_llama_cpp(); sys.argv = sys.argv[1:]; "
       "runpy.run_path(sys.argv[0], run_name='__main__')")

REFERENCE = """\
model 1 262144 32768 640 1.0 gemma3 270M Q4_K - Medium 246587904 268098176
special 2 1 2 -1 248 -1 -1 -1 106 True False
vocab '[multimodal]' -1000.0 16 8
tok [2, 23391, 1902] b'hello world' b' world'
get_tensor get_tensor is not implemented in llama.cpp
meta 29
ctx 512 0 True
batch 6
arr 262144 False 7 12
apply 7 1 496 1234
custom 3 [262144] 2
greedy [506, 5279, 529, 506, 2891, 529]
seq True 7
keep 11 7
shift 10
softmax ['DeprecationWarning']
many 9 99
clone 9 99
miro 5 5
clone custom Cannot clone LlamaSampler that contains custom samplers
sctx 40 0.8 64 17 [42, 17, 99] ''
sample_top_k sample_top_k is deprecated, use LlamaSampler instead
sctx.sample LlamaSamplingContext.sample is deprecated, use LlamaSampler instead
addseq 5 [0, 0, 0, 1, 1] [0, 0, 1, 1, 1] [0, 1, 2, 0, 1]
clear -1
norm [0.6, 0.8] [0.0, 0.0]
missing Model path does not exist: /nonexistent.gguf
closed None None None
"""
# llama.cpp's top-2 margins of the greedy steps: 0.6, 1.75, 2.54, 0.55, 0.02, 0.06 -- the last two are near-ties
GREEDY_FIRM = 4


def test_internals_client_prints_what_llama_cpp_python_printed():
    from ubatch.model import fetch
    p = subprocess.run([sys.executable, "-c", RUN, CLIENT, fetch.path("gemma3-270m")], capture_output=True,
                       text=True, timeout=300, env=child_env(), cwd=CHILD_CWD)
    assert p.returncode == 0, p.stderr[-3000:]
    got, ref = p.stdout.splitlines(), REFERENCE.splitlines()
    assert [ln.split()[0] for ln in got] == [ln.split()[0] for ln in ref]
    for g, r in zip(got, ref):
        if r.startswith("greedy "):
            assert ast.literal_eval(g[7:])[:GREEDY_FIRM] == ast.literal_eval(r[7:])[:GREEDY_FIRM], g
        else:
            assert g == r
