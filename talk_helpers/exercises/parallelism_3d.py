"""Graders of notebook 07 (data under 3D parallelism)."""

from __future__ import annotations

from collections.abc import Callable

from talk_helpers.exercises import Grade, attempt, choice, is_stub, not_tried, not_yet, passes

__all__ = ["grade_consumed", "grade_megatron_readers", "grade_mystery_dp"]

RESUME_CASES = ((3, 2, 2, 2), (5, 1, 4, 3), (2, 4, 1, 4))  # steps, mbs, micro-batches, dp
DIAGNOSES = ("every DP rank reads the same samples", "half the samples are never read",
             "some samples are read twice", "correct")


def grade_consumed(my_consumed: Callable) -> Grade:
    """07.1: ``my_consumed(steps, micro_batch_size, micro_batches_per_step, dp)`` is the
    offset after which a resumed Megatron sampler continues the uninterrupted run."""
    if is_stub(my_consumed):
        return not_tried("07.1", "write my_consumed and run its cell")

    def run() -> Grade:
        from talk_helpers.lessons.megatron_data import MegatronPretrainingSampler, sampler_steps

        for steps, mbs, n_micro, dp in RESUME_CASES:
            kw = dict(total_samples=400, micro_batch_size=mbs, dp=dp,
                      micro_batches_per_step=n_micro)
            full = sampler_steps(MegatronPretrainingSampler, consumed_samples=0,
                                 steps=steps + 2, **kw)
            offset = my_consumed(steps, mbs, n_micro, dp)
            resumed = sampler_steps(MegatronPretrainingSampler, consumed_samples=offset,
                                    steps=2, **kw)
            if resumed != full[steps:]:
                return not_yet("07.1", f"after {steps} steps of {n_micro} micro-batches of "
                               f"{mbs} on {dp} DP ranks, the run resumed from {offset!r} "
                               "differs from the uninterrupted one",
                               "consumed_samples counts samples, over all DP ranks")
        return passes("07.1", "every resumed run continues the uninterrupted one")

    return attempt("07.1", run)


def grade_megatron_readers(my_megatron_readers: Callable, measured_world) -> Grade:
    """07.2: the global ranks that read in Megatron-LM style, for the layout of the world
    whose per-rank results are ``measured_world`` and for other layouts."""
    if is_stub(my_megatron_readers):
        return not_tried("07.2", "write my_megatron_readers and run its cell")

    def run() -> Grade:
        from talk_helpers.lessons.feeding_3d import FeedConfig, reads_data
        from talk_helpers.model.parallel_groups import layout

        measured = sorted(r["rank"] for r in measured_world if r["bytes_read"] > 0)
        if list(my_megatron_readers(layout(8, 2, 2, 2))) != measured:
            return not_yet("07.2", f"in the world above, ranks {measured} read",
                           "look at tp_rank and pp_rank in grid.coords(rank)")
        for world, tp, dp, pp in ((8, 2, 1, 4), (12, 3, 2, 2), (6, 1, 6, 1)):
            cfg = FeedConfig("unused", tp=tp, dp=dp, pp=pp)
            truth = [r for r in range(world) if reads_data(r, world, cfg)]
            if list(my_megatron_readers(layout(world, tp, dp, pp))) != truth:
                return not_yet("07.2", f"right for the world above, not for tp={tp}, dp={dp}, "
                               f"pp={pp}", "with pp=1 the first stage is also the last")
        return passes("07.2", "TP rank 0 of the first and last stages, on every layout")

    return attempt("07.2", run)


def grade_mystery_dp(my_diagnosis) -> Grade:
    """07.3: what is wrong with ``make_mystery_dp_loader``?"""
    return choice("07.3", my_diagnosis, options=DIAGNOSES,
                  correct="half the samples are never read",
                  hints={d: "look at 'unique' and 'missing' in the report, and at which ids "
                            "are missing" for d in DIAGNOSES},
                  explain="its sampler spans TP × DP replicas, half of which never run")
