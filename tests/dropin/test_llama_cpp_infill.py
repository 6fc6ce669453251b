"""llama_sampler_init_infill (and LlamaSampler.add_infill) is llama.cpp's infill sampler: the client script
tests/data/llama_cpp_python/infill_client.py (seeded logits over Qwen2.5-Coder ids whose pieces are prefixes of one
another, with and without the end-of-generation tokens, after top-k over the whole vocabulary) prints over
ubatch.llama_cpp installed as `llama_cpp` what it printed over the real llama-cpp-python 0.3.36 (REFERENCE): the
same kept ids, probabilities bit for bit (float32 hex) and logits."""
import subprocess
import sys

import pytest

import suite_paths
from child_process import CHILD_CWD, child_env

pytestmark = pytest.mark.realmodel
CLIENT = suite_paths.DATA + "/llama_cpp_python/infill_client.py"
RUN = ("import sys, runpy, ubatch.llama_cpp; ubatch.llama_cpp.install_as_llama_cpp(); sys.argv = sys.argv[1:]; "
       "runpy.run_path(sys.argv[0], run_name='__main__')")

REFERENCE = """\
ids 27 eog 4 eot 151645
text0 1 True [(151645, '288f343e', 1.0)]
text1 1 True [(151645, 'd3a23f3e', 1.0)]
text2 1 True [(33655, '0000803f', 1.5823748111724854)]
text3 1 True [(198, '0000803f', 3.3671350479125977)]
text4 1 True [(87, '0000803f', 2.373382568359375)]
text5 2 True [(271, '28351a3f', 3.8043322563171387), (1350, 'af95cb3e', 3.3159265518188477)]
text6 3 True [(1350, 'c2bdbe3e', 3.7996349334716797), (67, 'acd39a3e', 3.605936050415039), (220, '916ea63e', 3.176572561264038)]
text7 1 True [(721, '0000803f', 5.824925899505615)]
eog0 4 True [(151645, '08bd073f', 1.1545697450637817), (128247, '8b95393e', 0.08105436712503433), (151662, 'ed7f273e', -0.021472567692399025), (151643, 'd0ecff3d', -0.29071667790412903)]
eog1 4 True [(151643, '5a06003f', 3.271721124649048), (151645, '42d5ac3e', 2.878675937652588), (128247, '10e4143e', 2.0364162921905518), (151662, '33c08a3c', -0.11355948448181152)]
eog2 4 True [(128247, '9f4b173f', 6.602705001831055), (151643, '51404a3e', 5.506687164306641), (151645, 'a35e023e', 5.0675506591796875), (151662, '2465ac3d', 4.653818130493164)]
topk40 1 True [(100620, '0000803f', 13.568489074707031)]
"""


def test_infill_sampler_keeps_what_llama_cpp_keeps():
    from ubatch.model import fetch
    p = subprocess.run([sys.executable, "-c", RUN, CLIENT, fetch.path("qwen2.5-0.5b")], capture_output=True,
                       text=True, timeout=300, env=child_env(), cwd=CHILD_CWD)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.splitlines() == REFERENCE.splitlines()
