"""Marks that sort the suite into `make check` (quick), `make unit` and `make soak`.

``distributed``: starts a process group. ``subprocesses``: starts new interpreters (a
subprocess, torchrun, DataLoader workers or ranks under spawn or forkserver, a notebook's
kernel). ``slow``: starts none, but takes seconds of CPU (a sweep over many seeds, ten
million ids, every figure rendered). ``soak``: repeats a run many times. `make check`
leaves out all four; `make unit` all but ``soak``; `make soak` runs only ``soak``.

A test is marked where it is written, or here by module or name, so that test files stay
as they are. A test whose own code starts a subprocess (the names in ``STARTS_PROCESSES``)
or that is parametrized with spawn or forkserver is marked ``subprocesses`` without a word.
"""

import inspect

from hypothesis import settings

# No property test has a deadline: hypothesis's 200 ms per example is a wall-clock bound,
# and on a busy machine one example of a quick test took 285 ms.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")

MODULE_MARKS = {
    "subprocesses": (
        "test_binder_check", "test_demos_torchrun", "test_gpu_job", "test_process_starts",
        "test_production_lessons", "test_start_method", "test_talk_setup",
        "test_worker_exit",
    ),
    "slow": ("test_diagrams",),
}

TEST_MARKS = {
    "soak": (
        # 2 x AUDIT_EXIT_REPEATS runs of the command and of torchrun, half beside busy loops
        "test_the_exit_status_is_the_verdict_run_after_run",
        # 30 four-rank calls in a warm world
        "test_a_rank_whose_fn_returns_at_once_never_cuts_off_a_peer_still_joining",
    ),
    "subprocesses": (
        "test_importing_any_module_changes_no_environment_and_registers_no_hook",
        "test_workers_slow_to_start_read_as_slow_to_start",
        "test_enable_is_explicit_harmless_twice_and_cleans_up_at_exit",
    ),
    "slow": (
        "test_every_configuration_reads_each_sample_once_with_equal_batches_per_rank",
        "test_a_checkpoint_from_any_rank_resumes_on_any_world_size_exactly_once",
        "test_a_resumed_world_can_save_again_and_resume_on_a_third_world_size",
        "test_a_state_saved_after_the_last_batch_resumes_into_the_next_epoch",
        "test_a_worker_state_resumes_each_worker_exactly_where_it_stopped_even_at_its_end",
        "test_the_keyed_permutation_sends_each_position_anywhere_with_equal_chance",
        "test_a_plain_dataloader_of_any_shape_resumes_at_any_batch_exactly",
        "test_simulation_matches_real_dataloader_on_random_configurations",
        "test_hf_policy_matches_real_split_dataset_by_node_for_any_shard_count",
        "test_uniform_shuffles_pass_in_at_least_99_percent_of_seeds_at_every_size_used",
        "test_a_uniform_shuffle_repeated_unchanged_reads_as_one_finding_not_two",
        "test_uniform_shuffles_pass_at_the_readmes_size",
        "test_scores_are_finite_and_identity_is_never_better",
        "test_uniform_draws_pass_at_almost_every_seed",
        "test_ten_million_ids_are_checked_correctly",
        "test_check_agrees_with_a_counter_reference",
        "test_hf_row_yields_each_id_once_with_two_workers",
        "test_datasets_split_is_exactly_once_but_unbalanced",
        "test_a_fast_forward_over_a_freshly_seeded_shuffle_loses_and_repeats_samples",
        "test_shuffle_after_shard_is_caught_by_the_mixing_check_with_the_score_named",
        "test_a_worker_that_sleeps_before_its_first_sample_still_passes",
    ),
}

# Names that, in a test's own code, start a new interpreter.
STARTS_PROCESSES = ("subprocess.", "sys.executable", "torchrun(", "run_cli(", "run_python(",
                    "Popen", "busy(")
NEW_INTERPRETERS = ("spawn", "forkserver")


def _starts_processes(item) -> bool:
    params = getattr(item, "callspec", None)
    if params and any(str(v) in NEW_INTERPRETERS for v in params.params.values()):
        return True
    try:
        source = inspect.getsource(item.function)
    except (OSError, TypeError):
        return False
    return any(word in source for word in STARTS_PROCESSES)


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.module.__name__.rpartition(".")[2] if item.module else ""
        for mark, modules in MODULE_MARKS.items():
            if module in modules:
                item.add_marker(mark)
        for mark, names in TEST_MARKS.items():
            if item.originalname in names:
                item.add_marker(mark)
        if _starts_processes(item):
            item.add_marker("subprocesses")
