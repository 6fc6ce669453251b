"""--type-k / --type-v: the K/V cache element types of `ubatch serve` and `ubatch run` (llama.cpp's
--cache-type-k / --cache-type-v names), checked by argparse (a bad value is named in the usage error); the
model-dependent checks (the block of 32 must divide the head dim) are the engine's, reported by the command."""
from __future__ import annotations

import argparse

from ubatch.common.params import KV_TYPES


def _kv_type(flag: str):
    def parse(v: str) -> str:
        t = v.strip().lower()
        if t not in KV_TYPES:
            raise argparse.ArgumentTypeError(f"{flag} {v!r} is not a K/V cache type (one of {', '.join(KV_TYPES)})")
        return t
    parse.__name__ = flag            # argparse names the option in its message
    return parse


def add_kv_type_options(p: argparse.ArgumentParser, type_k: str = "f16", type_v: str = "f16") -> None:
    names = "|".join(KV_TYPES)
    p.add_argument("--type-k", "--cache-type-k", dest="type_k", type=_kv_type("--type-k"), default=type_k,
                   metavar=names, help=f"K cache element type (default {type_k})")
    p.add_argument("--type-v", "--cache-type-v", dest="type_v", type=_kv_type("--type-v"), default=type_v,
                   metavar=names, help=f"V cache element type (default {type_v}; a quantised V uses flash "
                                       f"attention, as llama.cpp needs)")
