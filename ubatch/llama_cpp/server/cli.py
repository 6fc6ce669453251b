"""llama_cpp.server's command line: one `--<setting>` option per setting, named exactly as the setting
(underscores), booleans given as values (`--embedding true`), lists as several values."""
from __future__ import annotations

import argparse

from ubatch.llama_cpp.server.settings import _Settings, convert


def add_args_from_model(parser: argparse.ArgumentParser, model: type) -> None:
    for name, (kind, default) in model.FIELDS.items():
        kw = {"dest": name, "default": None, "help": f"(default: {default!r})"}
        if kind in ("floats", "strs"):
            parser.add_argument(f"--{name}", nargs="*", **kw)
        else:
            parser.add_argument(f"--{name}", type=lambda v, n=name, k=kind: convert(n, k, v), **kw)


def parse_model_from_args(model: type, args: argparse.Namespace) -> _Settings:
    return model(**{k: v for k, v in vars(args).items() if v is not None and k in model.FIELDS})
