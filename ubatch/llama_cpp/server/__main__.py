"""`python -m ubatch.llama_cpp.server` (or `python -m llama_cpp.server` after install_as_llama_cpp()): llama_cpp.server's
command line (`--model`, `--n_ctx`, `--port`, ..., `--config_file`; $CONFIG_FILE, $HOST, $PORT and the settings'
environment variables) served by ubatch serve's app. Extra: `--parallel N` (sequences decoded together)."""
from __future__ import annotations

import argparse
import os
import sys

from ubatch.llama_cpp.server.app import PARALLEL, resolve, to_server_config
from ubatch.llama_cpp.server.cli import add_args_from_model, parse_model_from_args
from ubatch.llama_cpp.server.settings import ConfigFileSettings, ModelSettings, ServerSettings, Settings


def build_config(argv=None):
    parser = argparse.ArgumentParser(description="llama-cpp-python's server command line, served by ubatch serve")
    add_args_from_model(parser, Settings)
    parser.add_argument("--config_file", type=str, help="Path to a config file to load.")
    parser.add_argument("--parallel", type=int, default=PARALLEL,
                        help=f"sequences decoded together (ubatch; default {PARALLEL})")
    args = parser.parse_args(argv)
    parallel = args.parallel
    del args.parallel
    config_file = os.environ.get("CONFIG_FILE", args.config_file)
    if config_file:
        cf = ConfigFileSettings.load(config_file)
        server, model = resolve(server_settings=cf, model_settings=cf.models)
    else:
        server, model = resolve(server_settings=parse_model_from_args(ServerSettings, args),
                                model_settings=[parse_model_from_args(ModelSettings, args)])
    cfg = to_server_config(server, model, parallel=max(parallel, 1))
    cfg.host = os.getenv("HOST", cfg.host)
    cfg.port = int(os.getenv("PORT", cfg.port))
    return cfg


def main(argv=None) -> int:
    try:
        cfg = build_config(argv)
    except (ValueError, NotImplementedError) as e:
        print(f"ubatch.llama_cpp.server: {e}", file=sys.stderr)
        return 1
    try:
        from ubatch.server.http_server import run as run_http
        from ubatch.server.state import build_state
    except ImportError as e:
        print(f"ubatch.llama_cpp.server needs the [server] extra (pip install 'ubatch[server]'): {e}",
              file=sys.stderr)
        return 2
    try:
        state = build_state(cfg)
    except (ValueError, OSError) as e:           # e.g. a K/V type whose block does not divide the head dim
        print(f"ubatch.llama_cpp.server: {e}", file=sys.stderr)
        return 1
    return run_http(state)


if __name__ == "__main__":
    sys.exit(main())
