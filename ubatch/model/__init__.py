"""The model layer: GGUF reading (gguf_file), hyperparameters (hparams), weights in their block layout
(weights), the architecture registry (registry, arch/<name>.py), the fused per-layer forward (fused) and Model
(model): how a GGUF decoder is read and run. The catalogue users name models from is ubatch.models, one floor up
(docs/architecture.md)."""
from ubatch.model.gguf_file import SUPPORTED_TYPES, GGUFError
from ubatch.model.model import Model
from ubatch.model.registry import SUPPORTED_ARCHS

__all__ = ["Model", "GGUFError", "SUPPORTED_ARCHS", "SUPPORTED_TYPES"]
