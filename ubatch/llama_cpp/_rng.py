"""llama.cpp's sampling RNG: std::mt19937 seeded with a uint32 (LLAMA_DEFAULT_SEED = a random seed), read the
way libstdc++'s distributions read it. numpy's legacy MT19937 seeding is std::mt19937's, so the raw stream is
identical; uniform_real_distribution<double> consumes two 32-bit outputs a, b -> (a + b * 2**32) / 2**64
(generate_canonical<double, 53>), <float> one output -> float(a) / 2**32; both clamped below 1."""
from __future__ import annotations

import copy
import os

import numpy as np

from ubatch.llama_cpp._constants import LLAMA_DEFAULT_SEED

_BELOW_ONE_D = np.nextafter(1.0, 0.0)
_BELOW_ONE_F = np.nextafter(np.float32(1.0), np.float32(0.0))


def rng_seed(seed: int) -> int:
    """get_rng_seed: LLAMA_DEFAULT_SEED means a fresh random seed."""
    seed &= 0xFFFFFFFF
    if seed == LLAMA_DEFAULT_SEED:
        return int.from_bytes(os.urandom(4), "little")
    return seed


class MT19937:
    def __init__(self, seed: int) -> None:
        self.seed(seed)

    def seed(self, seed: int) -> None:
        self._bg = np.random.MT19937(0)
        self._bg._legacy_seeding(int(seed) & 0xFFFFFFFF)

    def raw(self, n: int) -> np.ndarray:
        return self._bg.random_raw(n)

    def uniform_double(self) -> float:
        a, b = (int(x) for x in self._bg.random_raw(2))
        r = (a + b * 4294967296.0) / 18446744073709551616.0
        return float(_BELOW_ONE_D) if r >= 1.0 else r

    def uniform_float(self) -> float:
        a = int(self._bg.random_raw(1)[0])
        r = np.float32(np.float32(a) / np.float32(4294967296.0))
        return float(_BELOW_ONE_F) if r >= 1.0 else float(r)

    def discrete(self, p: np.ndarray) -> int:
        """std::discrete_distribution<int>(p)(rng) as libstdc++ computes it: weights normalised by their double
        sum, cumulative sums with the last forced to 1, lower_bound of one uniform double."""
        w = np.asarray(p, np.float64)
        if w.size == 0:
            return 0
        total = np.cumsum(w)[-1]
        cp = np.cumsum(w / total)
        cp[-1] = 1.0
        u = self.uniform_double()
        return int(np.searchsorted(cp, u, side="left"))

    def clone(self) -> "MT19937":
        return copy.deepcopy(self)
