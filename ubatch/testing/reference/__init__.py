"""An independent float64 reference forward of the supported architectures (docs/models.md, Fidelity): `RefModel(path)` reads a
GGUF with gguf.GGUFReader, `forward(model, tokens, mode="exact"|"emulate", kv="f32"|"f16")` gives float64
logits. See forward.py for what "emulate" keeps of ggml's formats. `attention_masked` is attention over a KV
cache in cell order with an additive mask (attention.py), the reference of the visible-cell attention kernel."""
from ubatch.testing.reference.actquant import act_kind, quantize
from ubatch.testing.reference.attention import attention_masked
from ubatch.testing.reference.forward import forward
from ubatch.testing.reference.model import RefHParams, RefModel

__all__ = ["RefModel", "RefHParams", "forward", "act_kind", "quantize", "attention_masked"]
