"""Old module path of the model class (kept so existing imports work): see ubatch.model.model."""
from ubatch.model.gguf_file import GGUFError  # noqa: F401
from ubatch.model.hparams import ROPE_NEOX, ROPE_NORM  # noqa: F401
from ubatch.model.model import Model  # noqa: F401
from ubatch.model.registry import SUPPORTED_ARCHS  # noqa: F401

__all__ = ["Model", "GGUFError", "SUPPORTED_ARCHS"]
