"""The bound on every step (`r1kit.run.watchdog`): a step that outlives `stall_timeout`, or a stop signal's
`stop_grace_seconds`, ends the process with exit 75 and one line naming what it was doing. Here with an injected
clock and exit, so that the policy is tested, not this machine's speed; tests/test_scale_out.py runs it on 2 ranks."""

from __future__ import annotations

import threading
from pathlib import Path

from r1kit.console import EXIT_INTERRUPTED
from r1kit.run import watchdog as watchdog_module
from r1kit.run.watchdog import Watchdog, activity


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def armed(stall: float = 100.0, grace: float = 10.0):
    clock, exits, records = Clock(), [], []
    ended = threading.Event()

    def exit(code):
        exits.append(code)
        ended.set()

    dog = Watchdog(stall, grace, rank=1, record=lambda **fields: records.append(fields), clock=clock, exit=exit)
    return dog, clock, exits, records, ended


def test_a_step_that_outlives_stall_timeout_ends_the_process_with_exit_75_and_says_what_it_was_doing(capfd,
                                                                                                      monkeypatch):
    monkeypatch.setattr(watchdog_module, "POLL_SECONDS", 0.01)
    dog, clock, exits, records, ended = armed()
    dog.start(step=4)
    clock.now = 99.0
    assert not ended.wait(0.2) and exits == []  # within the bound
    dog.beat(5)  # step 5 ended: the next has its own stall_timeout
    clock.now = 198.0
    assert not ended.wait(0.2)
    clock.now = 200.0
    assert ended.wait(10) and exits == [EXIT_INTERRUPTED]
    line = capfd.readouterr().err.strip()
    assert line.startswith("r1kit: rank 1: step 6 did not end within stall_timeout (100 s)")
    assert "after step 5" in line and "it was in " in line and "the same command resumes" in line
    assert records == [{"status": "interrupted", "unsaved": True, "hung": records[0]["hung"],
                        "reason": "step 6 did not end within stall_timeout (100 s)"}]
    dog.stop()


def test_a_stop_signal_gives_the_step_stop_grace_seconds_and_later_beats_do_not_extend_it(capfd, monkeypatch):
    monkeypatch.setattr(watchdog_module, "POLL_SECONDS", 0.01)
    dog, clock, exits, _, ended = armed(stall=1000.0, grace=10.0)
    dog.start(step=2)
    clock.now = 5.0
    dog.stopping("SIGTERM")
    dog.beat(3)  # the step ended, but the stop is still under way (its save): the grace still holds
    clock.now = 14.0
    assert not ended.wait(0.2)
    clock.now = 15.0
    assert ended.wait(10) and exits == [EXIT_INTERRUPTED]
    assert "a stop signal (SIGTERM) came and the step did not end and save within stop_grace_seconds (10 s)" in \
        capfd.readouterr().err
    dog.stop()


def test_a_signals_grace_holds_when_a_nearer_stall_bound_came_first_and_a_step_ended_after(capfd, monkeypatch):
    """The grace was forgotten when the step's own bound was nearer at the signal and a step end then moved it on."""
    monkeypatch.setattr(watchdog_module, "POLL_SECONDS", 0.01)
    dog, clock, exits, _, ended = armed(stall=20.0, grace=30.0)
    dog.start(step=1)
    clock.now = 10.0
    dog.stopping("SIGTERM")  # stall bound at 20, grace at 40
    clock.now = 15.0
    dog.beat(2)  # the step ended: its next bound is 35, the grace still 40
    dog.beat(3)
    clock.now = 34.0
    dog.beat(4)  # bound 54: the grace, 40, comes first
    clock.now = 39.0
    assert not ended.wait(0.2)
    clock.now = 40.0
    assert ended.wait(10) and exits == [EXIT_INTERRUPTED]
    assert "a stop signal (SIGTERM) came" in capfd.readouterr().err
    dog.stop()


def test_a_checkpoint_being_written_gets_one_more_grace_period_then_the_process_ends(monkeypatch):
    monkeypatch.setattr(watchdog_module, "POLL_SECONDS", 0.01)
    dog, clock, exits, _, ended = armed(stall=100.0, grace=10.0)
    dog.start()
    dog.saving = True
    clock.now = 100.0
    assert not ended.wait(0.2)  # a save under way: one more grace period
    clock.now = 111.0
    assert ended.wait(10) and exits == [EXIT_INTERRUPTED]  # and no more than one
    dog.stop()


def test_after_training_only_a_stop_signal_bounds_what_follows(monkeypatch):
    monkeypatch.setattr(watchdog_module, "POLL_SECONDS", 0.01)
    dog, clock, exits, _, ended = armed(stall=100.0, grace=10.0)
    dog.start()
    dog.training_ended()  # the final model and records: no step to wait for
    clock.now = 10_000.0
    assert not ended.wait(0.2) and exits == []
    dog.stopping("SIGINT")
    clock.now = 10_011.0
    assert ended.wait(10) and exits == [EXIT_INTERRUPTED]
    dog.stop()


def blocked_in_a_collective(release: threading.Event) -> None:
    release.wait()


def test_what_a_thread_was_doing_names_its_innermost_call_and_the_innermost_call_of_the_package(monkeypatch):
    monkeypatch.setattr(watchdog_module, "PACKAGE", str(Path(__file__).parent))
    release = threading.Event()
    thread = threading.Thread(target=blocked_in_a_collective, args=(release,))
    thread.start()
    try:
        said = activity(thread.ident)
    finally:
        release.set()
        thread.join()
    assert said.startswith("in wait (") and "called from blocked_in_a_collective (tests/test_watchdog.py:" in said
    assert activity(None) == "not running"


def test_the_bounds_come_from_the_recipe_and_a_healthy_long_step_outlives_ddp_timeout():
    """A rank waiting in a collective stops at ddp_timeout by itself (its peer gone: exit 75); the watchdog bounds the
    waits no collective covers, by default at twice that, so a long but healthy step is not cut where gloo would not
    cut it."""
    from types import SimpleNamespace

    from r1kit.run.lifecycle import Lifecycle

    def bounds(**fields):
        args = SimpleNamespace(**{"stall_timeout": None, "ddp_timeout": 1800, "stop_grace_seconds": 300.0,
                                  "process_index": 1, **fields})
        return Lifecycle("out", False, 2).bound_by(args).bounds

    assert bounds() == (3600.0, 300.0, 1)
    assert bounds(ddp_timeout=600) == (1200.0, 300.0, 1)
    assert bounds(stall_timeout=45, stop_grace_seconds=5) == (45.0, 5.0, 1)
