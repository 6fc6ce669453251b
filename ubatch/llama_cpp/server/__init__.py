"""ubatch.llama_cpp.server: llama-cpp-python 0.3.36's `python -m llama_cpp.server` (its command line, environment
variables and config file, JSON or YAML, with its settings names) served by `ubatch serve`'s app: a deployment
script switches with one word (`python -m ubatch.llama_cpp.server --model m.gguf --n_ctx 4096 --port 8000`).
Which settings are applied, mapped or refused: docs/compat.md "The server"."""
