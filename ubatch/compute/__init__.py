"""The compute layer: C kernels and their wrappers, nothing else (it imports only ubatch.common and ubatch._ffi;
the K/V data and the model runner are the engine's: ubatch.engine.kv_store, ubatch.engine.model_runner; the
fused per-layer forward is the model's: ubatch.model.fused).

Kernels (all batch-invariant by construction: a row's result depends on that row's inputs alone, bitwise,
whatever else is in the call, the tiling or the thread count; AVX-512 VNNI, AVX-VNNI, AVX2 or plain C
chosen at run time from the CPU (``ubatch.compute.backends``), UBATCH_KERNELS=<name> forces one):

* ``ubatch.compute.matmul``: ``QWeight(ggml_type, n_rows, n_cols, data)`` (GGUF blocks kept as they are),
  ``matmul(x, w)`` (activations quantised per row as ggml-cpu does, integer block dots), ``get_rows(w, ids)``,
  ``backend()`` / ``set_backend()``.
* ``ubatch.compute.ops``: ``rms_norm``, ``silu_mul``, ``gelu_mul``, ``visible_cells`` /
  ``visible_cells_for(place, cell_pos)`` (per-row visible-cell lists in ascending position order) and
  ``attention_visible`` (attention over those lists: f32/f16 K/V, GQA, soft-cap, scale).
* ``ubatch.compute.kernels``: RoPE, the K-shift and the cell-order ``attention`` over a mask.
"""
