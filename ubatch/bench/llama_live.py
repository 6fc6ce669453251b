"""llama.cpp's own allocator timed live on this machine, for `ubatch bench split --llama-cpp live`.

native/llama_split_driver.cpp (our code) is compiled against the internal headers of the llama-cpp-python
source distribution of the installed version (downloaded once from PyPI with pip, cached in
~/.cache/ubatch/llama-cpp-src/<version>) and linked against the libllama.so that llama-cpp-python installed.
It runs llama_batch_allocr's init + split_reset + split loop on the same expanded workloads as ubatch, with
a mock memory (seq_pos_min / seq_pos_max from the workload's ranges) and without one.
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tarfile
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVER = os.path.join(HERE, "native", "llama_split_driver.cpp")
CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "ubatch", "llama-cpp-src")
KINDS = {"simple": 0, "equal": 1, "seq": 2}


class LiveUnavailable(RuntimeError):
    """llama.cpp cannot be timed live here (the message says why)."""


def _llama_cpp() -> Tuple[str, str]:
    """(version, lib dir) of the installed llama-cpp-python."""
    try:
        import llama_cpp
    except ImportError as e:
        raise LiveUnavailable(f"llama-cpp-python is not installed ({e})") from None
    lib = os.path.join(os.path.dirname(os.path.abspath(llama_cpp.__file__)), "lib")
    if not os.path.exists(os.path.join(lib, "libllama.so")):
        raise LiveUnavailable(f"no libllama.so in {lib}")
    return llama_cpp.__version__, lib


def _sources(version: str) -> str:
    """The llama.cpp tree (vendor/llama.cpp) of llama-cpp-python==version's sdist, fetched once."""
    root = os.path.join(CACHE, version)
    tree = os.path.join(root, "llama.cpp")
    if os.path.exists(os.path.join(tree, "src", "llama-batch.h")):
        return tree
    os.makedirs(root, exist_ok=True)
    tgz = glob.glob(os.path.join(root, "llama_cpp_python-*.tar.gz"))
    if not tgz:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q", "-d", root,
               f"llama-cpp-python=={version}"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        tgz = glob.glob(os.path.join(root, "llama_cpp_python-*.tar.gz"))
        if r.returncode != 0 or not tgz:
            raise LiveUnavailable(f"cannot download the llama-cpp-python {version} sdist: {r.stderr.strip()[-300:]}")
    wanted = ("vendor/llama.cpp/src/", "vendor/llama.cpp/include/", "vendor/llama.cpp/ggml/include/")
    tmp = tree + ".part"
    shutil.rmtree(tmp, ignore_errors=True)
    with tarfile.open(tgz[0]) as tf:
        for m in tf.getmembers():
            parts = m.name.split("/", 1)
            if (len(parts) == 2 and parts[1].startswith(wanted) and (m.isfile() or m.isdir())
                    and ".." not in parts[1].split("/")):
                m.name = parts[1][len("vendor/llama.cpp/"):]
                tf.extract(m, tmp)
    os.replace(tmp, tree)
    return tree


def build() -> str:
    """Path of the compiled driver (rebuilt when the driver source is newer)."""
    version, lib = _llama_cpp()
    exe = os.path.join(CACHE, version, "llama_split_driver")
    if os.path.exists(exe) and os.path.getmtime(exe) >= os.path.getmtime(DRIVER):
        return exe
    cxx = shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++")
    if not cxx:
        raise LiveUnavailable("no C++ compiler (g++) found")
    tree = _sources(version)
    cmd = [cxx, "-std=c++17", "-O3", "-DNDEBUG", "-march=native", f"-I{tree}/src", f"-I{tree}/include",
           f"-I{tree}/ggml/include", DRIVER, f"-L{lib}", "-l:libllama.so", f"-Wl,-rpath,{lib}", "-o", exe + ".tmp"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise LiveUnavailable(f"the llama.cpp driver does not compile: {r.stderr.strip()[-500:]}")
    os.replace(exe + ".tmp", exe)
    return exe


def _serialise(workloads: List[dict]) -> str:
    out = []
    for w in workloads:
        mem = w["mem"] or []
        head = [f"W {w['id']} {w['n_seq_max']} {w['n_vocab']} {int(w['output_all'])} {w['n_ubatch']} {len(mem)}"]
        head += [f"{s} {a} {b}" for s, a, b in mem]
        head.append(str(len(w["tokens"])))
        rows = [f"{t} {p} {o} {len(ids)} {' '.join(map(str, ids))}"
                for t, p, o, ids in zip(w["tokens"].tolist(), w["pos"].tolist(), w["output"].tolist(), w["seq_ids"])]
        sts = [str(len(w["strategies"]))] + [f"{KINDS[s['strategy']]} {int(bool(s.get('sequential')))} "
                                               f"{int(s.get('n_keep_tail', 0))}" for s in w["strategies"]]
        out.append("\n".join(head + rows + sts))
    return "\n".join(out) + "\n"


def time_workloads(workloads: List[dict], reps: int, warmup: int) -> Dict[tuple, dict]:
    """{(workload id, strategy label, 'mock'|'none'): {median_us, min_us, n_ubatches, total_tokens}}."""
    from ubatch.bench.split_bench import strategy_label
    exe = build()
    r = subprocess.run([exe, str(reps), str(warmup)], input=_serialise(workloads), capture_output=True, text=True)
    if r.returncode != 0:
        raise LiveUnavailable(f"the llama.cpp driver failed ({r.returncode}): {r.stderr.strip()[-300:]}")
    labels = {}
    for w in workloads:
        for s in w["strategies"]:
            labels[(w["id"], KINDS[s["strategy"]], int(bool(s.get("sequential"))), int(s.get("n_keep_tail", 0)))] = \
                strategy_label(s)
    res: Dict[tuple, dict] = {}
    for line in r.stdout.splitlines():
        wid, kind, seq, tail, mem, med, mn, n_ub, total = line.split()
        label = labels[(wid, int(kind), int(seq), int(tail))]
        res[(wid, label, mem)] = {"median_us": float(med), "min_us": float(mn), "n_ubatches": int(n_ub),
                                  "total_tokens": int(total)}
    return res


def available() -> Optional[str]:
    """None when live timing works here, else the reason it does not."""
    try:
        build()
    except LiveUnavailable as e:
        return str(e)
    return None
