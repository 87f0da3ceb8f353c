"""Real processes: ``torch.distributed`` worlds on loopback (:mod:`.world`), warm worlds
kept between calls (:mod:`.warm`), the start-method switch (:mod:`.start_method`) and
where every rank and spawned worker starts (:mod:`.rank_entry`, :mod:`.spawned_child`,
:mod:`.worker_exit`).

``from talk_helpers.runtime import run_world`` loads :mod:`.world` on first use; importing
this package alone loads nothing heavy, so that a new rank reaches its entry point before
torch loads.
"""

import importlib

_WORLD = ("RankOutcome", "WorldFailed", "WorldReport", "current_rank", "report_progress",
          "run_ranks", "run_world", "shutdown_warm_worlds", "warm_worlds")
__all__ = list(_WORLD)


def __getattr__(name: str):
    if name in _WORLD:
        return getattr(importlib.import_module("talk_helpers.runtime.world"), name)
    raise AttributeError(f"module 'talk_helpers.runtime' has no attribute {name!r}")
