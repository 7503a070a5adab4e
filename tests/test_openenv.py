"""OpenEnv environments in one key (`environment: openenv:...`): a running server's tools become the policy's, its
reward joins the run's, r1kit serves an environment class in its jail, and every reply is hostile input."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from r1kit.config.toolfields import openenv_target
from r1kit.training import environments as E
from r1kit.training.tools import ToolLimits
from tests.helpers import raises_naming, write_recipe

ROOT = Path(__file__).resolve().parents[1]
PRODUCTS = "openenv:r1kit.sources.openenv_products:ProductsEnv"


def test_the_key_is_a_running_servers_address_or_a_class_to_serve_and_nothing_else():
    assert openenv_target("openenv:http://127.0.0.1:8000") == ("url", "ws://127.0.0.1:8000/ws")
    assert openenv_target("openenv:https://team-env.hf.space/") == ("url", "wss://team-env.hf.space/ws")
    assert openenv_target(PRODUCTS) == ("serve", PRODUCTS.removeprefix("openenv:"))
    for bad in ("openenv:", "openenv:http://", "openenv:envs", "openenv:my env:Env", "openenv:http://h:1?token=x",
                "openenv:pkg.mod:Not A Class"):
        with raises_naming("openenv:http://HOST:PORT", "openenv:package.module:EnvClass"):
            openenv_target(bad)


def test_each_listed_tool_becomes_a_method_with_its_name_description_and_parameters():
    from transformers.utils import get_json_schema

    listed = {"observation": {"tools": [
        {"name": "move", "description": "Moves a piece.", "input_schema": {
            "type": "object", "required": ["square"],
            "properties": {"square": {"type": "string", "description": "Where to, e.g. e4."},
                           "promote": {"type": "boolean"}}}},
        {"name": "reset", "description": "taken by TRL", "input_schema": {}},  # TRL's own name: left out
        {"name": "rm -rf", "description": "not a name", "input_schema": {}},
        {"name": "_hidden", "description": "private", "input_schema": {}},
        {"name": "look", "description": "Looks.", "input_schema": {"type": "object"}}]}}
    listed["observation"]["tools"] += [
        {"name": "calls", "description": "shadowed by r1kit's counter", "input_schema": {}},
        {"name": "bad_parameter", "input_schema": {"properties": {"class": {"type": "string"}}}},  # a keyword
        {"name": "nullable", "input_schema": {"properties": {"n": {"type": ["integer", "null"]}}, "required": 5}},
        "not a tool", {"name": None}]
    specs = E.tool_specs(listed)
    assert [s.name for s in specs] == ["move", "look", "nullable"]
    assert specs[2].parameters == {"n": (int, "n")} and specs[2].required == []
    environment = E.environment_class(E.Endpoint("ws://localhost/ws"), specs, ToolLimits(), "Chess")
    schema = get_json_schema(environment().move)["function"]
    assert schema["name"] == "move" and schema["description"] == "Moves a piece."
    assert schema["parameters"]["required"] == ["square"]
    assert schema["parameters"]["properties"]["square"] == {"type": "string", "description": "Where to, e.g. e4."}
    assert schema["parameters"]["properties"]["promote"]["type"] == "boolean"
    assert environment.__name__ == "Chess"  # the name its reward takes in the run's metrics
    public = [n for n in dir(environment) if not n.startswith("_") and callable(getattr(environment, n))]
    assert sorted(public) == ["get_reward", "look", "move", "nullable", "reset"]  # TRL's tools, and nothing of ours
    with raises_naming("lists no tools"):
        E.tool_specs({"observation": {"tools": []}})


@pytest.mark.parametrize("reply, why", [
    ({"observation": {}, "reward": float("nan")}, "out of bounds"),
    ({"observation": {}, "reward": 1e308}, "out of bounds"),  # TRL's float32 sums would overflow
    ({"observation": {}, "reward": -2e6}, "out of bounds"),
    ({"observation": {}, "reward": 10**400}, "not a number"),  # (float() of it overflows)
    ({"observation": {}, "reward": "1e9"}, "not a number"),
    ({"observation": {}, "reward": True}, "not a number"),
    ({"observation": {}, "reward": 1.0, "done": "false"}, "not a boolean"),  # a string is not done
    ({"observation": "text", "reward": 1.0}, "observation"),
])
def test_a_reply_out_of_protocol_is_a_transport_failure(reply, why):
    with pytest.raises(E.TransportFailure, match=why):
        E.step_outcome(reply)


def test_what_the_policy_reads_of_a_tool_is_bounded_and_errors_say_so():
    assert E.result_text({"result": {"content": [{"type": "text", "text": "x" * 500}]}}, 100).endswith(
        "(output cut at 100 characters)")
    assert E.result_text({"error": {"message": "no such tool"}}, 100) == "Error: no such tool"
    assert E.result_text({"result": {"data": {"a": 1}, "is_error": True}}, 100).startswith("Error")
    assert E.result_text({"result": {"content": 5, "data": "five"}}, 100) == "five"  # content not a list: no crash
    assert E.observation_text({"task": "y" * 500, "n": 3}, 100).endswith("(cut at 100 characters)")
    assert E.step_outcome({"observation": {}, "reward": None, "done": True}) == ({}, 0.0, True)  # null: no reward


# --------------------------------------------------------------------------------------------------------------------
# Real servers: r1kit's jailed one and a loopback one
# --------------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def openenv_installed():
    pytest.importorskip("openenv", reason="the openenv extra (pip install 'r1kit[openenv]')")
    from r1kit.sandbox import jail

    if jail.probe():
        pytest.skip(f"no jail here: {jail.probe()}")


@pytest.fixture(scope="module")
def hostile(openenv_installed):
    environment = E.build("openenv:tests.openenv_envs:HostileEnv", ToolLimits(seconds=2, max_output=300, calls=3), 4)
    yield environment
    E.shut_down()


@pytest.mark.slow
def test_a_served_environment_runs_in_the_jail_reachable_by_the_trainer_alone(hostile):
    served = hostile.served
    assert served.alive()
    folder = Path(served.socket_path).parent
    assert folder.stat().st_mode & 0o777 == 0o700 and folder.stat().st_uid == os.geteuid()  # nobody else connects
    rollout = hostile()
    rollout.reset(prompt="p")
    seen = rollout.reach(path=str(ROOT / "README.md"))
    assert re.fullmatch(r"uid=65534 host=jail no file: FileNotFoundError; no network: OSError", seen), seen
    assert rollout.get_reward() == 0.0 and rollout.calls == 1 and not rollout.infrastructure_failures


@pytest.mark.slow
def test_what_a_call_provokes_is_the_calls_failure_and_only_a_server_gone_is_the_infrastructures(hostile):
    """A hang, a flood, a reward out of bounds, an exception: while the server still answers, the call caused it, and
    the rollout answers for it (judged: what it earned before, here 0) rather than escaping as unjudged; the policy
    cannot turn a wrong answer into None by provoking a failure."""
    rollout = hostile()
    rollout.reset(prompt="p")
    assert rollout.crash(message="boom").startswith("Error") and "boom" in rollout.crash(message="boom")
    assert rollout.get_reward() == 0.0 and rollout.errors == 2  # the program's failure: wrong, judged
    started = time.monotonic()
    rollout.reset(prompt="p")
    assert "the call to hang failed" in rollout.hang(seconds=60)
    assert time.monotonic() - started < 50  # cut at tool_time_limit (2 s) and a health check, not after the minute
    assert "session ended" in rollout.pay(amount="1")  # nothing more runs in that episode
    assert rollout.get_reward() == 0.0 and not rollout.infrastructure_failures
    rollout.reset(prompt="p")
    assert rollout.pay(amount="0.5") == "paid"
    assert "the call to flood failed" in rollout.flood(megabytes=8)  # past the reply size bound
    assert rollout.get_reward() == 0.5  # what the episode earned before the failed call, no more
    rollout.reset(prompt="p")
    rollout.pay(amount="1e300")  # out of bounds: the call's failure, nothing paid
    assert rollout.get_reward() == 0.0
    for amount in ("nan", "inf", "1e400"):  # JSON has no such number: the server sends none, so nothing is paid
        rollout.reset(prompt="p")
        rollout.pay(amount=amount)
        assert rollout.get_reward() == 0.0
    rollout.reset(prompt="p")
    for _ in range(3):
        rollout.pay(amount="0.25")
    assert "budget is spent" in rollout.pay(amount="100")  # past tool_calls_per_rollout: refused without running
    assert rollout.get_reward() == 0.75
    assert not list(hostile.open_sessions)  # get_reward ends each episode's session


@pytest.mark.slow
def test_a_server_that_is_gone_makes_the_rollout_unjudged_never_wrong(openenv_installed):
    environment = E.build(PRODUCTS, ToolLimits(seconds=2), 2)
    try:
        rollout = environment()
        assert "Compute" in rollout.reset(prompt="p")
        environment.served.stop()  # the infrastructure fails mid-episode
        assert "infrastructure failure" in rollout.multiply(a=2, b=3)
        assert rollout.get_reward() is None and rollout.infrastructure_failures == 1
        assert rollout.reset(prompt="q") is None and rollout.get_reward() is None  # and at the next start
    finally:
        E.shut_down()


@pytest.mark.slow
def test_a_group_starts_alike_the_right_answer_is_paid_and_sessions_close(openenv_installed):
    environment = E.build(PRODUCTS, ToolLimits(seconds=5, calls=4), 8)
    try:
        tasks = {}
        for row in ({"prompt": "a"}, {"prompt": "a"}, {"prompt": "b"}, {"prompt": "c"}):
            rollout = environment()
            task = rollout.reset(**row)
            tasks.setdefault(row["prompt"], set()).add(task)
            a, b = map(int, re.search(r"(\d+)\*(\d+)", task).groups())
            assert rollout.multiply(a=a, b=b) == str(a * b)
            assert rollout.submit(answer=a * b + (row["prompt"] == "c")) == "submitted"
            assert rollout.get_reward() == float(row["prompt"] != "c")
            assert "episode is over" in rollout.submit(answer=1)
        assert len(tasks["a"]) == 1 and len({*tasks["a"], *tasks["b"], *tasks["c"]}) == 3  # one start per group
        assert not list(environment.open_sessions)
    finally:
        E.shut_down()
    assert not environment.served.alive() and not Path(environment.served.socket_path).parent.exists()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def loopback_server(openenv_installed):
    """ProductsEnv served on 127.0.0.1 by `python -m r1kit.sources.openenv_products`, admitting 2 sessions."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "r1kit.sources.openenv_products", "--port", str(port),
                                "--sessions", "2"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.3)
    yield url
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:  # (uvicorn under openenv-core 0.2.3 waits on closed sessions' sockets)
        process.kill()
        process.wait(timeout=15)


@pytest.mark.slow
def test_a_running_server_with_fewer_sessions_than_rollouts_in_flight_is_refused_in_one_line(loopback_server):
    with raises_naming("admits 2 concurrent sessions", "8 rollouts in flight", "max_concurrent_envs"):
        E.connect(E.Endpoint(openenv_target(f"openenv:{loopback_server}")[1]), 8, ToolLimits(), "openenv")
    environment = E.connect(E.Endpoint(openenv_target(f"openenv:{loopback_server}")[1]), 2, ToolLimits(), "openenv")
    assert environment.__name__ == "ProductsEnv"  # the server's own name (its /metadata): its reward's name
    rollout = environment()
    assert "Compute" in rollout.reset(prompt="x")
    E.close_all(environment)


@pytest.mark.slow
def test_a_class_that_cannot_hold_several_sessions_or_a_server_that_is_not_there_is_refused_in_one_line(
        openenv_installed):
    with raises_naming("OneSessionEnv", "4 concurrent sessions", "SUPPORTS_CONCURRENT_SESSIONS"):
        E.build("openenv:tests.openenv_envs:OneSessionEnv", ToolLimits(), 4)
    port = free_port()
    with raises_naming("no OpenEnv server answers", f"ws://127.0.0.1:{port}"):
        E.build(f"openenv:http://127.0.0.1:{port}", ToolLimits(), 1)
    E.shut_down()


@pytest.mark.slow
def test_grpo_trains_against_a_running_server_its_reward_under_its_own_name(tmp_path, loopback_server):
    """`environment: openenv:http://...` in a recipe, as a user runs it: the run refuses a server too small for its
    rollouts before the model loads, then trains against one that fits; the environment's reward is logged and
    recorded under its name, and no session is left open on the server."""
    recipe = {"model_name_or_path": "r1kit:demo-tools", "dtype": "float32", "chat_template": "r1kit-tools",
              "dataset_name": "r1kit:addition", "reward_funcs": [], "environment": f"openenv:{loopback_server}",
              "max_tool_calling_iterations": 2, "num_generations": 2, "per_device_train_batch_size": 2,
              "max_completion_length": 64, "max_steps": 2, "beta": 0.0, "gradient_checkpointing": False,
              "torch_num_threads": 1, "output_dir": str(tmp_path / "out"), "save_strategy": "no",
              "logging_steps": 1, "report_to": "none", "seed": 1, "probe_rewards": False}
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    (tmp_path / "big").mkdir()
    too_many = write_recipe(tmp_path / "big", **{**recipe, "per_device_train_batch_size": 4, "num_generations": 4})
    done = subprocess.run([sys.executable, "-m", "r1kit.grpo", "--config", str(too_many)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 2 and "admits 2 concurrent sessions, fewer than the 4 rollouts" in done.stderr
    assert "parameters" not in done.stderr + done.stdout  # refused before the model loaded (no start-up block)
    done = subprocess.run([sys.executable, "-m", "r1kit.grpo", "--config", str(write_recipe(tmp_path, **recipe))],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ProductsEnv x1 (the environment's)" in done.stdout + done.stderr
    logged = [e for e in json.loads((tmp_path / "out" / "trainer_state.json").read_text())["log_history"]
              if "rewards/ProductsEnv/mean" in e]
    assert [e["step"] for e in logged] == [1, 2]
    rows = [json.loads(line) for line in (tmp_path / "out" / "completions.jsonl").read_text().splitlines()]
    assert rows and all("ProductsEnv" in r["rewards"] for r in rows)
    # The server still admits its 2 sessions: the run closed every one it opened
    E.check_capacity(E.Endpoint(openenv_target(f"openenv:{loopback_server}")[1]), 2)


def jail_processes(socket_folder: str) -> list[int]:
    """Processes whose command line names a server's socket folder or its script (the jail r1kit started)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes().decode("utf-8", "replace")
            except OSError:
                continue
            if "openenv server" in command or "r1kit-env-" in command or "openenv_server" in command:
                found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_a_served_environment_run_stops_on_a_signal_survives_kill_9_and_resumes_leaving_nothing_behind(
        tmp_path, openenv_installed):
    """The run contract holds for an environment run: SIGTERM saves and exits 75; kill -9 takes the jailed server
    down with the trainer; the resumed run sweeps the dead run's socket folder and finishes; nothing stays running."""
    from tests.test_lifecycle import Command

    out = tmp_path / "out"
    recipe = write_recipe(tmp_path, **{
        "model_name_or_path": "r1kit:demo-tools", "dtype": "float32", "chat_template": "r1kit-tools",
        "dataset_name": "r1kit:addition", "reward_funcs": [], "environment": PRODUCTS,
        "max_tool_calling_iterations": 2, "num_generations": 2, "per_device_train_batch_size": 4,
        "max_completion_length": 64, "max_steps": 8, "beta": 0.0, "gradient_checkpointing": False,
        "torch_num_threads": 1, "output_dir": str(out), "save_steps": 1, "logging_steps": 1, "report_to": "none",
        "seed": 1, "probe_rewards": False})
    before = set(jail_processes(""))
    run = Command("grpo", recipe)
    run.wait_for_path(out / "checkpoint-1" / "trainer_state.json")
    run.proc.send_signal(signal.SIGTERM)
    assert run.finish() == 75, run.log[-2000:]
    stopped_at = max(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*"))
    run = Command("grpo", recipe)
    run.wait_for_path(out / f"checkpoint-{stopped_at + 1}" / "trainer_state.json")
    folders = [p for p in Path("/tmp").glob(f"r1kit-env-{run.proc.pid}-*")]
    assert len(folders) == 1  # the server's socket folder, named after its trainer
    run.proc.kill()  # kill -9: no handler runs
    run.finish()
    deadline = time.monotonic() + 30
    while set(jail_processes("")) - before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not set(jail_processes("")) - before  # the jail died with its trainer
    done = Command("grpo", recipe)
    assert done.finish() == 0, done.log[-3000:]
    assert not folders[0].exists()  # swept by the next run
    assert not list(Path("/tmp").glob(f"r1kit-env-{done.proc.pid}-*"))  # its own removed at its end
    rows = [json.loads(line) for line in (out / "completions.jsonl").read_text().splitlines()]
    assert sorted(r["step"] for r in rows) == sorted(s for s in range(1, 9) for _ in range(4))  # each step's once
    assert all("ProductsEnv" in r["rewards"] for r in rows)


@pytest.mark.slow
def test_held_out_replies_through_a_server_take_no_more_sessions_than_it_admits_and_leave_none_open(
        openenv_installed, monkeypatch):
    """The held-out evaluation's tool loop on an OpenEnv environment: problems go through in groups no larger than
    the sessions the server was checked for, each reset shows its task, and every episode is ended after its group
    (a session left open would fill the server, and every later rollout would find it full)."""
    from transformers import AutoTokenizer

    from r1kit.benchmarking import heldout
    from r1kit.loading.modeling import TOOLS_MODEL, set_chat_template

    tokenizer = AutoTokenizer.from_pretrained(TOOLS_MODEL)
    set_chat_template(tokenizer, "r1kit-tools")
    environment = E.build(PRODUCTS, ToolLimits(seconds=5), 2)
    batches = []

    def generate(model, tok, prompts, max_new_tokens, batch_size=64, should_stop=None, token_ids=True, **kw):
        batches.append(len(prompts))
        assert len(environment.open_sessions) <= 2
        replies = []
        for prompt in prompts:
            a, b = map(int, re.search(r"Compute (\d+)\*(\d+)", prompt).groups())  # the reset's task, in the prompt
            text = (f'<tool_call>{{"name": "submit", "arguments": {{"answer": {a * b}}}}}</tool_call>'
                    if "<|tool|>" not in prompt else f"<answer>{a * b}</answer>")
            replies.append(tokenizer(text + "<|im_end|>", add_special_tokens=False)["input_ids"])
        return replies

    monkeypatch.setattr(heldout, "generate", generate)
    try:
        loop = heldout.ToolLoop([], environment, max_iterations=1, max_sessions=2)
        finals, calls = heldout.tool_loop_replies(None, tokenizer, [f"q{i}" for i in range(5)], loop)
        assert calls == [1] * 5 and all(f.startswith("<answer>") for f in finals)
        assert batches == [2, 2, 2, 2, 1, 1]  # groups of 2: a call turn, then an answer turn each
        assert not environment.open_sessions
        E.check_capacity(environment.endpoint, 2)  # the server has both sessions free again
    finally:
        E.shut_down()
