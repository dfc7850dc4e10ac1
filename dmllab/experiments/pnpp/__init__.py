"""Artifacts of pnpp: one module per table or figure (discovered by dmllab.experiments.registry)."""
