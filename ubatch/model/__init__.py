"""The model layer: GGUF reading (gguf_file), hyperparameters (hparams), weights in their block layout
(weights), the architecture registry (registry, arch/<name>.py) and Model (model)."""
from ubatch.model.gguf_file import SUPPORTED_TYPES, GGUFError
from ubatch.model.model import Model

__all__ = ["Model", "GGUFError", "SUPPORTED_TYPES"]
