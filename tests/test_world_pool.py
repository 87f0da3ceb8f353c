"""Warm worlds: ranks reused across calls give what a fresh world gives, and never
outlive a failure, a hang or the caller."""

import functools
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import psutil
import pytest
import torch
import world_functions as wf
from test_distributed import DescendantRecorder, _live_descendants
from torch.utils.data import DataLoader

from talk_helpers.lessons import world_demos
from talk_helpers.runtime import rank_entry
from talk_helpers.runtime import warm as world_pool
from talk_helpers.runtime import world as d
from talk_helpers.runtime.start_cost import time_limit_s

pytestmark = pytest.mark.distributed

WARM = dict(start_method="fork", reuse=True, timeout_s=60.0)

_kept = []  # loaders a rank function keeps alive after it returns


def keep_workers_alive(rank: int, world_size: int) -> int:
    """Return while two persistent DataLoader workers are still running."""
    loader = DataLoader(list(range(8)), batch_size=2, num_workers=2, persistent_workers=True)
    it = iter(loader)
    next(it)
    _kept.append(it)
    return len(_kept)


def read_sharded(rank: int, world_size: int, shard_sizes=(5, 3, 3, 3),
                 fail: bool = False) -> dict:
    """Every batch of the toy sharded loader, and the pids of its workers."""
    from talk_helpers.lessons.datasets.ddp import make_sharded_loader

    loader = make_sharded_loader(rank, world_size, 0, shard_sizes=list(shard_sizes),
                                 keep_workers=True)
    batches = [b.tolist() for b in loader]
    kept = loader._iterator  # None unless the workers persist
    pids = sorted(w.pid for w in kept._workers) if kept is not None else []
    if fail:
        raise RuntimeError("a failing call")
    return {"batches": batches, "workers": pids}


def die_on_rank(rank: int, world_size: int, bad_rank: int = 1) -> int:
    """The process of ``bad_rank`` exits at once, as a segfault or an OOM kill would."""
    if rank == bad_rank:
        os._exit(3)
    time.sleep(3600)
    return rank


def fail_while_a_peer_works_on(rank: int, world_size: int, ignore_interrupts: bool = False):
    """Rank 0 raises once rank 1 is at work; rank 1 works on without a collective (06's
    hang), or refuses to stop. The barrier sits inside rank 1's try, so that the parent's
    interrupt, which follows rank 0's error, always finds rank 1 where it refuses it."""
    import torch.distributed as dist

    d.report_progress("working")
    if rank == 0:
        dist.barrier()
        raise ValueError("rank 0 failed")
    deadline, at_work = time.monotonic() + 60, False
    while True:
        try:
            if not at_work:
                dist.barrier()
                at_work = True
            while time.monotonic() < deadline:
                time.sleep(0.05)
            return rank
        except BaseException:
            if not ignore_interrupts:
                raise


def objects_collections_walk(rank: int, world_size: int, load_ddp: bool = False
                             ) -> tuple[int, bool]:
    """How many objects a full garbage collection walks here, and whether torch (and with
    ``load_ddp``, DDP's torch._dynamo, loaded through :func:`rank_entry.load_ddp`) is loaded."""
    import gc

    if load_ddp:
        rank_entry.load_ddp()
    return len(gc.get_objects()), all(m in sys.modules for m in
                                      ["torch", *(rank_entry.WARM_IMPORTS if load_ddp else [])])


class _WalkedInWorker(torch.utils.data.IterableDataset):
    """Yields what a full collection walks in the DataLoader worker, and its main module's
    name and file."""

    def __iter__(self):
        import gc

        main = sys.modules["__main__"]
        yield len(gc.get_objects()), main.__name__, getattr(main, "__file__", None)


def walked_in_a_spawned_worker(rank: int, world_size: int) -> tuple[int, str, str | None]:
    import multiprocessing

    loader = DataLoader(_WalkedInWorker(), batch_size=None, num_workers=1,
                        multiprocessing_context=multiprocessing.get_context("spawn"))
    return next(iter(loader))


def main_module_spec(rank: int, world_size: int) -> str | None:
    return getattr(sys.modules["__main__"].__spec__, "name", None)


@pytest.fixture(autouse=True)
def no_warm_worlds():
    world_pool.shutdown_warm_worlds()
    yield
    world_pool.shutdown_warm_worlds()


def test_a_second_call_reuses_the_ranks_and_says_so():
    first = d.run_world(wf.process_id, 2, **WARM)
    second = d.run_world(wf.process_id, 2, **WARM)
    assert first.ok and second.ok
    assert second.results == first.results
    assert (first.warm, second.warm) == (False, True)
    assert (first.how, second.how) == ("fork, fresh world", "fork, warm world")
    assert d.warm_worlds() == [{"start_method": "fork", "world_size": 2, "calls": 2,
                                "alive": True}]


def test_a_warm_spawn_world_gives_the_same_results_as_a_fresh_one():
    fns = (world_demos.all_reduce_sum, world_demos.rank_and_world,
           functools.partial(wf.torch_draws, seed=7))

    def outcome(reuse):
        return [d.run_world(fn, 2, start_method="spawn", reuse=reuse,
                            timeout_s=time_limit_s(60, interpreters=2)).results
                for fn in fns]

    fresh = outcome(False)
    warm_first = outcome(True)
    warm_again = outcome(True)
    assert fresh == warm_first == warm_again
    env = [d.run_world(wf.rank_env, 2, start_method="spawn", reuse=True).results
           for _ in range(2)]
    assert [e["RANK"] for e in env[1]] == ["0", "1"]
    assert env[0][0]["MASTER_PORT"] != env[1][0]["MASTER_PORT"]  # a new group per call
    assert d.warm_worlds()[0]["start_method"] == "spawn"


def test_unseeded_draws_in_a_warm_world_are_new_on_every_call_as_in_new_processes():
    draws = [d.run_world(wf.torch_draws, 2, **WARM).results for _ in range(3)]
    flat = [tuple(x) for call in draws for x in call]
    assert len(set(flat)) == len(flat)


def test_workers_a_call_leaves_running_are_stopped_before_it_returns():
    with DescendantRecorder() as recorder:
        report = d.run_world(keep_workers_alive, 2, **WARM)
    assert report.ok
    ranks = {p.pid for p in world_pool._pool[("fork", 2)].handles.values()}
    workers = [p for p in recorder.seen.values() if p.pid not in ranks]
    assert len(workers) >= 4  # two ranks, two workers each
    assert [p for p in recorder.survivors() if p.pid not in ranks] == []


def test_a_hang_stops_the_warm_world_and_leaves_no_process():
    before = _live_descendants()
    assert d.run_world(world_demos.all_reduce_sum, 2, **WARM).ok
    with DescendantRecorder() as recorder:
        report = d.run_world(wf.hang_with_workers, 2, args=(2,), start_method="fork",
                             reuse=True, timeout_s=4.0)
    assert [r.status for r in report.ranks] == ["timeout", "timeout"]
    assert report.warm
    assert recorder.survivors() == []
    assert d.warm_worlds() == []
    assert _live_descendants() == before
    assert d.run_world(world_demos.all_reduce_sum, 2, **WARM).results == [3.0, 3.0]


def test_a_rank_that_dies_stops_the_warm_world_and_the_next_call_starts_a_new_one():
    before = _live_descendants()
    first = d.run_world(wf.process_id, 2, **WARM).results
    report = d.run_world(die_on_rank, 2, **WARM)
    assert report.ranks[1].error.startswith("ProcessDied: the rank process exited with code 3")
    assert report.ranks[0].status == "stopped"
    assert d.warm_worlds() == []
    assert _live_descendants() == before
    again = d.run_world(wf.process_id, 2, **WARM)
    assert again.ok and not again.warm and set(again.results).isdisjoint(first)


def test_ranks_that_raise_and_come_back_clean_are_kept_and_give_fresh_results():
    first = d.run_world(wf.process_id, 2, **WARM).results
    report = d.run_world(wf.fail_on_rank, 2, args=(1, "boom"), **WARM)
    assert report.ranks[1].error == "ValueError: boom"
    assert report.warm
    again = d.run_world(wf.process_id, 2, **WARM)
    assert again.warm and again.results == first
    fresh = d.run_world(world_demos.all_reduce_sum, 2, start_method="fork", reuse=False)
    assert d.run_world(world_demos.all_reduce_sum, 2, **WARM).results == fresh.results


def test_a_collective_timeout_reads_the_same_in_a_warm_world():
    fresh = d.run_world(wf.hang_on_rank, 2, args=(0, 3), collective_timeout_s=2.0,
                        start_method="fork", reuse=False)
    d.run_world(world_demos.all_reduce_sum, 2, **WARM)
    warm = d.run_world(wf.hang_on_rank, 2, args=(0, 3), collective_timeout_s=2.0, **WARM)
    assert warm.warm
    assert repr(warm).splitlines()[1:] == repr(fresh).splitlines()[1:]


def test_warm_ranks_are_capped_and_shutdown_leaves_no_process(monkeypatch):
    monkeypatch.setattr(world_pool, "MAX_WARM_RANKS", 3)
    before = _live_descendants()
    d.run_world(world_demos.rank_and_world, 2, **WARM)
    d.run_world(world_demos.rank_and_world, 3, **WARM)
    assert [w["world_size"] for w in d.warm_worlds()] == [3]
    assert d.shutdown_warm_worlds() == 1
    assert _live_descendants() == before


def test_reuse_defaults_to_spawn_and_forkserver_and_follows_the_variable(monkeypatch):
    monkeypatch.delenv("TALK_WARM_WORLD", raising=False)
    assert [d._resolve_reuse(None, m) for m in ("fork", "forkserver", "spawn")] == \
        [False, True, True]
    monkeypatch.setenv("TALK_WARM_WORLD", "0")
    assert d._resolve_reuse(None, "spawn") is False
    monkeypatch.setenv("TALK_WARM_WORLD", "1")
    assert d._resolve_reuse(None, "fork") is True
    monkeypatch.setenv("TALK_WARM_WORLD", "yes")
    with pytest.raises(ValueError, match="TALK_WARM_WORLD='yes' is not one of 0, 1"):
        d.run_world(world_demos.rank_and_world, 1, start_method="fork")


def test_a_bad_reuse_argument_is_rejected():
    with pytest.raises(TypeError, match="reuse must be True, False or None"):
        d.run_world(world_demos.rank_and_world, 1, start_method="fork", reuse="yes")


def test_warm_ranks_exit_when_the_caller_is_killed():
    code = ("import sys\n"
            f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
            "import world_functions as wf\n"
            "from talk_helpers.runtime import world as d\n"
            "r = d.run_world(wf.process_id, 2, start_method='spawn', reuse=True, timeout_s=120)\n"
            "print(*r.results, flush=True)\n"
            "import time; time.sleep(3600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(x) for x in proc.stdout.readline().split()]
        assert len(pids) == 2
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(psutil.pid_exists(p) and
                                              psutil.Process(p).status() != "zombie"
                                              for p in pids):
        time.sleep(0.2)
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"
                   for p in pids)


def test_an_interrupt_sent_to_idle_warm_ranks_leaves_the_world_warm():
    first = d.run_world(wf.process_id, 2, **WARM)
    for pid in first.results:
        os.kill(pid, signal.SIGINT)
    time.sleep(0.3)
    again = d.run_world(wf.process_id, 2, **WARM)
    assert again.ok and again.warm and again.results == first.results


def test_a_warm_rank_keeps_the_sharded_loader_and_its_workers_for_the_same_recipe():
    fresh = d.run_world(read_sharded, 2, start_method="fork", reuse=False).results
    first, again = (d.run_world(read_sharded, 2, **WARM).results for _ in range(2))
    assert [r["batches"] for r in first] == [r["batches"] for r in fresh]
    assert again == first  # the same batches, from the same worker processes
    assert [len(r["workers"]) for r in first] == [2, 2]
    ranks = {p.pid for p in world_pool._pool[("fork", 2)].handles.values()}
    kept = {pid for r in again for pid in r["workers"]}
    assert _live_descendants() >= ranks | kept


def test_another_recipe_or_a_failing_call_stops_the_kept_workers():
    first = d.run_world(read_sharded, 2, **WARM).results
    other = d.run_world(read_sharded, 2, args=((4, 4, 4, 4),), **WARM).results
    live = _live_descendants()
    assert not {pid for r in first for pid in r["workers"]} & live
    assert {pid for r in other for pid in r["workers"]} <= live
    failed = d.run_world(read_sharded, 2, args=((4, 4, 4, 4), True), **WARM)
    assert not failed.ok
    live = _live_descendants()
    assert not {pid for r in other for pid in r["workers"]} & live
    ranks = {p.pid for p in world_pool._pool[("fork", 2)].handles.values()}
    assert live - ranks == set()
    assert d.shutdown_warm_worlds() == 1
    assert not _live_descendants() & live


def own_forkserver(rank: int, world_size: int) -> int | None:
    """Read a loader with one worker, then return the pid of this rank's forkserver."""
    from multiprocessing import forkserver

    assert [b.tolist() for b in DataLoader(list(range(4)), batch_size=2, num_workers=1)] \
        == [[0, 1], [2, 3]]
    return forkserver._forkserver._forkserver_pid


def test_a_warm_forkserver_rank_keeps_its_own_server_and_stops_it_with_the_world():
    before = _live_descendants()
    opts = dict(start_method="forkserver", reuse=True,
                timeout_s=time_limit_s(60, interpreters=4))  # a server, each rank's server
    first = d.run_world(own_forkserver, 2, **opts).results
    again = d.run_world(own_forkserver, 2, **opts)
    assert again.warm and None not in first and again.results == first
    assert set(first) <= _live_descendants()  # the servers, not the workers
    assert len(_live_descendants() - before) == 4  # two ranks, a server each
    assert d.shutdown_warm_worlds() == 1
    assert _live_descendants() == before


def test_an_audit_in_a_warm_world_builds_its_own_loaders_and_sees_every_worker(monkeypatch):
    from talk_helpers.audit import audit
    from talk_helpers.lessons.datasets.ddp import make_sharded_loader

    monkeypatch.setenv("TALK_WARM_WORLD", "1")
    kept = d.run_world(read_sharded, 2, **WARM).results
    report = audit(functools.partial(make_sharded_loader, shard_sizes=[5, 3, 3, 3]),
                   world_size=2, epochs=1, start_method="fork")
    assert report.checks[0].worker_samples == [[5, 3], [3, 3]]
    assert d.run_world(read_sharded, 2, **WARM).results == kept  # still kept


def test_a_rank_still_working_when_its_peer_failed_is_stopped_and_the_world_stays_warm():
    before = _live_descendants()
    first = d.run_world(wf.process_id, 2, **WARM).results
    report = d.run_world(fail_while_a_peer_works_on, 2, **WARM)
    assert [r.status for r in report.ranks] == ["error", "stopped"]
    assert report.ranks[1].last_progress == "working"
    assert report.ranks[1].error is None
    assert "stopped because another rank failed" in repr(report)
    assert report.elapsed_s < 10  # not the 60 s rank 1 meant to work
    again = d.run_world(wf.process_id, 2, **WARM)
    assert again.ok and again.warm and again.results == first
    world_pool.shutdown_warm_worlds()
    assert _live_descendants() == before


def test_a_rank_that_will_not_stop_is_killed_and_the_next_call_starts_a_new_world():
    before = _live_descendants()
    first = d.run_world(wf.process_id, 2, **WARM).results
    report = d.run_world(fail_while_a_peer_works_on, 2, args=(True,), **WARM)
    assert [r.status for r in report.ranks] == ["error", "stopped"]
    assert d.warm_worlds() == []
    assert _live_descendants() == before
    again = d.run_world(wf.process_id, 2, **WARM)
    assert again.ok and not again.warm and set(again.results).isdisjoint(first)


def test_an_interrupt_between_calls_is_ignored_by_a_warm_rank():
    first = d.run_world(wf.process_id, 2, **WARM).results
    os.kill(first[1], signal.SIGUSR1)
    time.sleep(0.2)
    again = d.run_world(wf.process_id, 2, **WARM)
    assert again.ok and again.warm and again.results == first


@pytest.mark.parametrize("reuse", [False, True], ids=["fresh", "warm"])
def test_collections_in_a_rank_skip_the_code_it_loaded(reuse):
    """torch, the helpers and the module of fn live as long as the rank: the clean-up after
    every call and Python's own collection at exit need not walk their objects."""
    for call in range(2):  # in a warm world the second call runs in the same ranks
        walked, loaded = d.run_ranks(objects_collections_walk, 1, start_method="spawn",
                                     reuse=reuse)[0]
        assert loaded and walked < 20_000, (call, walked)


def test_what_ddp_loads_in_a_rank_through_load_ddp_is_skipped_by_collections_too():
    walked, loaded = d.run_ranks(objects_collections_walk, 1, args=(True,),
                                 start_method="spawn", reuse=False)[0]
    assert loaded and walked < 20_000, walked


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_the_workers_a_new_interpreter_rank_spawns_load_torch_unwalked_too(method,
                                                                          monkeypatch):
    # a notebook kernel's main module: no file, no spec, nothing for a child to import
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
    walked, main, _ = d.run_ranks(walked_in_a_spawned_worker, 1, start_method=method,
                                  reuse=False)[0]
    assert main == "__mp_main__"  # talk_helpers.runtime.spawned_child ran first
    assert walked < 20_000, walked


def test_the_workers_of_a_rank_started_from_a_script_get_that_script(tmp_path,
                                                                      monkeypatch):
    script = tmp_path / "train.py"
    script.write_text("MARK = 1\n")
    main = types.ModuleType("__main__")
    main.__file__ = str(script)
    monkeypatch.setitem(sys.modules, "__main__", main)
    _, name, file = d.run_ranks(walked_in_a_spawned_worker, 1, start_method="spawn",
                                reuse=False, timeout_s=time_limit_s(60, interpreters=2))[0]
    assert (name, file) == ("__mp_main__", str(script))


def test_a_forked_rank_leaves_the_main_module_it_shares_with_its_parent_alone(monkeypatch):
    # a notebook's namespace, which a forked rank shares: no spec, and it must keep none
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
    assert d.run_ranks(main_module_spec, 1, start_method="fork", reuse=False) == [None]


@pytest.mark.parametrize("reuse", [False, True], ids=["fresh", "warm"])
def test_a_spawned_rank_that_cannot_import_fn_says_so_instead_of_dying(reuse, monkeypatch):
    module = types.ModuleType("only_in_the_parent")
    exec("def fn(rank, world_size):\n    return rank\n", module.__dict__)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    report = d.run_world(module.fn, 1, start_method="spawn", reuse=reuse,
                         timeout_s=time_limit_s(30, interpreters=1))
    assert report.ranks[0].status == "error"
    assert report.ranks[0].error == "ModuleNotFoundError: No module named 'only_in_the_parent'"
    assert report.ranks[0].last_progress == "(set-up: importing)"
