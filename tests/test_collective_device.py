"""collective_device: CPU tensors for a gloo group, the accelerator for a group with no CPU
backend (NCCL, or ``"cuda:gloo"`` standing in for it on a machine with no GPU)."""

import pytest
import world_functions as wf

from talk_helpers.runtime import run_ranks
from talk_helpers.runtime.devices import collective_device

pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module")
def seen():
    return run_ranks(wf.collectives_by_group_device, 2, start_method="fork", timeout_s=120)


def test_a_gloo_group_takes_its_collectives_on_the_cpu(seen):
    assert [r["world"] for r in seen] == ["cpu", "cpu"]
    assert [r["world_total"] for r in seen] == [2.0, 2.0]
    assert all(r["world_has_cpu"] for r in seen)


def test_a_group_without_a_cpu_backend_takes_them_on_its_accelerator(seen):
    assert [r["gpu_like"] for r in seen] == ["cuda", "cuda"]
    assert not any(r["gpu_like_has_cpu"] for r in seen)


def test_a_cpu_tensor_in_a_group_without_a_cpu_backend_fails_with_nccls_message(seen):
    for r in seen:
        assert "No backend type associated with device type cpu" in r["cpu_in_gpu_like"]


def test_outside_a_process_group_it_says_what_to_call_first():
    with pytest.raises(RuntimeError, match="init_process_group"):
        collective_device()
