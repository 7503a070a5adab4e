"""Supervised fine-tuning on TRL's `SFTTrainer`: the cold-start stage of the R1 recipe.

    r1kit sft --config recipes/demo/sft.yaml

With `model_name_or_path: r1kit:scratch` it builds a character-level tokenizer and a small Llama from scratch
(sizes from the recipe) and teaches it worked solutions of the built-in addition task. `stop_at_accuracy` stops
training once greedy held-out accuracy reaches a target, deliberately early, so that GRPO has room to improve it;
`publish_to` copies the final model and tokenizer to a folder (the demo checkpoint r1kit ships).
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

logger = logging.getLogger("r1kit")


@dataclass
class SFTScriptArguments:
    """Data and model-construction arguments of an SFT run.

    Args:
        dataset_name (`str`, defaults to `"r1kit:addition"`): the built-in task whose worked solutions are learned.
        train_size (`int`, defaults to `20000`): training problems generated.
        heldout_size (`int`, defaults to `200`): test problems for the accuracy checks.
        eval_every_steps (`int`, defaults to `25`): steps between accuracy checks.
        stop_at_accuracy (`float` or `None`, defaults to `None`): stop once held-out accuracy reaches this.
        hidden_size / num_layers / num_heads (`int`): model size when building from scratch.
        publish_to (`str` or `None`, defaults to `None`): copy the final model and tokenizer here.
        characters (`str` or `None`, defaults to `None`): vocabulary of a tokenizer built from scratch (all printable
            ASCII when `None`); the demo uses digits only, so that sampling cannot stray into letters.
    """

    dataset_name: str = field(default="r1kit:addition", metadata={"help": "Built-in task to learn."})
    train_size: int = field(default=20000, metadata={"help": "Training problems generated."})
    heldout_size: int = field(default=200, metadata={"help": "Held-out problems for accuracy checks."})
    eval_every_steps: int = field(default=25, metadata={"help": "Steps between accuracy checks."})
    stop_at_accuracy: float | None = field(default=None, metadata={"help": "Stop once held-out accuracy reaches this."})
    hidden_size: int = field(default=128, metadata={"help": "Hidden size of a model built from scratch."})
    num_layers: int = field(default=4, metadata={"help": "Layers of a model built from scratch."})
    num_heads: int = field(default=4, metadata={"help": "Attention heads of a model built from scratch."})
    publish_to: str | None = field(default=None, metadata={"help": "Copy the final model and tokenizer here."})
    characters: str | None = field(default=None, metadata={"help": "Characters of a tokenizer built from scratch."})


def build_or_load(script_args: SFTScriptArguments, model_args, training_args):
    from r1kit.modeling import build_char_tokenizer, build_tiny_llama, get_model, get_tokenizer

    if model_args.model_name_or_path == "r1kit:scratch":
        tokenizer = build_char_tokenizer(script_args.characters) if script_args.characters else build_char_tokenizer()
        model = build_tiny_llama(tokenizer, script_args.hidden_size, script_args.num_layers, script_args.num_heads,
                                 seed=training_args.seed)
        return model, tokenizer
    return get_model(model_args, training_args), get_tokenizer(model_args, training_args)


def main(script_args: SFTScriptArguments, training_args, model_args) -> dict:
    from datasets import Dataset
    from transformers import set_seed
    from trl import SFTTrainer

    from r1kit.callbacks import HeldOutAccuracyCallback
    from r1kit.data import SMALL_ROWS, progress_bars
    from r1kit.preflight import check_sft_inputs
    from r1kit.tasks import addition_problems, sft_rows

    set_seed(training_args.seed)
    logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s", level=logging.INFO)
    check_sft_inputs(script_args, training_args, model_args)  # before anything loads
    model, tokenizer = build_or_load(script_args, model_args, training_args)
    logger.info("Model: %s parameters", f"{sum(p.numel() for p in model.parameters()):,}")
    train = Dataset.from_list(sft_rows("train", script_args.train_size, training_args.seed))
    heldout = addition_problems("test", script_args.heldout_size)
    tracker = HeldOutAccuracyCallback(
        tokenizer, [r["prompt"] for r in heldout], [r["solution"] for r in heldout], training_args.output_dir,
        every_steps=script_args.eval_every_steps, max_new_tokens=64, stop_at=script_args.stop_at_accuracy,
    )
    with progress_bars(len(train) >= SMALL_ROWS):  # TRL's tokenising passes over small data flash past
        trainer = SFTTrainer(model=model, args=training_args, train_dataset=train, processing_class=tokenizer,
                             callbacks=[tracker])
    result = trainer.train()
    trainer.save_model(training_args.output_dir)
    final = tracker.history[-1] if tracker.history else {}
    summary = {"steps": trainer.state.global_step, "train_seconds": round(result.metrics["train_runtime"], 1),
               "heldout_accuracy": final.get("accuracy"), "curve": [(r["step"], r["accuracy"]) for r in tracker.history]}
    (Path(training_args.output_dir) / "sft_summary.json").write_text(json.dumps(summary, indent=2))
    if script_args.publish_to:
        publish(Path(training_args.output_dir), Path(script_args.publish_to), summary)
    return summary


SHIPPED_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "chat_template.jinja", "special_tokens_map.json")


def publish(source: Path, target: Path, summary: dict) -> None:
    """Copies the model and tokenizer files (no optimizer or trainer state) to `target`."""
    target.mkdir(parents=True, exist_ok=True)
    for name in SHIPPED_FILES:
        if (source / name).exists():
            shutil.copyfile(source / name, target / name)
    (target / "sft_summary.json").write_text(json.dumps(summary, indent=2))
    logger.info("Published the model to %s", target)


def cli(argv: list[str]) -> dict | None:
    """Parses a recipe and runs it; returns the summary (None for --help)."""
    from r1kit.configs import ModelConfig, SFTConfig, parse_args

    if "-h" in argv or "--help" in argv:
        return None
    # The GRPO parser's strictness: unknown keys, wrong types and choices are one-line errors naming the key.
    script_args, training_args, model_args = parse_args(
        argv, default_config=None, dataclass_types=(SFTScriptArguments, SFTConfig, ModelConfig)
    )
    return main(script_args, training_args, model_args)


if __name__ == "__main__":
    from r1kit.cli import sft_command

    sys.exit(sft_command(sys.argv[1:]))
