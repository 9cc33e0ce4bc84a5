"""Device emulation by pacing (``runtime.pacing``): a stage's work stretched to its CPU share."""

from __future__ import annotations

import time

import pytest

from hetsplit.errors import RuntimeFailure
from hetsplit.runtime.pacing import Pace, Pacer, paces_of, read_pace


def busy(cpu_s: float) -> None:
    """Burn ``cpu_s`` of this thread's CPU."""
    end = time.thread_time() + cpu_s
    while time.thread_time() < end:
        pass


@pytest.mark.parametrize("share", [0.25, 0.5])
def test_paced_work_takes_its_cpu_over_its_share_and_the_waits_are_not_stretched(share):
    pacer = Pacer(Pace(1.0, share))
    pacer.start(first_step=False)
    busy(0.02)
    t0 = time.thread_time()
    time.sleep(0.03)                # a wait (for a peer): no CPU, nothing to stretch
    busy(0.02)
    w0 = time.perf_counter()
    pacer.pause()
    slept = time.perf_counter() - w0
    cpu = time.thread_time() - t0 + 0.02
    asked = pacer.slept_s + pacer.owed_s     # what it meant to sleep: a late wake-up (a loaded machine) is owed back
    assert asked == pytest.approx(cpu * (1 / share - 1), rel=0.05)
    assert slept >= pacer.slept_s * 0.99 and pacer.owed_s <= 0.0
    assert asked < 0.04 * (1 / share - 1) * 1.2              # the 30 ms wait was not stretched


def test_the_prompt_step_is_paced_at_its_own_share_and_a_whole_core_not_at_all():
    pacer = Pacer(Pace(0.5, 1.0))
    pacer.start(first_step=True)
    busy(0.01)
    pacer.pause()
    asked = pacer.slept_s + pacer.owed_s     # a late wake-up is owed back (negative)
    assert asked == pytest.approx(0.01, rel=0.1) and pacer.slept_s >= 0.009
    slept = pacer.slept_s
    pacer.start(first_step=False)
    busy(0.01)
    pacer.pause()
    assert pacer.slept_s == slept and pacer.slept_s + pacer.owed_s == pytest.approx(asked)   # decode at 1.0: no sleep
    idle = Pacer(None)
    idle.start(first_step=True)
    busy(0.005)
    idle.pause()
    assert idle.slept_s == 0.0


def test_paces_go_to_the_ranks_below_a_whole_core_with_the_prompts_share_or_the_decodes():
    ranks = {0: "fast", 1: "slow", 2: "gpu"}
    assert paces_of({"fast": 1.0, "slow": 0.4}, None, ranks) == {"1": [0.4, 0.4]}
    assert paces_of({"fast": 1.0, "slow": 0.4}, {"fast": 0.7, "slow": 0.2}, ranks) == {"0": [0.7, 1.0],
                                                                                    "1": [0.2, 0.4]}


@pytest.mark.parametrize("raw", [[0.5], [0.0, 0.5], [0.5, 1.5], ["0.5", 0.5], [float("nan"), 0.5], "fast", {"a": 1}])
def test_a_pace_out_of_range_or_of_the_wrong_shape_is_refused(raw):
    with pytest.raises(RuntimeFailure, match="pacing"):
        read_pace({"3": raw}, 3)


def test_a_rank_without_a_pace_runs_at_full_speed():
    assert read_pace({"1": [0.5, 0.25]}, 2) is None
    assert read_pace({"1": [0.5, 0.25]}, 1) == Pace(0.5, 0.25)


def test_pauses_too_short_to_sleep_are_owed_and_a_steps_last_pause_settles_them():
    pacer = Pacer(Pace(1.0, 0.5))
    pacer.start(first_step=False)
    for _ in range(4):                       # 0.3 ms owed per pause: under MIN_SLEEP_S, none sleeps
        busy(0.0003)
        pacer.pause()
    assert pacer.slept_s == 0.0 and 0.0011 < pacer.owed_s < 0.0016
    busy(0.0003)
    pacer.pause(settle=True)
    assert pacer.slept_s >= 0.0014 and pacer.owed_s <= 0.0          # slept what it owed, a late wake-up owed back
    assert 0.0014 < pacer.slept_s + pacer.owed_s < 0.0021


def test_over_many_paces_the_sleeps_add_up_to_the_share():
    pacer = Pacer(Pace(1.0, 0.25))
    w0, c0 = time.perf_counter(), time.thread_time()
    for _ in range(40):
        pacer.start(first_step=False)
        for _ in range(3):
            busy(0.0004)
            pacer.pause()
        pacer.pause(settle=True)
    cpu, wall = time.thread_time() - c0, time.perf_counter() - w0
    busy_s = 40 * 3 * 0.0004                 # the CPU paced (at least), of ``cpu`` in all (pauses' own work too)
    assert 3 * busy_s <= pacer.slept_s + pacer.owed_s <= 3 * cpu      # owed: 1/0.25 - 1 = 3 times the CPU
    assert pacer.owed_s < 0.0001 and wall >= pacer.slept_s + busy_s


def test_a_rank_alone_in_its_stage_does_not_pause_at_its_reduces_but_once_at_its_steps_end():
    """Its reduces tell nobody anything: paused at each (60 per SmolLM2 step), a stage at a small share
    slept after almost every half block and woke slower each time; it owes them all at the step's end."""
    from types import SimpleNamespace

    import torch

    from hetsplit.runtime.llm_pipeline_worker import paced_all_reduce

    pacer = Pacer(Pace(0.25, 0.25))
    pacer.start(first_step=True)
    alone = SimpleNamespace(ranks=[0])
    partial = torch.ones(3)
    for _ in range(4):
        busy(0.002)                          # 6 ms owed each time: a pause would sleep
        assert paced_all_reduce(pacer, None, alone, partial, torch.device("cpu")) is partial   # no copy either
    assert pacer.slept_s == 0.0
    pacer.pause(settle=True)
    assert pacer.slept_s + pacer.owed_s >= 3 * 0.008
