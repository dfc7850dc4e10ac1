"""Loaded before every test module: ``import dmllab`` pins torch's CPU kernels (dmllab.numerics) before any test
runs a torch kernel, as the CLI, the study and the notebooks do."""

import dmllab  # noqa: F401
