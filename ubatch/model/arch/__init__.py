"""One module per architecture. Each provides:

NAME, ROPE_TYPE
load_hparams(f: GGUFFile) -> HParams          # the file's hyperparameters with llama.cpp's defaults
load_weights(src: TensorSource, hp) -> object # every tensor checked by name and shape (GGUFError otherwise)
forward(model, step, x, keep) -> x[keep]      # the decoder layers of one ubatch (step: ubatch.engine.model_runner.Step)
logits(model, xn, n_threads) -> float32[n, n_vocab]   # lm head (+ bias / soft-cap) of the final-normed rows
"""
