"""Hypothesis profiles, chosen with env HYPOTHESIS_PROFILE:
  dev     - the everyday suite (a few seconds per property)
  ci      - ~100 examples per property
  asan    - reduced example counts for the sanitizer run (make asan / .ci/asan), ~10x slower code
  fuzz    - the long fuzzing run (make fuzz); also switches the leak test to its full cycle count
"""
import os

from hypothesis import HealthCheck, settings

pytest_plugins = ["backends"]      # the `backend` fixture: a kernel test once per back-end this CPU has

_COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("dev", max_examples=150, **_COMMON)
settings.register_profile("ci", max_examples=100, **_COMMON)
settings.register_profile("asan", max_examples=30, **_COMMON)
settings.register_profile("fuzz", max_examples=5000, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
