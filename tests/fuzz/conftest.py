"""Fuzz tests run the same examples on every run (reference §8 one-line errors were found by a
random example that then failed CI only now and then): hypothesis derives its examples from
each test's name, and keeps no example database between runs. A deliberate exploration run
can still ask for randomness with HYPOTHESIS_PROFILE=explore."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("deterministic", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))
