"""The model layer: GGUF reading, hyperparameters and the architectures."""
from ubatch.model.gguf_model import *  # noqa: F401,F403
from ubatch.model.gguf_model import Model

__all__ = ["Model"]
