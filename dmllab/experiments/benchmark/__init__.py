"""The package's own artifacts: the offline benchmark (paper key "dmllab")."""
