import os

from busy_machine import busy, loops_to_add


def test_a_quiet_machine_gets_every_loop_and_a_busy_one_only_what_it_lacks():
    assert loops_to_add(2, 0.3) == 2
    assert loops_to_add(2, 1.2) == 1
    assert loops_to_add(2, 9.5) == 0


def test_the_loops_started_are_gone_after_the_block():
    with busy(int(os.getloadavg()[0]) + 2) as pids:
        assert pids, "a load under its loops leaves loops to add"
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                assert stat.read().split()[2] == "Z", f"loop {pid} still runs"
        except FileNotFoundError:
            pass
