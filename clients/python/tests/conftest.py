from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import pytest

from cluster import Cluster, find_binary


@pytest.fixture(scope="session")
def leasehold_bin() -> Path:
    binary = find_binary()
    if binary is None or not binary.is_file():
        where = binary or "../../target/{release,debug}/leasehold"
        pytest.fail(
            f"no leasehold binary at {where}: run `cargo build` in the repo root "
            "(or set LEASEHOLD_BIN)",
            pytrace=False,
        )
    return binary


@pytest.fixture
def make_cluster(
    leasehold_bin: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., Cluster]]:
    """Starts fresh clusters for one test; every process is killed at its end."""
    started: list[Cluster] = []

    def make(n: int = 3, **kwargs: Any) -> Cluster:
        cluster = Cluster(leasehold_bin, tmp_path_factory.mktemp("cluster"), n, **kwargs)
        started.append(cluster)
        cluster.start_all()
        cluster.wait_for_leader()
        return cluster

    yield make
    for cluster in started:
        cluster.shutdown()


@pytest.fixture(scope="module")
def shared_cluster(
    leasehold_bin: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """One healthy 3-node cluster for the tests of a module that do not harm it."""
    cluster = Cluster(leasehold_bin, tmp_path_factory.mktemp("shared"), 3)
    try:
        cluster.start_all()
        cluster.wait_for_leader()
        yield cluster
    finally:
        cluster.shutdown()


@pytest.fixture
def unique(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Lock names unique to the test, so tests sharing a cluster never meet."""
    base = request.node.name.replace("[", "-").replace("]", "")

    def name(suffix: str = "lock") -> str:
        return f"{base}-{suffix}"

    return name
