"""A dataset a notebook teaches in a cell and the package's copy that tests, benchmarks and
later notebooks use read the same ids, rank by rank and worker by worker: an edit to one
that the other does not follow fails here."""

import json
import types
from pathlib import Path

import pytest

from talk_helpers.lessons.datasets import ddp

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def cell_names(notebook: str, defines: str) -> dict:
    """What the notebook's code cell that defines ``defines`` binds, run here as written
    (without its ``%%importable`` line)."""
    cells = json.loads((NOTEBOOKS / notebook).read_text())["cells"]
    (source,) = ["".join(c["source"]) for c in cells
                 if c["cell_type"] == "code" and f"\n{defines}" in "".join(c["source"])]
    namespace: dict = {}
    exec(source.replace("%%importable\n", "", 1), namespace)
    return namespace


def ids(dataset, module_globals: dict, worker: int, workers: int) -> list[int]:
    """The ids ``dataset`` yields as worker ``worker`` of ``workers``."""
    info = types.SimpleNamespace(id=worker, num_workers=workers)
    saved = module_globals["get_worker_info"]
    module_globals["get_worker_info"] = lambda: info
    try:
        return [int(i) for i in dataset]
    finally:
        module_globals["get_worker_info"] = saved


@pytest.mark.parametrize("shard_sizes", [[4, 3, 4, 5], [2, 2], [5, 1, 1, 1, 1, 6]])
@pytest.mark.parametrize("world_size,workers", [(1, 1), (2, 2), (3, 2), (2, 3)])
def test_notebook_06s_sharded_ids_read_what_the_packages_do(shard_sizes, world_size, workers):
    cell = cell_names("06_uneven_batches_and_hangs.ipynb", "class ShardedIds(")
    for rank in range(world_size):
        for worker in range(workers):
            taught = ids(cell["ShardedIds"](shard_sizes, rank, world_size), cell, worker,
                         workers)
            kept = ids(ddp.ShardedIds(shard_sizes, rank, world_size), vars(ddp), worker,
                       workers)
            assert taught == kept, (rank, worker)


def test_notebook_06s_loader_factory_takes_the_packages_settings():
    cell = cell_names("06_uneven_batches_and_hangs.ipynb", "def make_sharded_loader(")
    settings = dict(shard_sizes=[4, 3], workers=0, batch_size=3, drop_last=True)
    taught = cell["make_sharded_loader"](0, 1, 0, **settings)
    kept = ddp.make_sharded_loader(0, 1, 0, **settings)
    assert [b.tolist() for b in taught] == [b.tolist() for b in kept]


@pytest.mark.parametrize("world_size,workers", [(2, 2), (2, 3), (3, 2)])
def test_notebook_05s_two_modulo_ids_are_the_packages_nested_modulo(world_size, workers):
    cell = cell_names("05_ddp_sharding.ipynb", "class TwoModuloIds(")
    for rank in range(world_size):
        for worker in range(workers):
            taught = ids(cell["TwoModuloIds"](20, rank, world_size), cell, worker, workers)
            kept = ids(ddp.ShardedIds([1] * 20, rank, world_size, "nested_modulo"),
                       vars(ddp), worker, workers)
            assert taught == kept, (rank, worker)
