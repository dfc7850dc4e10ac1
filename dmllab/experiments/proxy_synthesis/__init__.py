"""Artifacts of proxy_synthesis: one module per table or figure (discovered by dmllab.experiments.registry)."""
