"""Training callbacks, named in a recipe's `callbacks:` list, plus the completions log every run writes.

- `heldout_accuracy`: greedy accuracy on the dataset's test split before training, every `heldout_eval_steps` steps
  and at the end, written to `OUTPUT_DIR/heldout_accuracy.jsonl` (what the demo reports and `r1kit report` draws).
- `push_to_hub_revision`: each checkpoint published as revision `{hub_model_revision}-step-{N:09d}` of `hub_model_id`
  (the Hub, or `file:///dir`), in the background.
- `evaluate_benchmarks`: each checkpoint and the final model scored on `benchmarks` in a separate process.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_callback import ProgressCallback

from r1kit import records
from r1kit.benchmarking.generation import GenerationStopped
from r1kit.benchmarking.heldout import ToolLoop, greedy_accuracy
from r1kit.benchmarking.judges import score_answers, score_gym_answers
from r1kit.errors import ConfigError
from r1kit.hub import get_hub_client, revision_name
from r1kit.machine import from_main, on_any_rank
from r1kit.rewards.verify import DEFAULT_TIMEOUT

logger = logging.getLogger(__name__)
shown = logging.getLogger("r1kit.startup")  # plain lines on the main process at the default level (set by the run)

# The Slurm job script `benchmark_launcher: slurm` submits; it ships inside the package (slurm/evaluate.slurm in a
# checkout links to it), so an installed r1kit finds it too.
EVALUATE_SLURM = Path(__file__).parents[1] / "slurm" / "evaluate.slurm"


class EvaluationInterrupted(Exception):
    """A stop signal ended the held-out evaluation that opens training: the run stops before its first step (the
    run's lifecycle says so and exits 75), instead of training a step and saving it first."""

    def __init__(self, step: int):
        super().__init__(f"held-out evaluation at step {step} stopped by a signal")
        self.step = step


class HeldOutAccuracyCallback(TrainerCallback):
    """Greedy held-out accuracy before, during and after training (computed on the main process).

    It generates with `transformers` on the model being trained, unless the trainer hands it an `engine` (see
    `r1kit.training.trainer.ColocatedEngine`): then every process brings its engine to the current weights when an evaluation
    is due (a collective under DeepSpeed or FSDP), and the main process generates with it."""

    def __init__(self, tokenizer, problems: list[str], golds: list[Any], output_dir: str, every_steps: int = 0,
                 system_prompt: str | None = None, max_new_tokens: int = 64, is_main_process: bool = True,
                 stop_at: float | None = None, timeout: float = DEFAULT_TIMEOUT, grade: Callable | None = None):
        self.tokenizer = tokenizer
        self.problems, self.golds = problems, golds
        self.path = Path(output_dir) / "heldout_accuracy.jsonl"
        self.every_steps = every_steps
        self.system_prompt = system_prompt
        self.max_new_tokens = max_new_tokens
        self.is_main_process = is_main_process
        self.stop_at = stop_at  # stop training once held-out accuracy reaches this (the demo's cold start)
        self.timeout = timeout  # seconds to verify one answer: the recipe's reward_timeout, as in training
        self.grade = grade  # None: math-verify against `golds`; else grade(completions, golds, timeout)
        self.engine = None  # set by the trainer: an object with sync() and complete(prompts, max_new_tokens)
        # Set by the run when the weights are sharded (FSDP, ZeRO-3) and no engine generates: every forward call
        # gathers weights from every rank, so every rank generates a share and the main process grades
        self.every_rank = False
        self.rank, self.world_size = (0 if is_main_process else 1), 1  # (from the trainer's arguments at its start)
        self.history: list[dict] = []  # every evaluation of the run, earlier segments (before a resume) included
        self._train_start: float | None = None  # when training began, for the training time of each evaluation
        self._eval_seconds = 0.0  # time spent evaluating, which is not training time
        self._earlier_seconds = 0.0  # training seconds of the segments before a resume
        # Set by the run (`r1kit.run.pipeline.train`): whether a stop signal arrived (an evaluation then ends at the next
        # token, unrecorded), and whether training stopped on one (then no final evaluation is started).
        self.stop_requested: Callable[[], bool] = lambda: False
        self.interrupted: Callable[[], bool] = lambda: False
        self.progress = True  # a progress bar per evaluation (main process)
        # Set by the run when it has tools: held-out replies go through the tool loop (with transformers on one
        # process), and each evaluation records the tool calls per problem beside the accuracy
        self.tool_loop: ToolLoop | None = None

    def training_seconds(self) -> float:
        """Seconds of training so far, evaluations excluded, earlier segments of a resumed run included (what
        equal-time comparisons use)."""
        if self._train_start is None:
            return self._earlier_seconds
        return self._earlier_seconds + time.monotonic() - self._train_start - self._eval_seconds

    def resume_history(self, step: int) -> None:
        """At the start of training at `step`: the evaluations recorded up to it become the history (later rows,
        re-done by this run, and a torn line are dropped from the file), so that a resumed run's records and
        summary cover the whole run, from step 0."""
        records.rewind(self.path, step)
        self.history = [r for r in records.read(self.path) if isinstance(r.get("step"), int)] if self.path.is_file() else []
        self._earlier_seconds = float(self.history[-1].get("train_seconds") or 0.0) if self.history else 0.0

    def evaluate(self, model, step: int) -> float | None:
        """Evaluates, records and returns the accuracy; None when a stop signal ended the evaluation (not recorded:
        a resume from this step evaluates it again)."""
        start = time.monotonic()
        trained = self.training_seconds()
        spread = self.every_rank and self.world_size > 1
        loop = self.tool_loop if not spread and self.engine is None else None
        try:
            accuracy, details = greedy_accuracy(
                model, self.tokenizer, self.problems, self.golds, self.system_prompt, self.max_new_tokens,
                timeout=self.timeout, grade=self.grade or score_answers,
                complete=self.engine.complete if self.engine is not None else None,
                should_stop=self.stop_requested, progress=f"held-out eval, step {step}" if self.progress else None,
                ranks=(self.rank, self.world_size) if spread else None, tool_loop=loop,
            )
        except GenerationStopped:
            self._eval_seconds += time.monotonic() - start
            if self.is_main_process:
                logger.warning("Held-out evaluation at step %d stopped by a signal; not recorded.", step)
            return None
        self._eval_seconds += time.monotonic() - start
        if accuracy is None:  # another rank's share of the generation: the main process grades and records
            return None
        record = {"step": step, "accuracy": accuracy, "seconds": round(time.monotonic() - start, 2), "n": len(self.problems),
                  "train_seconds": round(trained, 2)}
        if loop is not None:
            counts = [d.get("tool_calls", 0) for d in details]
            record["tool_calls"] = round(sum(counts) / max(1, len(counts)), 4)  # per problem
            record["tool_use"] = round(sum(c > 0 for c in counts) / max(1, len(counts)), 4)  # share calling a tool
        self.history.append(record)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        tools = f"; {record['tool_calls']:.2f} tool calls per problem" if "tool_calls" in record else ""
        # A plain line as each is measured, at the default log level (the run's start-up lines' logger)
        shown.info("held-out accuracy at step %d: %.1f%% (%d problems%s)", step, 100 * accuracy, len(self.problems),
                   tools)
        return accuracy

    def _evaluate_if_new(self, model, step: int) -> float | None:
        """Every process calls this when an evaluation is due: all bring the engine up to date, the main one
        evaluates (once per step)."""
        if self.engine is not None:
            self.engine.sync()
        due = self.is_main_process and not any(r["step"] == step for r in self.history)
        if self.every_rank and self.world_size > 1:  # (the history is the main process's)
            return self.evaluate(model, step) if from_main(due, self.world_size) else None
        return self.evaluate(model, step) if due else None

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.rank, self.world_size = getattr(args, "process_index", 0), args.world_size
        if self.is_main_process:
            self.resume_history(state.global_step)
        self._train_start, self._eval_seconds = time.monotonic(), 0.0
        self._evaluate_if_new(model, state.global_step)
        # A signal that reached any process stops every process before the first step; none waits for another
        if on_any_rank(self.stop_requested(), args.world_size):
            raise EvaluationInterrupted(state.global_step)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.every_steps and state.global_step % self.every_steps == 0:
            accuracy = self._evaluate_if_new(model, state.global_step)
            if accuracy is not None and self.stop_at is not None and accuracy >= self.stop_at:
                logger.info("Held-out accuracy %.3f reached stop_at_accuracy %.3f: stopping.", accuracy, self.stop_at)
                control.should_training_stop = True
        return control

    def on_train_end(self, args, state, control, model=None, **kwargs):
        if not self.interrupted():  # a run stopped by a signal saves and exits: no final evaluation first
            self._evaluate_if_new(model, state.global_step)


class CompactProgressCallback(ProgressCallback):
    """The progress bar with the latest reward in its postfix, instead of a printed dict per logging step
    (`compact_progress: true`; the metrics still reach trainer_state.json and `report_to`)."""

    KEYS = {"reward": "reward", "rewards/accuracy_reward/mean": "accuracy", "completions/mean_length": "length"}

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and self.training_bar is not None and logs:
            shown = {name: f"{logs[key]:.3f}" for key, name in self.KEYS.items() if isinstance(logs.get(key), float)}
            if shown:
                self.training_bar.set_postfix(shown, refresh=False)


def _heldout_accuracy(script_args, training_args, dataset, tokenizer, is_main_process) -> TrainerCallback:
    split = script_args.dataset_test_split
    if split not in dataset:
        raise ConfigError(f"callback heldout_accuracy needs a '{split}' split (dataset_test_split); splits: {list(dataset)}")
    test = dataset[split].select(range(min(training_args.heldout_size, len(dataset[split]))))
    # reasoning-gym rows are graded by their generator's scorer (as the reward does), other rows by math-verify.
    gold_column, grade = ("solution", None)
    if "reasoning_gym" in test.column_names:
        from functools import partial

        gold_column, grade = "reasoning_gym", partial(score_gym_answers, mode=script_args.reasoning_gym_answer,
                                                      allow_unsandboxed=script_args.allow_unsandboxed_code_execution)
    if gold_column not in test.column_names:
        raise ConfigError(f"callback heldout_accuracy needs a 'solution' column; columns: {test.column_names}")
    return HeldOutAccuracyCallback(
        tokenizer,
        [str(p) for p in test[script_args.dataset_prompt_column]],
        list(test[gold_column]),
        training_args.output_dir,
        training_args.heldout_eval_steps,
        training_args.system_prompt,
        training_args.max_completion_length,
        is_main_process,
        timeout=script_args.reward_timeout,
        grade=grade,
    )


class PushToHubRevisionCallback(TrainerCallback):
    """On each save (main process only), publishes `checkpoint-N` as revision `{hub_model_revision}-step-{N:09d}` of
    `hub_model_id`, in the background; weights, config and tokenizer go, optimizer and RNG states do not. A failed
    upload is logged and retried, never fatal; training end waits for pending uploads."""

    def __init__(self, hub_model_id: str, base_revision: str, output_dir: str, client=None, retries: int = 3,
                 is_main_process: bool = True):
        from concurrent.futures import ThreadPoolExecutor


        self.client = client or get_hub_client(hub_model_id)
        self.base_revision = base_revision
        self.output_dir = Path(output_dir)
        self.retries = retries
        self.is_main_process = is_main_process
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="r1kit-push")
        self.futures = []
        self.published: list[str] = []

    def on_save(self, args, state, control, **kwargs):
        if not self.is_main_process:
            return

        step = state.global_step
        folder = self.output_dir / f"checkpoint-{step}"
        self.futures.append(self.executor.submit(self._publish, folder, revision_name(self.base_revision, step), step))

    def _publish(self, folder: Path, revision: str, step: int) -> None:
        for attempt in range(1, self.retries + 1):
            try:
                self.client.publish(folder, revision, f"Add {revision} checkpoint (step {step})")
                self.published.append(revision)
                logger.info("Published %s as revision %s", folder, revision)
                return
            except Exception as e:  # noqa: BLE001 - an upload failure must never stop training
                logger.warning("Publishing %s failed (attempt %d/%d): %s", revision, attempt, self.retries, e)
                time.sleep(min(2**attempt, 30))
        logger.error("Giving up publishing %s; the checkpoint stays in %s", revision, folder)

    def on_train_end(self, args, state, control, **kwargs):
        for future in self.futures:
            future.result()
        self.executor.shutdown(wait=True)


def _push_to_hub_revision(script_args, training_args, dataset, tokenizer, is_main_process) -> TrainerCallback:
    return PushToHubRevisionCallback(  # its fields: RunFields.check_run_fields
        training_args.hub_model_id, training_args.hub_model_revision or "main", training_args.output_dir,
        is_main_process=is_main_process,
    )


class EvaluateBenchmarksCallback(TrainerCallback):
    """Evaluates each saved checkpoint, and the final model, on `benchmarks`, in a separate process (so a failing
    evaluation cannot take down training; `launcher: slurm` submits it with sbatch instead). Results land in
    `OUTPUT_DIR/eval/checkpoint-N/<benchmark>.json` (and `eval/final/`), and their metrics are logged as
    `eval/<benchmark>/<metric>` to the trainer's loggers."""

    def __init__(self, benchmarks: list[str], output_dir: str, num_samples: int = 1, max_new_tokens: int = 512,
                 system_prompt: str | None = None, launcher: str = "local", is_main_process: bool = True):
        self.benchmarks = benchmarks
        self.output_dir = Path(output_dir)
        self.num_samples = num_samples
        self.max_new_tokens = max_new_tokens
        self.system_prompt = system_prompt
        self.launcher = launcher
        self.is_main_process = is_main_process
        self.running: list[tuple[int, Any, Path]] = []
        self.finished: dict[str, dict] = {}  # label -> {benchmark: metrics}
        self.failed: list[str] = []
        self.log = None  # the trainer's `log`, given by `attach`: metrics then reach every reporter

    def command(self, model_dir: Path, out: Path, step: int) -> list[str]:

        cmd = [sys.executable, "-m", "r1kit.evaluation", "--model", str(model_dir), "--benchmarks", ",".join(self.benchmarks),
               "--output-dir", str(out), "--step", str(step), "--num-samples", str(self.num_samples),
               "--max-new-tokens", str(self.max_new_tokens)]
        if self.system_prompt:
            cmd += ["--system-prompt", self.system_prompt]
        if self.launcher == "slurm":
            return ["sbatch", "--wait", f"--output={out}.slurm.log", str(EVALUATE_SLURM), *cmd[3:]]
        return cmd

    def launch(self, model_dir: Path, label: str, step: int):

        out = self.output_dir / "eval" / label
        out.mkdir(parents=True, exist_ok=True)
        log = (out / "evaluate.log").open("w")
        try:
            process = subprocess.Popen(self.command(model_dir, out, step), stdout=log, stderr=subprocess.STDOUT)
        except OSError as e:  # e.g. sbatch missing: the run goes on
            logger.warning("Could not start the evaluation of %s: %s", label, e)
            self.failed.append(label)
            return None
        finally:
            log.close()
        self.running.append((step, process, out))
        return process

    def collect(self, wait: bool = False) -> None:
        still = []
        for step, process, out in self.running:
            if process.poll() is None and not wait:
                still.append((step, process, out))
                continue
            code = process.wait()
            if code != 0:
                logger.warning("Evaluation of %s failed (exit %s); training is unaffected. Log: %s", out.name, code, out / "evaluate.log")
                self.failed.append(out.name)
                continue
            metrics = {p.stem: json.loads(p.read_text())["metrics"] for p in out.glob("*.json")}
            self.finished[out.name] = metrics
            if self.log is not None:
                flat = {f"eval/{b}/{k}": v for b, m in metrics.items() for k, v in m.items() if isinstance(v, (int, float))}
                self.log(flat)
        self.running = still

    def attach(self, trainer) -> None:
        """Logs evaluation metrics through `trainer.log`, so they reach trainer_state.json and every `report_to`
        integration. (Trainer hooks receive no trainer, and reporters run before user callbacks in `on_log`: a hook
        alone could write the state, not reach the reporters.)"""
        self.log = trainer.log

    def on_save(self, args, state, control, **kwargs):
        if self.is_main_process:
            self.launch(self.output_dir / f"checkpoint-{state.global_step}", f"checkpoint-{state.global_step}", state.global_step)

    def on_step_end(self, args, state, control, **kwargs):
        if self.running:
            self.collect()

    def finish(self, model_dir: str | Path, step: int) -> None:
        """After the final save: evaluates the final model and waits for every evaluation."""
        if not self.is_main_process:
            return
        self.launch(Path(model_dir), "final", step)
        self.collect(wait=True)


def _evaluate_benchmarks(script_args, training_args, dataset, tokenizer, is_main_process) -> TrainerCallback:
    return EvaluateBenchmarksCallback(  # its fields: RunFields.check_run_fields
        training_args.benchmarks, training_args.output_dir, training_args.benchmark_num_samples,
        training_args.benchmark_generation_length(), training_args.system_prompt,
        training_args.benchmark_launcher, is_main_process,
    )


def check_hub_revision(training_args, client=None) -> None:
    """Before training: refuse to overwrite published revisions unless `overwrite_hub_revision` (Open-R1 defines
    this check but never calls it)."""
    if not training_args.push_to_hub_revision or training_args.overwrite_hub_revision:
        return
    if not training_args.hub_model_id:
        raise ConfigError("push_to_hub_revision needs hub_model_id (a Hub repo id or file:///some/dir)")
    client = client or get_hub_client(training_args.hub_model_id)
    prefix = f"{training_args.hub_model_revision or 'main'}-step-"
    existing = client.revisions_with_content(prefix)
    if existing:
        raise ConfigError(
            f"revision(s) {existing[:3]}{'...' if len(existing) > 3 else ''} of {training_args.hub_model_id} already "
            "exist with content; set overwrite_hub_revision: true to overwrite them, or pick another hub_model_revision"
        )


CALLBACKS: dict[str, Callable[..., TrainerCallback]] = {
    "heldout_accuracy": _heldout_accuracy,
    "push_to_hub_revision": _push_to_hub_revision,
    "evaluate_benchmarks": _evaluate_benchmarks,
}


def check_names(names: list[str], allowed: tuple[str, ...] | None = None) -> None:
    """Every name in a recipe's `callbacks` is a callback of `allowed` (default: every callback r1kit has)."""
    allowed = tuple(CALLBACKS) if allowed is None else allowed
    unknown = [name for name in names if name not in allowed]
    if unknown:
        raise ConfigError(f"callbacks: unknown callback(s) {unknown}; valid names: {', '.join(allowed)}")


def callback_names(training_args) -> list[str]:
    """The callbacks a recipe asks for. As in Open-R1, `push_to_hub_revision` with `benchmarks` also evaluates
    each checkpoint on them: that adds `evaluate_benchmarks` when the recipe did not name it."""
    names = list(training_args.callbacks)
    if "push_to_hub_revision" in names and training_args.benchmarks and "evaluate_benchmarks" not in names:
        names.append("evaluate_benchmarks")
    return names


def get_callbacks(script_args, training_args, dataset, tokenizer, is_main_process: bool = True) -> list[TrainerCallback]:
    """The callbacks a recipe names (see `callback_names`), built."""
    names = callback_names(training_args)
    if len(names) > len(training_args.callbacks) and is_main_process:
        logger.info("push_to_hub_revision with benchmarks %s: each checkpoint is evaluated on them too (as Open-R1 "
                    "does), results in eval/", training_args.benchmarks)
    return [CALLBACKS[name](script_args, training_args, dataset, tokenizer, is_main_process) for name in names]
