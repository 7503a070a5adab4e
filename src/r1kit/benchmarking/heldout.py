"""Held-out accuracy during training: greedy answers to the dataset's test prompts, scored as the reward scores them.

`greedy_accuracy` generates greedily on the model being trained: with plain `transformers` (batched, left-padded), or
through `complete` when the trainer hands one over (its colocated vLLM engine at the current weights), and checks each
answer with math-verify, the same way the `accuracy` reward does in training, so the number it reports is
the reward's (`r1kit.benchmarking.callbacks.HeldOutAccuracyCallback`, the `heldout_accuracy` callback).

In a run with tools, `tool_loop_replies` answers each problem the way a rollout does (greedily): a reply that calls
tools gets their results as tool turns and the model goes on, up to `max_tool_calling_iterations`; the final reply is
graded, and the calls are counted, so held-out accuracy and tool use are measured together.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from r1kit.benchmarking.generation import GenerationStopped, generate
from r1kit.benchmarking.judges import score_answers
from r1kit.machine import on_any_rank
from r1kit.rewards.verify import DEFAULT_TIMEOUT

logger = logging.getLogger(__name__)


def chat_prompts(tokenizer, problems: list[str], system_prompt: str | None = None) -> list[str]:
    """Each problem as a user message (after `system_prompt`, when given), in the tokenizer's chat template, ready
    for the assistant's answer."""
    prompts = []
    for problem in problems:
        messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
        messages.append({"role": "user", "content": problem})
        prompts.append(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
    return prompts


def greedy_accuracy(model, tokenizer, problems: list[str], golds: list[Any], system_prompt: str | None = None,
                    max_new_tokens: int = 64, batch_size: int = 64, timeout: float = DEFAULT_TIMEOUT,
                    grade: Callable[..., list[float | None]] = score_answers,
                    complete: Callable[[list[str], int], list[str]] | None = None,
                    should_stop: Callable[[], bool] | None = None,
                    progress: str | None = None,
                    ranks: tuple[int, int] | None = None,
                    tool_loop: ToolLoop | None = None) -> tuple[float | None, list[dict]]:
    """Held-out accuracy (mean over judgeable samples) and the per-sample details.

    Args:
        max_new_tokens (`int`, defaults to `64`): tokens generated per answer at most.
        batch_size (`int`, defaults to `64`): prompts generated together.
        timeout (`float`, defaults to `DEFAULT_TIMEOUT`): seconds to judge one answer (the recipe's `reward_timeout`).
        grade (`Callable`, defaults to `score_answers`): `grade(completions, golds, timeout)` scores the answers
            (math-verify, as `accuracy`; `r1kit.benchmarking.judges.score_gym_answers` for reasoning-gym rows, whose golds are
            their `reasoning_gym` records).
        complete (`Callable` or `None`, defaults to `None`): `complete(prompts, max_new_tokens)` returns one greedy
            completion per chat-formatted prompt (a vLLM engine); `None` generates with `transformers` on `model`.
        should_stop (`Callable` or `None`): asked after every generated token (with `transformers`) and before
            grading; when it says True, `GenerationStopped` is raised (a stop signal: the evaluation is dropped).
        progress (`str` or `None`): a description for the progress bar (per token with `transformers`; a line per
            stage with an engine, which reports no tokens).
        ranks (`(rank, world_size)` or `None`, defaults to `None`): under sharded weights every rank takes part in
            every forward call, so every rank calls this: each generates its share of the prompts, the stop is agreed
            at the end, and the main process (rank 0) grades them all; the others get `(None, [])`.
        tool_loop (`ToolLoop` or `None`, defaults to `None`): the run's tools: each problem is answered through the
            tool loop with `transformers` (`tool_loop_replies`), and each detail counts its `tool_calls`. Not with
            `ranks` or `complete` (the callback evaluates without the loop there, and says so).
    """
    prompts = chat_prompts(tokenizer, problems, system_prompt)
    calls = None
    if tool_loop is not None:
        completions, calls = tool_loop_replies(model, tokenizer, problems, tool_loop, system_prompt, max_new_tokens,
                                               batch_size, should_stop=should_stop)
    elif ranks is not None and ranks[1] > 1:
        completions = generate_on_every_rank(model, tokenizer, prompts, max_new_tokens, batch_size, *ranks, progress)
        if on_any_rank(should_stop is not None and should_stop(), ranks[1]):
            raise GenerationStopped()
        if completions is None:
            return None, []
    elif complete is not None:
        if progress:
            logger.info("%s: generating %d answers with the engine", progress, len(prompts))
        completions = complete(prompts, max_new_tokens)
    else:
        completions = generate(model, tokenizer, prompts, max_new_tokens, batch_size, should_stop=should_stop,
                               progress=progress)
    if should_stop is not None and should_stop():
        raise GenerationStopped()
    if progress:
        logger.info("%s: grading %d answers", progress, len(completions))
    scores = grade(completions, golds, timeout)
    judged = [s for s in scores if s is not None]
    details = [{"problem": p, "gold": g, "completion": c, "score": s} for p, g, c, s in zip(problems, golds, completions, scores)]
    for detail, count in zip(details, calls or []):
        detail["tool_calls"] = count
    return (sum(judged) / len(judged) if judged else 0.0), details


MAX_CALLS_PER_REPLY = 8  # tool calls of one held-out reply that run; the rest are answered as not run


@dataclass
class ToolLoop:
    """What a held-out reply may call: the run's standalone `tools` (functions) and `environment_factory` (a class
    whose public methods are tools, as TRL's environments), `max_iterations` tool turns per reply, and at most
    `max_sessions` environments open at once (a server's sessions: the problems go through in groups that size)."""

    tools: list = field(default_factory=list)
    environment_factory: Callable | None = None
    max_iterations: int = 2
    max_sessions: int | None = None
    # Called with a turn's replies that call tools and their environments before the calls run, one by one: the
    # run's Python tool runs them all at once there (`r1kit.training.tools.prefetch`), as in training
    prepare: Callable[[list[dict], list], Any] | None = None

    def session(self, row: dict) -> tuple[Any, dict[str, Callable], str | None]:
        """A fresh environment reset with the problem's row (as a rollout's), the tools by name, and what its reset
        said (TRL appends that to the prompt)."""
        import inspect

        by_name = {tool.__name__: tool for tool in self.tools}
        environment, said = None, None
        if self.environment_factory is not None:
            environment = self.environment_factory()
            said = environment.reset(**row)
            for name, _ in inspect.getmembers(type(environment), predicate=inspect.isfunction):
                if name not in ("reset", "get_reward") and not name.startswith("_"):
                    by_name[name] = getattr(environment, name)
        return environment, by_name, said if isinstance(said, str) else None


def end_session(environment) -> None:
    """Ends a held-out environment's episode: an OpenEnv session is closed (its reward read), never left open."""
    ending = getattr(environment, "get_reward", None) if hasattr(environment, "_close") else None
    try:
        if ending is not None:
            ending()
    except Exception:  # noqa: BLE001 - the episode is over either way
        logger.debug("a held-out environment did not end cleanly", exc_info=True)


def tool_loop_replies(model, tokenizer, problems: list[str], loop: ToolLoop, system_prompt: str | None = None,
                      max_new_tokens: int = 64, batch_size: int = 64, rows: list[dict] | None = None,
                      should_stop: Callable[[], bool] | None = None) -> tuple[list[str], list[int]]:
    """(each problem's final reply, the tool calls it made): greedy turns through the tool loop, every turn of a
    group of problems generated together (`loop.max_sessions` problems a group, all of them without a cap). A call's
    failure (an unknown tool, wrong arguments, an exception) is its result's text, as in TRL's loop; a reply's calls
    past `MAX_CALLS_PER_REPLY` are answered without running. Every environment's episode is ended after its group."""
    finals, calls = [""] * len(problems), [0] * len(problems)
    group = loop.max_sessions or len(problems) or 1
    for start in range(0, len(problems), group):
        indices = list(range(start, min(start + group, len(problems))))
        sessions = []
        try:
            for i in indices:
                sessions.append(loop.session(rows[i] if rows else {"prompt": problems[i]}))
            _run_group(model, tokenizer, [problems[i] for i in indices], sessions, loop, system_prompt, max_new_tokens,
                       batch_size, should_stop, finals, calls, indices)
        finally:
            for environment, _, _ in sessions:
                end_session(environment)
    return finals, calls


def _run_group(model, tokenizer, problems: list[str], sessions: list, loop: ToolLoop, system_prompt: str | None,
               max_new_tokens: int, batch_size: int, should_stop, finals: list, calls: list, where: list[int]) -> None:
    from trl.chat_template_utils import parse_response  # deferred: trl

    histories = []
    for problem, (_, _, said) in zip(problems, sessions):
        messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
        histories.append(messages + [{"role": "user", "content": problem + (said or "")}])
    active = list(range(len(problems)))
    for turn in range(loop.max_iterations + 1):
        if not active:
            break
        tools = [list(sessions[i][1].values()) for i in active]
        texts = [tokenizer.apply_chat_template(histories[i], tools=t or None, tokenize=False, add_generation_prompt=True)
                 for i, t in zip(active, tools)]
        replies = generate(model, tokenizer, texts, max_new_tokens, batch_size, should_stop=should_stop, token_ids=True)
        still = []
        for i, t, text, ids in zip(active, tools, texts, replies):
            prefix = tokenizer(text, add_special_tokens=False)["input_ids"]  # (a response template parses after it)
            reply = _parsed(parse_response, tokenizer, ids, prefix, t)
            finals[where[i]] = reply.get("content") or ""
            histories[i].append(reply)
            if reply.get("tool_calls") and turn < loop.max_iterations:
                still.append(i)
        if still and loop.prepare is not None:
            loop.prepare([histories[i][-1] for i in still], [sessions[i][0] for i in still])
        for i in still:
            reply = histories[i][-1]
            calls[where[i]] += len(reply["tool_calls"])
            histories[i] += _tool_turns(reply["tool_calls"], sessions[i][1])
        active = still


def _parsed(parse_response: Callable, tokenizer, ids: list[int], prefix: list[int], tools: list) -> dict:
    """A generated turn as a message; what cannot be parsed is its plain text (the model's input is hostile)."""
    try:
        reply = parse_response(tokenizer, ids, prefix=prefix, tools=tools or None)
        if isinstance(reply, dict) and isinstance(reply.get("content", ""), str):
            calls = reply.get("tool_calls")
            if calls is None or (isinstance(calls, list) and all(isinstance(c, dict) for c in calls)):
                return reply
    except Exception:  # noqa: BLE001 - whatever the model's text provokes in the parser
        pass
    return {"role": "assistant", "content": tokenizer.decode(ids, skip_special_tokens=True)}


def _tool_turns(tool_calls: list, tools: dict[str, Callable]) -> list[dict]:
    """The tool turns answering a reply's calls."""
    turns = []
    for number, call in enumerate(tool_calls):
        function = call.get("function") if isinstance(call.get("function"), dict) else {}
        name, arguments = str(function.get("name", "")), function.get("arguments")
        if number >= MAX_CALLS_PER_REPLY:
            result = f"Error: more than {MAX_CALLS_PER_REPLY} calls in one turn; this one did not run"
        elif name not in tools or not isinstance(arguments, dict):
            result = {"error": f"Tool {name} not found." if name not in tools else "arguments are not an object"}
        else:
            try:
                result = tools[name](**arguments)
            except Exception as e:  # noqa: BLE001 - the call's failure is its result, as in TRL's loop
                result = {"error": str(e)}
        turns.append({"role": "tool", "name": name, "content": result if isinstance(result, list) else str(result)})
    return turns


def generate_on_every_rank(model, tokenizer, prompts: list[str], max_new_tokens: int, batch_size: int, rank: int,
                           world_size: int, progress: str | None = None) -> list[str] | None:
    """Greedy completions of `prompts`, each rank generating an equal share (the last ones padded with a repeat, so
    that every rank runs as many batches; transformers keeps their token loops in step under FSDP and ZeRO-3), all
    gathered to rank 0, which gets them in order; the other ranks get None. No stop is asked per token: the ranks
    would leave the loop at different tokens."""
    from accelerate.utils import gather_object  # deferred: accelerate

    share = -(-len(prompts) // world_size)
    mine = prompts[rank * share : (rank + 1) * share]
    mine += [prompts[0]] * (share - len(mine))
    done = generate(model, tokenizer, mine, max_new_tokens, max(1, min(batch_size, share)),
                    progress=progress if rank == 0 else None)
    gathered = gather_object([done])
    return [c for part in gathered for c in part][: len(prompts)] if rank == 0 else None
