"""Held-out accuracy during training: greedy answers to the dataset's test prompts, scored as the reward scores them.

`greedy_accuracy` generates greedily on the model being trained: with plain `transformers` (batched, left-padded), or
through `complete` when the trainer hands one over (its colocated vLLM engine at the current weights), and checks each
answer with math-verify, the same way the `accuracy` reward does in training, so the number it reports is
the reward's (`r1kit.benchmarking.callbacks.HeldOutAccuracyCallback`, the `heldout_accuracy` callback).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
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
                    ranks: tuple[int, int] | None = None) -> tuple[float | None, list[dict]]:
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
    """
    prompts = chat_prompts(tokenizer, problems, system_prompt)
    if ranks is not None and ranks[1] > 1:
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
    return (sum(judged) / len(judged) if judged else 0.0), details


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
