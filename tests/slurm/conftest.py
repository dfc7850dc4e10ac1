"""A real single-node SLURM cluster for the tests in this folder (:mod:`slurm_cluster`), started once per session
where it can be (Linux, root, slurm-wlm, munge and MariaDB installed: ``.ci/run`` installs them) and stopped at
the end; elsewhere its tests skip, saying why."""

from __future__ import annotations

import pytest
import slurm_cluster


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    """The started :class:`slurm_cluster.Cluster`."""
    reason = slurm_cluster.unavailable()
    if reason:
        pytest.skip(reason)
    folder = tmp_path_factory.mktemp("slurm-cluster")
    try:
        cluster = slurm_cluster.start(folder)
    except RuntimeError:
        slurm_cluster.stop(folder)
        raise
    try:
        yield cluster
    finally:
        slurm_cluster.stop(folder)
