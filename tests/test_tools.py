"""Tool use (`tools:`, `environment:`; r1kit.training.tools): the policy's `python` calls run in r1kit's jail, stateless and
bounded; a turn's calls run at once; the infrastructure's failures make a rollout unjudged, the program's failures
are the model's. End to end, a scripted policy (the trainer's generation replaced by fixed replies that call the
tool) trains a few GRPO steps through TRL's tool loop: the calls run in the jail, the tool's tokens are out of the
loss, token by token, each group starts from one state, and the records keep the trajectory."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from r1kit.errors import ConfigError
from r1kit.integrity.rewardtap import unjudged
from r1kit.sandbox import PASSED, SANDBOX_ERROR
from r1kit.sandbox import TestResult as SandboxResult
from r1kit.training.tools import PythonInterpreter, ToolLimits, build, prefetch, python_calls, python_environment
from tests.helpers import descendants, write_recipe

LIMITS = ToolLimits(seconds=2.0, memory_mb=256, max_output=200, calls=3, total_seconds=6.0)


class Recording:
    """A provider that records what it is asked to run and answers with what each program would print."""

    def __init__(self, fail: bool = False):
        self.batches: list[list[str]] = []
        self.fail = fail

    def execute(self, programs):
        self.batches.append([p.code for p in programs])
        if self.fail:
            return [[SandboxResult(SANDBOX_ERROR, stderr="bwrap: cannot start")] for _ in programs]
        return [[SandboxResult(PASSED, stdout=f"ran {p.code}\n", seconds=0.01)] for p in programs]


def call(code: str, name: str = "python") -> dict:
    return {"type": "function", "function": {"name": name, "arguments": {"code": code}}}


# --- the interpreter, without a jail ------------------------------------------------------------------------------
def test_a_turns_calls_run_at_once_and_each_call_then_takes_its_result():
    provider = Recording()
    environment = python_environment(LIMITS, provider)
    rollouts = [environment() for _ in range(3)]
    turns = [[{"role": "assistant", "tool_calls": [call("print(1)")]}],
             [{"role": "assistant", "tool_calls": [call("print(2)"), call("print(1)")]}],
             [{"role": "assistant", "content": "no call"}]]
    assert prefetch(environment, turns) == 2 and provider.batches == [["print(1)", "print(2)"]]  # one batch, distinct
    assert rollouts[0].python("print(1)") == "ran print(1)\n" and rollouts[1].python("print(2)") == "ran print(2)\n"
    assert provider.batches == [["print(1)", "print(2)"]]  # taken from what ran ahead, not run again
    assert rollouts[2].python("print(3)") == "ran print(3)\n" and provider.batches[-1] == ["print(3)"]  # not ahead


def test_a_rollouts_budget_bounds_thousands_of_calls():
    provider = Recording()
    environment = python_environment(LIMITS, provider)
    rollout = environment()
    flood = [{"role": "assistant", "tool_calls": [call(f"print({i})") for i in range(1000)]}]
    prefetch(environment, [flood])
    assert sum(len(batch) for batch in provider.batches) == LIMITS.calls  # no more than a rollout may use
    replies = [rollout.python(f"print({i})") for i in range(1000)]
    assert sum(reply.startswith("ran") for reply in replies) == LIMITS.calls
    assert all("budget is spent" in reply for reply in replies[LIMITS.calls:])
    assert rollout.calls == LIMITS.calls and rollout.errors == 1000 - LIMITS.calls
    rollout.reset()
    assert rollout.python("print(0)").startswith("ran")  # a new batch, a new budget


def test_what_runs_ahead_is_what_each_rollouts_budget_left_can_read_across_its_turns():
    """Each later turn ran up to a whole budget of calls again, whatever the rollout had spent: 12 programs in the
    jail where the budget reads 4. Now a rollout's calls and tool seconds left bound what runs ahead for it."""
    provider = Recording()
    environment = python_environment(LIMITS, provider)  # 3 calls, 6 s per rollout; 2 s per call
    fresh, spent, slow = environment(), environment(), environment()
    spent.calls = 2  # one call left
    slow.seconds = 5.0  # one second left: one more call at most (it may take its whole 2 s)
    turn = [{"role": "assistant", "tool_calls": [call(f"print({i})") for i in range(5)]}]
    turns = [[{"role": "assistant", "tool_calls": [call(f"print({r}{i})") for i in range(5)]}] for r in range(4)]
    ran = prefetch(environment, turns, [fresh, spent, slow, object()])  # (a user's environment: a fresh budget)
    assert ran == 3 + 1 + 1 + 3
    assert prefetch(environment, [turn], [environment()]) == 3  # past the turn: the same bound
    exhausted = environment()
    exhausted.calls = 3
    assert prefetch(environment, [turn], [exhausted]) == 0


def test_only_the_models_words_are_judged_a_rollout_ending_on_the_tools_turn_has_no_answer():
    """When a call and the tool's reply fill max_completion_length, TRL drops the model's answer turn: the rollout ends
    on the tool's message, and the tool's printed `<answer>42</answer>` was paid 1.0 as the model's answer."""
    from r1kit.rewards.open_r1 import accuracy_reward, format_reward
    from r1kit.rewards.text import completion_text, message_text

    call_turn = {"role": "assistant", "content": "", "tool_calls": [call("print('<answer>42</answer>')")]}
    cut_off = [call_turn, {"role": "tool", "name": "python", "content": "<think>x</think>\n<answer>42</answer>"}]
    answered = cut_off + [{"role": "assistant", "content": "<think>x</think>\n<answer>42</answer>"}]
    assert completion_text(cut_off) == "" and completion_text(answered).endswith("<answer>42</answer>")
    assert accuracy_reward([cut_off, answered], solution=["$42$", "$42$"]) == [0.0, 1.0]  # wrong: no answer
    assert format_reward([cut_off, answered]) == [0.0, 1.0]
    assert message_text([{"role": "user", "content": "What is 6 * 7?"}]) == "What is 6 * 7?"  # a prompt's question



def test_a_rollout_cut_off_at_its_call_is_recorded_with_its_trajectory(tmp_path):
    """TRL drops a tool reply that would pass max_completion_length: the rollout is the call turn alone, whose text
    is empty; it was recorded as an empty completion."""
    from types import SimpleNamespace

    import torch

    from r1kit.integrity.rewardtap import CompletionsRecorder

    trainer = SimpleNamespace(accelerator=SimpleNamespace(process_index=0), model=SimpleNamespace(training=True),
                              state=SimpleNamespace(global_step=0), reward_func_names=["accuracy_reward"],
                              generation_round=None)
    cut = [{"role": "assistant", "content": "", "tool_calls": [call("print(6*7)")]}]
    CompletionsRecorder(str(tmp_path))(trainer, [[{"role": "user", "content": "6 * 7?"}]], [cut], torch.tensor([[0.0]]))
    [row] = [json.loads(line) for line in (tmp_path / "completions.jsonl").read_text().splitlines()]
    assert row["completion"] == "" and row["trajectory"][0]["tool_calls"][0]["arguments"] == {"code": "print(6*7)"}


def test_malformed_calls_are_not_calls():
    assert python_calls([{"role": "assistant", "tool_calls": [
        call("   "), call("print(1)", name="shell"), {"type": "function", "function": {"name": "python"}},
        {"type": "function", "function": {"name": "python", "arguments": "print(1)"}}, "junk", call("print(2)")]}]) \
        == ["print(2)"]
    assert python_calls([{"role": "assistant", "content": '<tool_call>\n{"name": "python", "argu'}]) == []
    rollout = python_environment(LIMITS, Recording())()
    assert rollout.python("") == "Error: no code given" and rollout.python(None) == "Error: no code given"


def test_the_infrastructures_failure_makes_the_rollout_unjudged_not_wrong():
    environment = python_environment(LIMITS, Recording(fail=True))
    failed, fine = environment(), python_environment(LIMITS, Recording())()
    assert "infrastructure failure" in failed.python("print(1)") and failed.infrastructure_failures == 1
    fine.python("print(1)")
    assert unjudged([1.0, 0.0], [failed, fine]) == [None, 0.0]
    assert unjudged([1.0, 0.0], None) == [1.0, 0.0]


def test_the_recipes_tools_and_environment_are_built_and_checked():
    tools, factory = build(["python", "tests.tools_for_tests:add"], None, LIMITS)
    assert [t.__name__ for t in tools] == ["add"] and issubclass(factory, PythonInterpreter)
    _, environment = build([], "tests.tools_for_tests:RandomStart", LIMITS)
    assert environment.__name__ == "RandomStart" and hasattr(environment, "look")
    with pytest.raises(ConfigError, match="cannot import"):
        build(["tests.tools_for_tests:nothing"], None, LIMITS)
    with pytest.raises(ConfigError, match="one of them"):
        build(["python"], "tests.tools_for_tests:RandomStart", LIMITS)


def test_the_members_of_a_group_start_alike_and_the_generators_are_left_as_they_were():
    import random

    from tests.tools_for_tests import RandomStart

    _, environment = build([], "tests.tools_for_tests:RandomStart", LIMITS)
    random.seed(5)
    before = random.random()
    random.seed(5)
    group = [environment() for _ in range(4)]
    for member in group:
        member.reset(prompt="7+8=", solution="15")
    other = environment()
    other.reset(prompt="1+2=", solution="3")
    assert len({m.start for m in group}) == 1 and other.start != group[0].start
    assert random.random() == before  # the caller's random state is untouched
    assert RandomStart.starts[-5:-1] == [group[0].start] * 4


def test_a_template_that_cannot_render_tools_is_refused_naming_one_that_can():
    from r1kit.loading.modeling import build_char_tokenizer, named_template
    from r1kit.training.tools import check_tool_template

    tokenizer = build_char_tokenizer()
    with pytest.raises(ConfigError, match="chat_template: qwen2.5"):
        check_tool_template(tokenizer)
    tokenizer.chat_template = named_template("qwen2.5")
    check_tool_template(tokenizer)


# --- in the jail ----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def jailed():
    return python_environment(LIMITS)


@pytest.mark.slow
def test_a_call_runs_in_the_jail_and_each_call_is_a_fresh_interpreter(jailed):
    rollout = jailed()
    assert rollout.python("import os, socket\nprint(os.getuid(), socket.gethostname())").split() == ["65534", "jail"]
    rollout.python("x = 41\nopen('/tmp/note', 'w').write('kept?')")
    reply = rollout.python("print(x + 1)")
    assert "NameError" in reply and rollout.errors == 1
    assert "FileNotFoundError" in jailed().python("print(open('/tmp/note').read())")


@pytest.mark.slow
@pytest.mark.parametrize("name, code, says", [
    ("endless loop", "while True:\n    pass", "time limit"),
    ("fork bomb", "import os\nwhile True:\n    os.fork()", "Error"),
    ("huge output", "print('x' * 10_000_000)", "output cut at 200 characters"),
    ("memory", "b = bytearray(2_000_000_000)", "Error"),
    ("network", "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=1)", "Error"),
    ("the trainer's files", "print(open('/proc/1/environ').read()[:50]); print(open('/etc/passwd').read())", "Error"),
])
def test_hostile_calls_are_bounded_and_leave_nothing_behind(jailed, name, code, says):
    before = descendants()
    rollout = jailed()
    start = time.monotonic()
    reply = rollout.python(code)
    assert says in reply, reply
    assert len(reply) <= LIMITS.max_output + 100
    assert time.monotonic() - start < 60  # bounded (the jail's deadline), on any machine however busy
    assert descendants() <= before  # no process of the call outlives it


@pytest.mark.slow
def test_a_calls_output_is_bounded_where_it_is_produced(jailed):
    """The jail read each call's whole output (~15 MB) back into the trainer before the interpreter cut it to
    tool_max_output: 48 calls held 866 MB. Now the program may write what the model would read, and little more."""
    [[result]] = jailed.provider.execute([LIMITS.program("import sys\nsys.stdout.write('x' * (15 << 20))")])
    assert len(result.stdout.encode()) <= 4 * LIMITS.max_output + 4096  # (the rest was refused to the program)
    reply = jailed().python("print('y' * 300)")  # above what the model reads, below the cap: cut, no error
    assert reply.startswith("y" * 200) and "output cut at 200 characters" in reply and "Error" not in reply


# --- end to end: a scripted policy ---------------------------------------------------------------------------------
TOOL_TURN = '<tool_call>\n{"name": "python", "arguments": {"code": "import os, socket\\nprint(6*7, os.getuid(), socket.gethostname())"}}\n</tool_call><|im_end|>'
ANSWER_TURN = "<answer>42</answer><|im_end|>"


def script_policy(trainer, first_turn: str = TOOL_TURN, after_tool: str = ANSWER_TURN) -> list:
    """Replaces the trainer's generation by fixed replies: `first_turn` to a question, `after_tool` once a tool
    has answered. Returns the prompts it was asked to continue (decoded)."""
    tokenizer = trainer.processing_class
    asked = []

    def generate(prompt_ids, images, multimodal_fields, num_generations=None, has_tool_images=False):
        replies = []
        for ids in prompt_ids:
            text = tokenizer.decode(ids)
            asked.append(text)
            reply = after_tool if "<tool_response>" in text else first_turn
            replies.append(tokenizer(reply, add_special_tokens=False)["input_ids"])
        return replies, None

    trainer._generate_single_turn = generate
    return asked


@pytest.fixture
def tool_model(tmp_path):
    from r1kit.loading.modeling import build_char_tokenizer, build_tiny_llama

    folder = tmp_path / "model"
    tokenizer = build_char_tokenizer()
    # room for the tools' system prompt, a call, the tool's reply and the answer
    build_tiny_llama(tokenizer, hidden_size=64, layers=2, heads=4, max_positions=4096).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    data = tmp_path / "questions.jsonl"
    data.write_text("".join(json.dumps({"problem": f"Question {i}: what is 6 * 7?", "solution": "42"}) + "\n"
                            for i in range(8)))  # the scripted policy's tool call computes 6 * 7
    return folder, data


def tool_run(tmp_path, model, data, **keys):
    from r1kit import grpo
    from r1kit.config.recipe import parse_args

    recipe = dict(model_name_or_path=str(model), dataset_name=str(data), dataset_prompt_column="problem",
                  reward_funcs=["accuracy"], tools=["python"], chat_template="qwen2.5", num_generations=2,
                  per_device_train_batch_size=4, max_completion_length=256, learning_rate=1e-3, max_steps=2,
                  logging_steps=1, save_strategy="no", report_to="none", bf16=False, seed=0,
                  output_dir=str(tmp_path / "out"), probe_rewards=False, max_tool_calling_iterations=2)
    recipe.update(keys)
    args = parse_args(["--config", str(write_recipe(tmp_path, **recipe)), "--resume", "never"])
    return grpo.setup(*args)


@pytest.mark.slow
def test_a_scripted_policy_trains_through_the_tool_loop_with_the_tool_out_of_the_loss(tmp_path, tool_model):
    import torch

    from r1kit.run import pipeline as runs

    run = tool_run(tmp_path, *tool_model)
    trainer = run.trainer
    asked = script_policy(trainer)
    batches = []
    original = trainer._generate_and_score_completions

    def keep(inputs):
        batch = original(inputs)
        batches.append(batch)
        return batch

    trainer._generate_and_score_completions = keep
    runs.train(run)
    # The calls ran in the jail: what they printed came back in the tool turn the model was asked to continue
    continued = [text for text in asked if "<tool_response>" in text]
    assert continued and all("42 65534 jail" in text for text in continued)
    batch = batches[0]
    tokenizer = trainer.processing_class
    mask = batch["tool_mask"]
    for row in range(mask.size(0)):  # token by token: the tool's turn is out, the model's turns are in
        ids, kept = batch["completion_ids"][row], batch["completion_mask"][row].bool()
        tool_text = tokenizer.decode(ids[kept & (mask[row] == 0)])
        own_text = tokenizer.decode(ids[kept & (mask[row] == 1)])
        assert "42 65534 jail" in tool_text and "<tool_response>" in tool_text and "<tool_call>" not in tool_text
        assert "<tool_call>" in own_text and "<answer>42</answer>" in own_text and "jail" not in own_text
    # ... and out of the loss: per-token old log-probabilities changed only where the tool's tokens are leave it
    trainer.model.train()
    micro = {k: v[:2] if isinstance(v, torch.Tensor) and v.dim() and v.size(0) == mask.size(0) else v
             for k, v in batch.items()}
    with torch.no_grad():
        logps = trainer._get_per_token_logps_and_entropies(
            trainer.model, torch.cat([micro["prompt_ids"], micro["completion_ids"]], 1),
            torch.cat([micro["prompt_mask"], micro["completion_mask"]], 1), micro["completion_ids"].size(1))[0]
    micro["advantages"] = torch.tensor([1.0, -1.0])
    micro["old_per_token_logps"] = logps
    base = trainer.compute_loss(trainer.model, dict(micro)).item()
    shifted = logps + 30.0 * (micro["tool_mask"] == 0)
    # (the two losses may take two exact passes while this new shape is measured: they agree to fp32 rounding; a
    # tool token in the loss would move it by far more)
    assert trainer.compute_loss(trainer.model, dict(micro, old_per_token_logps=shifted)).item() == pytest.approx(
        base, rel=1e-6, abs=1e-7)
    on_own = logps + 30.0 * (micro["tool_mask"] == 1) * micro["completion_mask"]
    assert trainer.compute_loss(trainer.model, dict(micro, old_per_token_logps=on_own)).item() != pytest.approx(base)
    # Records and metrics see the trajectory
    rows = [json.loads(line) for line in (tmp_path / "out" / "completions.jsonl").read_text().splitlines()]
    assert rows and all(r["rewards"]["accuracy_reward"] == 1.0 for r in rows)  # the final answer, not the tool's output
    roles = [turn["role"] for turn in rows[0]["trajectory"]]
    assert roles == ["assistant", "tool", "assistant"] and "jail" in rows[0]["trajectory"][1]["content"]
    logged = [e for e in trainer.state.log_history if "tools/rollouts_using" in e]
    assert logged and logged[0]["tools/rollouts_using"] == 1.0 and logged[0]["tools/calls_per_rollout"] == 1.0


@pytest.mark.slow
def test_turn_after_turn_the_jail_runs_no_more_than_each_rollouts_budget(tmp_path, tool_model):
    from r1kit.run import pipeline as runs

    run = tool_run(tmp_path, *tool_model, max_steps=1, tool_calls_per_rollout=2, max_tool_calling_iterations=3,
                   max_completion_length=1024)
    three = "\n".join('<tool_call>\n{"name": "python", "arguments": {"code": "print(' + str(i) + ')"}}\n</tool_call>'
                      for i in range(3)) + "<|im_end|>"
    script_policy(run.trainer, first_turn=three, after_tool=three)  # every turn asks for three calls
    provider = run.trainer._python_environment().provider
    executed, execute = [], provider.execute
    provider.execute = lambda programs: executed.extend(programs) or execute(programs)
    runs.train(run)
    # two calls a rollout: the first turn's first two (the same code in every rollout: run once each); later turns
    # have nothing left to read (before: two more per turn, three turns)
    assert sorted(p.code for p in executed) == ["print(0)", "print(1)"]


@pytest.mark.slow
def test_a_reward_reads_the_final_answer_not_the_tools_output(tmp_path, tool_model):
    from r1kit.run import pipeline as runs

    run = tool_run(tmp_path, *tool_model, max_steps=1)
    script_policy(run.trainer, after_tool="<answer>41</answer><|im_end|>")  # the tool printed 42; the reply says 41
    runs.train(run)
    rows = [json.loads(line) for line in (tmp_path / "out" / "completions.jsonl").read_text().splitlines()]
    assert rows and all(r["rewards"]["accuracy_reward"] == 0.0 for r in rows)


@pytest.mark.slow
def test_an_environment_that_samples_its_start_gives_each_group_one_start(tmp_path, tool_model):
    from r1kit.run import pipeline as runs
    from tests.tools_for_tests import RandomStart

    run = tool_run(tmp_path, *tool_model, tools=[], environment="tests.tools_for_tests:RandomStart",
                   num_generations=2, per_device_train_batch_size=4, max_steps=2)
    asked = script_policy(run.trainer, first_turn='<tool_call>\n{"name": "look", "arguments": {}}\n</tool_call><|im_end|>')
    RandomStart.starts.clear()
    runs.train(run)
    starts = [s for s in RandomStart.starts]
    assert len(starts) >= 8  # 2 steps x 4 rollouts (reset once per rollout and batch)
    groups = [starts[i : i + 2] for i in range(len(starts) - len(starts) % 2 - 8, len(starts), 2)]
    assert all(a == b for a, b in groups)  # the two members of each group started alike
    assert len({g[0] for g in groups}) > 1  # and groups differ
    replies = [text for text in asked if "<tool_response>" in text]
    assert replies and all(any(str(s) in text for s in starts) for text in replies)  # the tool saw that start


@pytest.mark.slow
def test_with_async_rollouts_first_turns_are_read_ahead_and_later_turns_generated_on_demand(
        tmp_path, tool_model, monkeypatch):
    """The tool loop under async_rollouts: the producer's generator writes each rollout's first turn ahead (its
    prompt is the question); a turn after a tool's reply is a prompt nobody read ahead, generated urgently; the
    calls run in the jail and the answer after them is what is rewarded."""
    from r1kit.run import pipeline as runs
    from r1kit.training.generators import TransformersGenerator

    run = tool_run(tmp_path, *tool_model, async_rollouts=True)
    tokenizer = run.trainer.processing_class
    asked = []

    def scripted(self, prompt_ids, num_generations, seed):
        replies = []
        for ids in prompt_ids:
            text = tokenizer.decode(ids)
            asked.append(text)
            replies.append(tokenizer(ANSWER_TURN if "<tool_response>" in text else TOOL_TURN,
                                     add_special_tokens=False)["input_ids"])
        return replies, [[-1.0] * len(r) for r in replies]

    monkeypatch.setattr(TransformersGenerator, "generate", scripted)
    runs.train(run)
    continued = [text for text in asked if "<tool_response>" in text]
    assert continued and all("42 65534 jail" in text for text in continued)
    totals = json.loads((tmp_path / "out" / "rollouts.json").read_text())["totals"]
    assert totals["batches_read_ahead"] == 2 and totals["rows_on_demand"] == len(continued) == 2 * 4
    rows = [json.loads(line) for line in (tmp_path / "out" / "completions.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 4 and all(r["rewards"]["accuracy_reward"] == 1.0 for r in rows)
    assert [turn["role"] for turn in rows[0]["trajectory"]] == ["assistant", "tool", "assistant"]


def test_r1kits_compact_tool_template_renders_a_tool_conversation_and_parses_its_replies():
    """`chat_template: r1kit-tools`, for small models: a tool prompt of a few dozen characters (Qwen2.5's is hundreds),
    replies that transformers parses back into tool calls (its response template), and TRL accepts it."""
    from trl.chat_template_utils import is_chat_template_prefix_preserving, parse_response, supports_tool_calling

    from r1kit.loading.modeling import build_char_tokenizer, set_chat_template

    tokenizer = build_char_tokenizer()
    set_chat_template(tokenizer, "r1kit-tools")
    assert supports_tool_calling(tokenizer) and is_chat_template_prefix_preserving(tokenizer)
    tools = [python_environment(LIMITS, Recording())().python]
    question = [{"role": "user", "content": "What is 482 * 731?"}]
    prompt = tokenizer.apply_chat_template(question, tools=tools, tokenize=False, add_generation_prompt=True)
    assert len(prompt) < 90 and "python" in prompt
    prefix = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    reply = '<tool_call>{"name": "python", "arguments": {"code": "print(482*731)"}}</tool_call><|im_end|>'
    parsed = parse_response(tokenizer, tokenizer(reply, add_special_tokens=False)["input_ids"], prefix=prefix, tools=tools)
    assert python_calls([parsed]) == ["print(482*731)"]
    rendered = tokenizer.apply_chat_template(question + [parsed], tools=tools, tokenize=False)
    assert rendered == prompt + reply  # the call renders back as written: generation and training see the same text


# --- the model's turns are hostile input: a call that cannot be parsed or taken is plain text ----------------------
def call_reply(arguments: str, name: str = '"python"') -> str:
    return '<tool_call>{"name": ' + name + ', "arguments": ' + arguments + '}</tool_call><|im_end|>'


HOSTILE_TURNS = {
    "arguments nested 600 deep": call_reply('{"a":' * 600 + "1" + "}" * 600),  # TRL's parser: RecursionError
    "code nested 600 deep": call_reply('{"code": ' + "[" * 600 + "]" * 600 + "}"),
    "arguments 17 deep": call_reply('{"a":' * 17 + "1" + "}" * 17),
    "a list for arguments": call_reply("[1, 2]"),
    "a string for arguments": call_reply('"print(1)"'),
    "an empty name": call_reply('{"code": "print(1)"}', name='""'),
    "two megabytes of arguments": call_reply('{"code": "' + "x" * (2 << 20) + '"}'),
    "a lone surrogate": call_reply('{"code": "\\ud800"}'),
    "ten thousand arguments": call_reply("{" + ", ".join(f'"k{i}": {i}' for i in range(10_001)) + "}"),
}


@pytest.fixture(scope="module")
def tool_parsing():
    from trl.chat_template_utils import parse_response

    from r1kit.loading.modeling import build_char_tokenizer, set_chat_template
    from r1kit.training.tools import checked_response

    tokenizer = build_char_tokenizer()
    set_chat_template(tokenizer, "r1kit-tools")
    tools = [python_environment(LIMITS, Recording())().python]
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is 482 * 731?"}], tools=tools,
                                           tokenize=False, add_generation_prompt=True)
    prefix = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    checked = checked_response(parse_response)
    return lambda reply: checked(tokenizer, tokenizer(reply, add_special_tokens=False)["input_ids"], prefix=prefix,
                                 tools=tools)


@pytest.mark.parametrize("name", list(HOSTILE_TURNS))
def test_a_turn_whose_calls_cannot_be_parsed_or_taken_is_plain_text_with_no_call(tool_parsing, name):
    from r1kit.training import tools

    before = tools.UNPARSED_TURNS[0]
    parsed = tool_parsing(HOSTILE_TURNS[name])
    assert "tool_calls" not in parsed and python_calls([parsed]) == []
    assert isinstance(parsed["content"], str) and parsed["content"].startswith("<tool_call>")
    parsed["content"].encode("utf-8")  # whatever the model wrote, the text renders and encodes
    assert tools.UNPARSED_TURNS[0] == before + 1


def test_a_well_formed_call_is_still_a_call_and_duplicate_keys_keep_the_last_as_json_does(tool_parsing):
    assert python_calls([tool_parsing(call_reply('{"code": "print(482*731)"}'))]) == ["print(482*731)"]
    assert python_calls([tool_parsing(call_reply('{"a":' * 15 + '{"code": 1}' + "}" * 15))]) == []  # no code: no run
    # the call run is the one recorded and rendered back: one parse, whatever the duplicates
    assert python_calls([tool_parsing(call_reply('{"code": "print(1)", "code": "print(2)"}'))]) == ["print(2)"]


@pytest.mark.slow
def test_a_policy_that_writes_a_call_nested_600_deep_trains_on_as_plain_text(tmp_path, tool_model):
    """It made TRL's response parser raise RecursionError, and the training run died."""
    from r1kit.run import pipeline as runs

    run = tool_run(tmp_path, *tool_model, max_steps=1, max_completion_length=2048)
    script_policy(run.trainer, first_turn=HOSTILE_TURNS["arguments nested 600 deep"])
    runs.train(run)
    rows = [json.loads(line) for line in (tmp_path / "out" / "completions.jsonl").read_text().splitlines()]
    assert rows and all("trajectory" not in r and r["completion"].startswith("<tool_call>") for r in rows)  # one turn
    assert all(r["rewards"]["accuracy_reward"] == 0.0 for r in rows)  # no answer: wrong, not unjudged
    logged = [e for e in run.trainer.state.log_history if "tools/unparsed_turns" in e]
    assert logged and logged[0]["tools/unparsed_turns"] > 0


# --- the shipped recipe: the loop offline, on CPU, with the built-in tool-calling model --------------------------
TOOLS_RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "demo" / "grpo_tools.yaml"


def test_the_shipped_tool_calling_model_is_small_loads_offline_and_renders_tool_calls():
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.chat_template_utils import supports_tool_calling

    from r1kit.loading.modeling import TOOLS_MODEL, resolve_model_path

    assert resolve_model_path("r1kit:demo-tools") == str(TOOLS_MODEL)
    assert sum(p.stat().st_size for p in TOOLS_MODEL.iterdir()) < 4 << 20
    assert 0.3e6 < AutoModelForCausalLM.from_pretrained(TOOLS_MODEL).num_parameters() < 1e6
    assert supports_tool_calling(AutoTokenizer.from_pretrained(TOOLS_MODEL))  # r1kit-tools, saved with it
    assert json.loads((TOOLS_MODEL / "build_summary.json").read_text())["heldout_100_greedy"]["tool_use"] == 1.0


@pytest.mark.slow
def test_the_shipped_tools_recipe_dry_runs_and_trains_two_steps_offline_through_the_jail(tmp_path, capsys):
    """recipes/demo/grpo_tools.yaml as a user runs it: its dry run, then 2 steps; every rollout's call ran in the
    jail (the tool's turn is what Python prints for the call's code) and the records and metrics keep the loop."""
    import re

    from r1kit.cli import main

    assert main(["grpo", "--config", str(TOOLS_RECIPE), "--dry-run"]) == 0
    assert "recipe OK" in capsys.readouterr().out
    out = tmp_path / "out"
    assert main(["grpo", "--config", str(TOOLS_RECIPE), "--max_steps", "2", "--output_dir", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "completions.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 8 and {r["step"] for r in rows} == {1, 2}
    ran = calling = 0
    for row in rows:
        turns = row["trajectory"]
        calls = [c for t in turns if t["role"] == "assistant" for c in t.get("tool_calls") or []]
        replies = [t["content"] for t in turns if t["role"] == "tool"]
        assert len(calls) == len(replies) and turns[-1]["role"] == "assistant", turns  # each call answered
        calling += bool(calls)
        for call, reply in zip(calls, replies):
            sum_ = re.fullmatch(r"print\((\d+)\+(\d+)\)", call["arguments"]["code"])
            if sum_:  # the jail's output: what Python prints for that code
                assert reply == f"{int(sum_[1]) + int(sum_[2])}\n", (call, reply)
                ran += 1
        answer = re.search(r"<answer>(\d+)</answer>", turns[-1]["content"])
        gold = sum(map(int, row["prompt"].rstrip("=").split("+")))  # r1kit:addition's "a+b="
        assert row["rewards"]["accuracy_reward"] == float(bool(answer) and int(answer[1]) == gold)
    assert calling >= 0.75 * len(rows) and ran >= len(rows) // 2  # (sampled at temperature 1: a call may break)
    logged = [e for e in json.loads((out / "trainer_state.json").read_text())["log_history"] if "tools/rollouts_using" in e]
    assert [e["step"] for e in logged] == [1, 2]
    assert all(e["tools/rollouts_using"] >= 0.5 and e["tools/calls_per_rollout"] > 0
               and e["tools/infrastructure_failures"] == 0.0 for e in logged)
