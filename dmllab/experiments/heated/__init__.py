"""Artifacts of heated: one module per table or figure (discovered by dmllab.experiments.registry)."""
