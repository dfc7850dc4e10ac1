"""The notebook pipeline: artifacts, the notebook setup cell, batch studies with papermill and the report.

Submodules are imported where used (``import dmllab.pipeline`` does no work).
"""
