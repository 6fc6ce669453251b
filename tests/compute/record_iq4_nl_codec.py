"""Records ggml's iq4_nl K/V row quantiser (quantize_row_iq4_nl_ref: what ggml-cpu's set_rows / cpy to an
iq4_nl cache call) on test rows, from libggml-base of llama-cpp-python 0.3.36 through ctypes
(python tests/compute/record_iq4_nl_codec.py; tests never import this file). Writes
tests/data/kv_quant/iq4_nl_codec.npz: `x` float32[rows, 96] (rows of every scale, zero / constant blocks, an
outlier, ties) and `q` uint8[rows, 54] (three 18-byte blocks per row)."""
import ctypes
import glob
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(os.path.dirname(HERE), "data", "kv_quant", "iq4_nl_codec.npz")


def rows() -> np.ndarray:
    rng = np.random.default_rng(26)
    x = (rng.standard_normal((40, 96)) * rng.uniform(1e-4, 50, (40, 1))).astype(np.float32)
    x[1] = 0.0                                   # zero blocks (d = 0)
    x[2, :32] = -2.5                             # constant blocks
    x[3, 32:64] = 7.0
    x[4, 5] = 1e4                                # an outlier
    x[5] = rng.integers(-127, 128, 96).astype(np.float32)   # exact table points and midpoints
    x[6] = np.tile(np.array([-127, -115.5, -93.5, 1, 7, 19, 113, 101], np.float32), 12)
    x[7, :32] = rng.standard_normal(32).astype(np.float32) * 1e-16   # below ggml's 1e-15 floor
    x[8] = rng.laplace(size=96).astype(np.float32)
    return x


def main() -> None:
    import llama_cpp
    lib = glob.glob(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so*"))[0]
    g = ctypes.CDLL(lib)
    f = g.quantize_row_iq4_nl_ref
    f.argtypes, f.restype = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64], None
    x = rows()
    q = np.zeros((x.shape[0], 3 * 18), np.uint8)
    for i in range(x.shape[0]):                   # one call per row: each row's L buffer starts afresh
        f(x[i].ctypes.data, q[i].ctypes.data, x.shape[1])
    np.savez_compressed(OUT, x=x, q=q, made_by=f"quantize_row_iq4_nl_ref of {os.path.basename(lib)}, "
                        f"llama-cpp-python {llama_cpp.__version__}")
    print(OUT, q.shape)


if __name__ == "__main__":
    main()
