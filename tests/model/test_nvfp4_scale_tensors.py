"""NVFP4 files may carry per-tensor '.scale' tensors (llama.cpp multiplies them into the matmul output); ubatch does
not apply them, so the loader refuses such a file naming the tensor (moved here from tests/compute: it is the
model loader's behaviour)."""
import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

import tiny_types


def test_scale_tensors_are_refused_by_name(tmp_path):
    """NVFP4 files may carry per-tensor '.scale' tensors that llama.cpp multiplies into the matmul output;
    ubatch does not apply them, so a file holding one is refused naming it (the unused-tensor check)."""
    from ubatch.model.gguf_file import GGUFError
    from ubatch.model.model import Model
    src = tiny_types.write("NVFP4", tmp_path / "a.gguf")
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(str(tmp_path / "b.gguf"), "llama")
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        vt = f.types[0]
        val = f.contents()
        if vt == gguf.GGUFValueType.ARRAY:
            w.add_key_value(f.name, val, vt, sub_type=f.types[-1])
        else:
            w.add_key_value(f.name, val, vt)
    for ti in r.tensors:
        shape = tuple(int(s) for s in reversed(ti.shape))
        if ti.tensor_type in (T.F32,):
            w.add_tensor(ti.name, np.asarray(ti.data), raw_shape=shape, raw_dtype=T.F32)
        else:
            w.add_tensor(ti.name, np.asarray(ti.data).view(np.int8).reshape(-1), raw_shape=shape,
                         raw_dtype=int(ti.tensor_type))
    w.add_tensor("blk.0.attn_q.scale", np.ones(1, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert Model.from_gguf(src).weights.layers[0].wq.type_name == "NVFP4"
    with pytest.raises(GGUFError, match=r"'blk.0.attn_q.scale'"):
        Model.from_gguf(str(tmp_path / "b.gguf"))
