"""Shared pytest configuration: hypothesis profiles.

HYPOTHESIS_PROFILE=ci (default, ~100 examples per property) or HYPOTHESIS_PROFILE=fuzz (many more)."""
import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=100, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("fuzz", max_examples=20000, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
