"""Where ShardedIterableDataset's rank comes from under each launcher: torchrun, SLURM's
srun and batch scripts, Open MPI's mpirun, launchers inside launchers, and the errors when
the sources cannot all be right."""

import multiprocessing as mp
import os

import pytest
import torch
from sharded_iterable_helpers import ids

from talk_helpers.reference.sharded_iterable import (
    LAUNCHERS,
    ShardedIterableDataset,
    resolve_rank_and_world,
)

EVERY_VARIABLE = sorted({name for _, rank, sizes in LAUNCHERS for name in (rank, *sizes)}) + [
    "SLURM_STEP_ID", "LOCAL_RANK"]

ENVIRONMENTS = {
    "nothing": ({}, (0, 1)),
    "torchrun": ({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}, (3, 4)),
    "srun": ({"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0",
              "LOCAL_RANK": "1"}, (1, 2)),
    # What the report saw: a task of srun, no step id in the environment.
    "srun, task 1, no step id": ({"SLURM_PROCID": "1", "SLURM_NTASKS": "2"}, (1, 2)),
    # sbatch -n 4 sets SLURM_PROCID=0 and SLURM_NTASKS=4 in the batch script itself,
    # which is one process: python run there reads everything.
    "sbatch script": ({"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}, (0, 1)),
    "mpirun": ({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8"}, (5, 8)),
    "mpirun in a batch script": ({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8",
                                  "SLURM_PROCID": "0", "SLURM_NTASKS": "8"}, (5, 8)),
    "mpirun's daemon started by srun": ({"OMPI_COMM_WORLD_RANK": "5",
                                         "OMPI_COMM_WORLD_SIZE": "8", "SLURM_PROCID": "1",
                                         "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0"}, (5, 8)),
    "srun --mpi=pmix": ({"OMPI_COMM_WORLD_RANK": "6", "OMPI_COMM_WORLD_SIZE": "8",
                         "SLURM_PROCID": "6", "SLURM_NTASKS": "8", "SLURM_STEP_ID": "0"},
                        (6, 8)),
    "torchrun inside srun": ({"RANK": "5", "WORLD_SIZE": "8", "SLURM_PROCID": "1",
                              "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0"}, (5, 8)),
    "a world of one named": ({"WORLD_SIZE": "1"}, (0, 1)),
    "mpiexec of MPICH or Intel MPI": ({"PMI_RANK": "3", "PMI_SIZE": "4"}, (3, 4)),
    # Intel MPI's mpirun in a batch script starts one proxy per node with srun.
    "Intel MPI's mpirun under SLURM": ({"PMI_RANK": "5", "PMI_SIZE": "8", "SLURM_PROCID": "1",
                                        "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0"}, (5, 8)),
    "srun --mpi=pmix, no Open MPI": ({"PMIX_RANK": "2", "SLURM_PROCID": "2",
                                      "SLURM_NTASKS": "4", "SLURM_STEP_ID": "0"}, (2, 4)),
    "Open MPI 5's mpirun -n 8 in a batch script of 16": (
        {"PMIX_RANK": "5", "OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8",
         "SLURM_PROCID": "0", "SLURM_NTASKS": "16"}, (5, 8)),
}

REFUSALS = {
    "WORLD_SIZE without RANK": ({"WORLD_SIZE": "4"}, "this rank cannot be known"),
    "RANK without WORLD_SIZE": ({"RANK": "2"}, "this rank cannot be known"),
    "Open MPI's size without its rank": ({"OMPI_COMM_WORLD_SIZE": "2"},
                                         "OMPI_COMM_WORLD_RANK=None"),
    "srun -n 4 around worlds of one": (
        {"RANK": "0", "WORLD_SIZE": "1", "SLURM_PROCID": "3", "SLURM_NTASKS": "4",
         "SLURM_STEP_ID": "0"},
        r"torchrun \(RANK=0, WORLD_SIZE=1\) says rank 0 of 1, SLURM \(SLURM_PROCID=3, "
        r"SLURM_NTASKS=4\) says rank 3 of 4: the 4 processes started by the outer one"),
    "a rank that is not a number": ({"RANK": "one", "WORLD_SIZE": "2"},
                                    "RANK must be an int, got 'one'"),
    "PMI_SIZE without PMI_RANK": ({"PMI_SIZE": "4"}, "PMI_RANK=None, PMI_SIZE=4"),
    "srun -n 4 around mpiexec worlds of one": (
        {"PMI_RANK": "0", "PMI_SIZE": "1", "SLURM_PROCID": "3", "SLURM_NTASKS": "4",
         "SLURM_STEP_ID": "0"}, r"MPICH or Intel MPI \(PMI_RANK=0, PMI_SIZE=1\) says rank 0 "
                                r"of 1, SLURM .* says rank 3 of 4"),
}


@pytest.fixture
def environment(monkeypatch):
    for name in EVERY_VARIABLE:
        monkeypatch.delenv(name, raising=False)

    def set_to(values):
        for name, value in values.items():
            monkeypatch.setenv(name, value)

    return set_to


@pytest.mark.parametrize("case", list(ENVIRONMENTS))
def test_the_rank_comes_from_whatever_launched_the_process(environment, case):
    variables, expected = ENVIRONMENTS[case]
    environment(variables)
    assert resolve_rank_and_world() == expected
    ds = ShardedIterableDataset(10)
    assert (ds.rank, ds.world_size) == expected


@pytest.mark.parametrize("case", list(REFUSALS))
def test_sources_that_cannot_all_be_right_are_refused_naming_them(environment, case):
    variables, words = REFUSALS[case]
    environment(variables)
    with pytest.raises(ValueError, match=words):
        ShardedIterableDataset(10)
    assert ShardedIterableDataset(10, rank=1, world_size=3).rank == 1, "arguments win"


def test_a_process_group_must_agree_with_the_launcher(environment, tmp_path):
    environment({"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_STEP_ID": "0"})
    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path}/store",
                                         rank=0, world_size=1)
    try:
        assert resolve_rank_and_world() == (0, 1)
        environment({"SLURM_PROCID": "1", "SLURM_NTASKS": "2"})
        with pytest.raises(ValueError, match=r"the process group says rank 0 of 1, SLURM "
                                             r"\(SLURM_PROCID=1, SLURM_NTASKS=2\) says rank 1"):
            resolve_rank_and_world()
        environment({"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "WORLD_SIZE": "4"})
        assert resolve_rank_and_world() == (0, 1), "the group knows the rank torchrun's lacks"
    finally:
        torch.distributed.destroy_process_group()


def _read_as_an_srun_task(task: int, queue) -> None:
    """One process of ``srun -n 2``: builds the dataset before any process group."""
    os.environ.update(SLURM_PROCID=str(task), SLURM_NTASKS="2", SLURM_STEP_ID="0")
    for name in ("RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"):
        os.environ.pop(name, None)
    ds = ShardedIterableDataset(41, batch_size=4, seed=3)
    ds.set_epoch(1)
    queue.put((task, ds.rank, ds.world_size, ids(ds)))


def test_two_srun_tasks_read_each_sample_once_between_them():
    context = mp.get_context("fork")
    queue = context.Queue()
    tasks = [context.Process(target=_read_as_an_srun_task, args=(t, queue)) for t in (0, 1)]
    for process in tasks:
        process.start()
    results = sorted(queue.get(timeout=120) for _ in tasks)
    for process in tasks:
        process.join(timeout=60)
    assert [(rank, world) for _, rank, world, _ in results] == [(0, 2), (1, 2)]
    read = results[0][3] + results[1][3]
    assert len(read) == len(set(read)) == 40, "one sample dropped, the others once"


def _a_process_of_a_task_per_node(rank: int, world: int, tasks: int, store: str, queue) -> None:
    """One of the processes that a task of ``srun -n tasks`` spawned (one per GPU), in a
    group of ``world``, built after init_process_group."""
    os.environ.update(SLURM_PROCID=str(rank * tasks // world), SLURM_NTASKS=str(tasks),
                      SLURM_STEP_ID="0")
    for name in ("RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                 "PMI_RANK", "PMI_SIZE", "PMIX_RANK"):
        os.environ.pop(name, None)
    torch.distributed.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                                         world_size=world)
    try:
        ds = ShardedIterableDataset(41, batch_size=4, seed=3)
        ds.set_epoch(1)
        queue.put((rank, ds.rank, ds.world_size, ids(ds)))
    except ValueError as exc:
        queue.put((rank, None, None, str(exc)))
    finally:
        torch.distributed.destroy_process_group()


def spawned_worlds(world: int, tasks: int, tmp_path) -> list:
    context = mp.get_context("fork")
    queue = context.Queue()
    processes = [context.Process(target=_a_process_of_a_task_per_node,
                                 args=(r, world, tasks, str(tmp_path / "store"), queue))
                 for r in range(world)]
    for process in processes:
        process.start()
    results = sorted(queue.get(timeout=120) for _ in processes)
    for process in processes:
        process.join(timeout=60)
    return results


def test_a_group_of_4_spawned_by_2_srun_tasks_reads_each_sample_once(tmp_path):
    results = spawned_worlds(4, 2, tmp_path)
    assert [(rank, world) for _, rank, world, _ in results] == [(r, 4) for r in range(4)]
    read = [i for *_, part in results for i in part]
    assert len(read) == len(set(read)) == 40, "one sample dropped, the others once"


def test_a_group_smaller_than_the_launchers_world_is_refused_naming_both(tmp_path):
    results = spawned_worlds(2, 4, tmp_path)
    assert all(rank is None for _, rank, _, _ in results)
    assert "the process group says rank 0 of 2, SLURM" in results[0][3]
