"""Artifacts of proxy_anchor: one module per table or figure (discovered by dmllab.experiments.registry)."""
