"""Evaluation: held-out accuracy of a model on prompts with gold answers, scored with the `accuracy` reward's judge.

`greedy_accuracy` generates with plain `transformers` (batched, left-padded, greedy) and checks each answer with
math-verify, the same way the `accuracy` reward does in training, so the number it reports is the reward's.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)


def chat_prompts(tokenizer, problems: list[str], system_prompt: str | None = None) -> list[str]:
    prompts = []
    for problem in problems:
        messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
        messages.append({"role": "user", "content": problem})
        prompts.append(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
    return prompts


def generate(model, tokenizer, prompts: list[str], max_new_tokens: int, batch_size: int = 64,
             temperature: float = 0.0, top_p: float = 1.0) -> list[str]:
    """Completions of `prompts` (already chat-formatted); greedy when `temperature` is 0."""
    import torch

    side, tokenizer.padding_side = tokenizer.padding_side, "left"
    was_training = model.training
    model.eval()
    completions: list[str] = []
    try:
        for i in range(0, len(prompts), batch_size):
            batch = tokenizer(prompts[i : i + batch_size], return_tensors="pt", padding=True, add_special_tokens=False)
            batch = {k: v.to(model.device) for k, v in batch.items()}
            sampling = {"do_sample": True, "temperature": temperature, "top_p": top_p} if temperature > 0 else {"do_sample": False}
            with torch.inference_mode():
                out = model.generate(
                    **batch, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                    eos_token_id=tokenizer.eos_token_id, **sampling,
                )
            new_tokens = out[:, batch["input_ids"].shape[1] :]
            completions += tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
    finally:
        tokenizer.padding_side = side
        model.train(was_training)
    return completions


def score_answers(completions: list[str], golds: list[Any]) -> list[float | None]:
    """1.0 / 0.0 per completion (None for an unparseable gold), exactly as the `accuracy` reward scores."""
    from r1kit.rewards.verify import CORRECT, UNPARSEABLE_GOLD, judge_batch

    return [None if o == UNPARSEABLE_GOLD else float(o == CORRECT) for o in judge_batch(golds, completions)]


def greedy_accuracy(model, tokenizer, problems: list[str], golds: list[Any], system_prompt: str | None = None,
                    max_new_tokens: int = 64, batch_size: int = 64) -> tuple[float, list[dict]]:
    """Held-out accuracy (mean over judgeable samples) and the per-sample details."""
    completions = generate(model, tokenizer, chat_prompts(tokenizer, problems, system_prompt), max_new_tokens, batch_size)
    scores = score_answers(completions, golds)
    judged = [s for s in scores if s is not None]
    details = [{"problem": p, "gold": g, "completion": c, "score": s} for p, g, c, s in zip(problems, golds, completions, scores)]
    return (sum(judged) / len(judged) if judged else 0.0), details
