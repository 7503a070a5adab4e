"""Pre-flight checks for scaled-out runs: each fails before the model loads, with a message that says what to do."""

from __future__ import annotations

import socket
import threading
from types import SimpleNamespace

import pytest

from r1kit.errors import ConfigError
from r1kit.run import preflight
from tests.helpers import raises_naming


def training(**kw):
    base = dict(use_vllm=False, vllm_mode="colocate", vllm_gpu_memory_utilization=0.3, vllm_server_base_url=None,
                vllm_server_host="0.0.0.0", vllm_server_port=8000, vllm_server_timeout=240.0, deepspeed=None)
    return SimpleNamespace(**{**base, **kw})


def model(**kw):
    return SimpleNamespace(**{"load_in_4bit": False, "load_in_8bit": False, **kw})


@pytest.fixture()
def gpu_and_vllm(monkeypatch):
    """Pretend vLLM and a GPU are there, to reach the checks behind them."""
    monkeypatch.setattr(preflight, "installed", lambda m: True)
    monkeypatch.setattr(preflight, "has_cuda", lambda: True)
    monkeypatch.setattr(preflight, "vllm_is_cpu_build", lambda: False)


def test_nothing_to_check_by_default():
    preflight.check_machine(training(), model())


def test_use_vllm_without_vllm(monkeypatch):
    monkeypatch.setattr(preflight, "installed", lambda m: m != "vllm")
    with raises_naming("use_vllm", "r1kit[vllm]"):
        preflight.check_machine(training(use_vllm=True), model())


def test_use_vllm_without_gpu(monkeypatch):
    monkeypatch.setattr(preflight, "installed", lambda m: True)
    monkeypatch.setattr(preflight, "has_cuda", lambda: False)
    monkeypatch.setattr(preflight, "vllm_is_cpu_build", lambda: False)
    with raises_naming("use_vllm", "GPU"):
        preflight.check_machine(training(use_vllm=True), model())


def free_port() -> int:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    return port


def test_vllm_cpu_build_colocates_without_a_gpu_and_waits_for_its_server(monkeypatch):
    monkeypatch.setattr(preflight, "installed", lambda m: True)
    monkeypatch.setattr(preflight, "has_cuda", lambda: False)
    monkeypatch.setattr(preflight, "vllm_is_cpu_build", lambda: True)
    preflight.check_machine(training(use_vllm=True, vllm_mode="colocate", vllm_gpu_memory_utilization=0.0), model())
    port = free_port()
    with raises_naming(f"127.0.0.1:{port}", "r1kit vllm-serve"):  # server mode: no GPU needed, a server is
        preflight.check_machine(training(use_vllm=True, vllm_mode="server", vllm_server_port=port), model(),
                                server_wait=0.1)


@pytest.mark.parametrize("utilisation", [0.0, 1.0, 1.5, -0.2])
def test_colocate_memory_utilisation_out_of_range(gpu_and_vllm, utilisation):
    with raises_naming("vllm_gpu_memory_utilization"):
        preflight.check_machine(training(use_vllm=True, vllm_gpu_memory_utilization=utilisation), model())
    preflight.check_machine(training(use_vllm=True, vllm_gpu_memory_utilization=0.4), model())


class FakeClock:
    """`time` for the module under test: sleeping moves the clock on at once, so a wait's bound is checked as the
    clock the code reads, whatever the machine's load."""

    def __init__(self):
        self.now, self.slept = 1000.0, []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.mark.slow
def test_unreachable_vllm_server_fails_after_a_bounded_wait(gpu_and_vllm, monkeypatch):
    port, clock = free_port(), FakeClock()
    monkeypatch.setattr(preflight, "time", clock)
    with pytest.raises(ConfigError, match=f"no vLLM server answered at 127.0.0.1:{port} within 3 s.*vllm-serve"):
        preflight.check_machine(training(use_vllm=True, vllm_mode="server", vllm_server_port=port), model(), server_wait=3.0)
    assert clock.now - 1000.0 == pytest.approx(3.0) and len(clock.slept) == 3  # tried each second, then gave up


@pytest.mark.slow
def test_vllm_server_that_comes_up_late_is_waited_for(gpu_and_vllm):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    port = server.getsockname()[1]
    threading.Timer(0.5, lambda: server.listen(1)).start()  # "starts" half a second later
    preflight.check_machine(training(use_vllm=True, vllm_mode="server", vllm_server_base_url=f"http://127.0.0.1:{port}"),
                        model(), server_wait=10.0)
    server.close()


def test_deepspeed_requested_but_not_installed(monkeypatch):
    from r1kit.launching import sharding

    monkeypatch.setattr(sharding, "installed", lambda m: m != "deepspeed")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match=r"pip install 'r1kit\[deepspeed\]'"):
        preflight.check_machine(training(deepspeed="ds_config.json"), model())
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    with pytest.raises(ConfigError, match="DeepSpeed was asked for"):
        preflight.check_machine(training(), model())


def test_quantisation_without_gpu(monkeypatch):
    from r1kit.loading import modeling

    monkeypatch.setattr(modeling, "has_cuda", lambda: False)
    for flag in ("load_in_4bit", "load_in_8bit"):
        with raises_naming(flag, "GPU"):
            preflight.check_machine(training(), model(**{flag: True}))


def test_pipeline_runs_the_checks_before_loading_anything(tmp_path, math_jsonl, monkeypatch):
    from r1kit.config.recipe import parse_args
    from r1kit.grpo import pipeline as main
    from tests.helpers import tiny_recipe, write_recipe

    monkeypatch.setattr(preflight, "installed", lambda m: m != "vllm")
    recipe = tiny_recipe(tmp_path / "no-model-here", math_jsonl, tmp_path / "out", use_vllm=True)
    with pytest.raises(ConfigError, match="needs vLLM"):
        main(*parse_args(["--config", str(write_recipe(tmp_path, **recipe))]))
