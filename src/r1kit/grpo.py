"""The GRPO pipeline: a recipe in, a trained model out, on TRL's `GRPOTrainer` (r1kit's `R1Trainer`).

    pipeline = setup -> train -> finish
    setup:  seed, logging, the resume decision (`run.prepare`); every check that needs no weights
            (`preflight.check_grpo_recipe`); the data (`prepare_dataset`: columns and rows checked); the trainer
            (`build_trainer`: tokenizer, model, rewards, callbacks, the completions recorder); r1kit_run.json and the
            start-up block
    train:  `trainer.train`, then its metrics and state (`run.train`)
    finish: the final model and card, the final benchmark evaluations, the optional evaluation and push
            (`run.finish`), summary.json, the completion record (`run.complete`)

SIGTERM or SIGINT during training ends the step, saves a checkpoint and exits 75 (interrupted, resumable: the same
command continues); a tripwire's stop exits 3 and the run stays stopped; rerunning a completed run does nothing
(exit 0) unless max_steps was raised (see `r1kit.run.lifecycle`). A resume compares the recipe with the checkpoint's
(`r1kit.state.contract`: what may change, and what happens).

Launch it any of these ways (the first three give r1kit's exit codes: 0, 75, 3, 2 or 1):
    r1kit grpo --config recipe.yaml
    r1kit grpo --world-size 2 --config recipe.yaml                       (2 processes of this machine)
    r1kit launch torchrun --nproc_per_node 8 -m r1kit grpo --config recipe.yaml
    torchrun --nproc_per_node 8 -m r1kit.grpo --config recipe.yaml       (torchrun's own codes: 1 for any stop)
    accelerate launch -m r1kit.grpo --config recipe.yaml                 (accelerate's own codes; or r1kit launch
                                                                          accelerate launch ... -m r1kit grpo ...)
"""

from __future__ import annotations

import logging
import math
import os
import sys

from datasets import DatasetDict
from transformers.trainer_callback import ProgressCallback

from r1kit import probes
from r1kit.benchmarking.callbacks import (
    CompactProgressCallback,
    EvaluateBenchmarksCallback,
    HeldOutAccuracyCallback,
    get_callbacks,
)
from r1kit.benchmarking.heldout import ToolLoop
from r1kit.config.keys import usage
from r1kit.config.recipe import DEFAULT_RECIPE, GRPO_TYPES, loader_variables_line, run_recipe_command
from r1kit.config.schema import GRPOConfig, GRPOScriptArguments, ModelConfig
from r1kit.config.toolfields import OPENENV
from r1kit.console import add_pass_through_command
from r1kit.errors import ConfigError
from r1kit.integrity.rewardtap import CompletionsRecorder
from r1kit.integrity.second_opinion import SecondOpinion
from r1kit.integrity.tripwires import IdenticalCompletions, Tripwires, parse_tripwires
from r1kit.launching import launch
from r1kit.launching.sharding import describe as describe_sharding
from r1kit.loading import data
from r1kit.loading.modeling import get_model, get_peft_config, get_tokenizer
from r1kit.machine import vllm_is_cpu_build
from r1kit.rewards import get_reward_funcs
from r1kit.run import pipeline as runs
from r1kit.run import preflight
from r1kit.run.lifecycle import RunStopped
from r1kit.training.environments import build as openenv_environment
from r1kit.training.tools import PythonInterpreter, ToolLimits, check_tool_template, prefetch
from r1kit.training.tools import build as build_tools_for_trl
from r1kit.training.trainer import R1Trainer
from r1kit.vllm_front import client_line

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------------------------------
def pipeline(script_args: GRPOScriptArguments, training_args: GRPOConfig, model_args: ModelConfig) -> dict:
    """Runs a GRPO recipe end to end; returns the training metrics (with `summary` when held-out accuracy was
    tracked)."""
    run = setup(script_args, training_args, model_args)
    metrics = runs.train(run)
    return finish(run, metrics)


def setup(script_args: GRPOScriptArguments, training_args: GRPOConfig, model_args: ModelConfig) -> runs.Run:
    """Seed and logging, every check that needs no weights, the resume decision, the data, then the trainer (model,
    rewards, callbacks)."""
    checkpoint = runs.prepare(training_args, lambda: preflight.check_grpo_recipe(script_args, training_args, model_args),
                              (script_args, training_args, model_args))
    dataset, raw_dataset = prepare_dataset(script_args, training_args)
    if script_args.probe_rewards:  # a reward that pays for a hack stops the run here, before the model loads
        logger.info("Probing the rewards with replies that deserve nothing (probe_rewards: false skips this)...")
        results = probes.check_rewards(script_args, training_args, dataset[script_args.dataset_train_split])
        runs.startup_logger.info(probes.summary(results))
    run = build_trainer(script_args, training_args, model_args, dataset, raw_dataset, checkpoint)
    if run.trainer.accelerator.is_main_process:
        runs.write_run_metadata(training_args, checkpoint)
    runs.startup_logger.info(startup_summary(script_args, training_args, model_args, run.trainer, dataset, checkpoint))
    return run


def prepare_dataset(script_args: GRPOScriptArguments, training_args: GRPOConfig):
    """Loads the data, checks the rewards' columns and builds the conversational prompts. Returns the
    conversational dataset and the raw one (callbacks read the raw prompts)."""
    dataset = data.get_dataset(script_args)
    preflight.check_loaded_dataset(script_args, training_args, dataset)
    raw = DatasetDict(dict(dataset))
    return data.to_conversations(dataset, script_args.dataset_prompt_column, training_args.system_prompt), raw


def generation_prompt_ends_in_think(tokenizer) -> bool:
    """Whether the chat template pre-fills `<think>` (R1-Distill style), so completions start inside the block."""
    try:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": "x"}], tokenize=False, add_generation_prompt=True
        )
    except Exception:  # noqa: BLE001 - no template, or one that needs other inputs
        return False
    return str(text).rstrip().endswith("<think>")


def build_trainer(script_args: GRPOScriptArguments, training_args: GRPOConfig, model_args: ModelConfig, dataset,
                  raw_dataset=None, checkpoint: str | None = None) -> runs.Run:
    """Tokenizer, model, rewards, callbacks and the trainer, as Open-R1 builds them; returns the run with the
    handles `finish` needs."""
    tokenizer = get_tokenizer(model_args, training_args)
    is_main = training_args.process_index == 0
    callbacks = get_callbacks(script_args, training_args, raw_dataset or dataset, tokenizer, is_main)
    # Tools before the model: an environment server that cannot be reached or is too small is refused in one line
    tools, environment_factory = build_tools(script_args, tokenizer, rollouts_in_flight(training_args))
    model = get_model(model_args, training_args)
    prefilled = script_args.format_think_prefilled
    if prefilled is None:  # decided by the chat template, passed to the format rewards (the recipe stays as parsed)
        prefilled = generation_prompt_ends_in_think(tokenizer)
    reward_funcs = get_reward_funcs(script_args, training_args, format_think_prefilled=prefilled)
    eval_dataset = None
    if training_args.eval_strategy != "no":
        if script_args.dataset_test_split not in dataset:
            raise ConfigError(
                f"eval_strategy is '{training_args.eval_strategy}' but the dataset has no split "
                f"'{script_args.dataset_test_split}'; splits: {', '.join(dataset)}"
            )
        eval_dataset = dataset[script_args.dataset_test_split]
    listeners = [CompletionsRecorder(training_args.output_dir)] if training_args.log_completions_file and is_main else []
    listeners += reward_watch_listeners(script_args, training_args, is_main)
    callbacks += listeners  # the recorders also rewind their files when training starts (resume)
    wires = tripwire_callback(training_args, is_main)
    if wires is not None:
        callbacks.append(wires)  # after heldout_accuracy: a step's evaluation is measured the same step
    curriculum_index = (script_args.reward_funcs.index(training_args.curriculum_reward)
                        if training_args.curriculum_active else None)
    trainer = R1Trainer(  # TRL's GRPOTrainer, plus dynamic sampling and the curriculum when turned on
        model=model,
        reward_funcs=reward_funcs,
        args=training_args,
        train_dataset=dataset[script_args.dataset_train_split],
        eval_dataset=eval_dataset,
        peft_config=get_peft_config(model_args),
        callbacks=callbacks,
        processing_class=tokenizer,
        curriculum_reward_index=curriculum_index,
        reward_listeners=listeners,  # every scored completion, with every reward's score, to completions.jsonl
        tools=tools or None,  # TRL's tool loop: r1kit's interpreter in the jail, the user's tools and environment
        environment_factory=environment_factory,
    )
    evaluators = [c for c in callbacks if isinstance(c, EvaluateBenchmarksCallback)]
    for evaluator in evaluators:
        evaluator.attach(trainer)  # its metrics go through trainer.log, to every reporter
    if training_args.compact_progress and trainer.pop_callback(ProgressCallback) is not None:  # absent: disable_tqdm
        trainer.add_callback(CompactProgressCallback())
    heldout = next((c for c in callbacks if isinstance(c, HeldOutAccuracyCallback)), None)
    if heldout is not None:
        heldout.engine = trainer.colocated_engine  # greedy answers from the colocated vLLM engine, when there is one
        heldout.every_rank = heldout.engine is None and trainer.passes.sharded()  # every rank forwards sharded weights
        if script_args.uses_tools:
            heldout.tool_loop = heldout_tool_loop(script_args, training_args, tools, environment_factory, heldout, is_main)
    if wires is not None:
        wires.attach(trainer, script_args.reward_funcs, heldout, tuple(training_args.second_opinion_kinds or {}))
    return runs.Run(trainer, checkpoint, len(dataset[script_args.dataset_train_split]), script_args.dataset_name,
                    heldout, evaluators, model_name=model_args.model_name_or_path, summary_file="summary.json")


def heldout_tool_loop(script_args: GRPOScriptArguments, training_args: GRPOConfig, tools: list, environment_factory,
                      heldout: HeldOutAccuracyCallback, is_main: bool) -> ToolLoop | None:
    """Held-out replies through the run's tool loop (as many tool turns as a rollout may take, within its call
    budget), so held-out accuracy and tool use are measured together; None where the replies come from a vLLM engine
    or from every rank's share of sharded weights, which generate without the loop (said once)."""
    if heldout.engine is not None or heldout.every_rank:
        if is_main:
            logger.warning("heldout_accuracy: measured without the tool loop (replies from %s); tool use is in the "
                           "training metrics (tools/*)", "the vLLM engine" if heldout.engine else "sharded weights")
        return None
    turns = training_args.max_tool_calling_iterations
    turns = script_args.tool_calls_per_rollout if turns is None else min(turns, script_args.tool_calls_per_rollout)
    sessions = rollouts_in_flight(training_args) if str(script_args.environment).startswith(OPENENV) else None
    prepare = None
    if isinstance(environment_factory, type) and issubclass(environment_factory, PythonInterpreter):
        def prepare(replies, environments):  # a turn's programs run at once in the jail's pool, as in training
            prefetch(environment_factory, replies, environments)
    return ToolLoop(list(tools), environment_factory, turns, max_sessions=sessions, prepare=prepare)


def rollouts_in_flight(training_args: GRPOConfig) -> int:
    """Rollouts this process generates at once (each holds an environment session while it runs). With several
    processes each checks its own share of a shared server at the same time (together: the whole batch), and each
    serves its own copy of an environment class."""
    world = max(1, training_args.world_size)
    batch = getattr(training_args, "generation_batch_size", None) or training_args.per_device_train_batch_size * world
    return -(-int(batch) // world)


def build_tools(script_args: GRPOScriptArguments, tokenizer, sessions: int = 1) -> tuple[list, type | None]:
    """The recipe's `tools` and `environment` for TRL (`r1kit.training.tools`); a chat template that cannot render a tool
    conversation is refused in one line, naming one that can; an OpenEnv server must admit `sessions` at once."""
    if not script_args.uses_tools:
        return [], None
    check_tool_template(tokenizer)
    limits = ToolLimits(seconds=script_args.tool_time_limit, memory_mb=script_args.tool_memory_mb,
                        max_output=script_args.tool_max_output, calls=script_args.tool_calls_per_rollout,
                        total_seconds=script_args.tool_seconds_per_rollout)
    environment = script_args.environment
    if str(environment).startswith(OPENENV):  # the server checked (and served, for a class) before anything loads
        environment = openenv_environment(environment, limits, sessions)
    tools, factory = build_tools_for_trl(script_args.tools, environment, limits)
    if not script_args.reward_funcs and not callable(getattr(factory, "get_reward", None)):
        raise ConfigError(f"reward_funcs is empty and the environment {script_args.environment} has no reward of its "
                          "own (no get_reward method): name at least one reward (see `r1kit rewards`)")
    return tools, factory


def reward_watch_listeners(script_args: GRPOScriptArguments, training_args: GRPOConfig, is_main: bool) -> list:
    """The reward listeners that watch the rewards during training: the second opinion (`second_opinion_samples`)
    and the collapse measure the tripwires read. Main process only."""
    if not is_main:
        return []
    listeners: list = [IdenticalCompletions()] if training_args.tripwires_enabled else []
    if training_args.second_opinion_samples > 0:  # (preflight checked that second_opinion_kinds names its rewards)
        opinion = SecondOpinion(
            script_args.reward_funcs, training_args.output_dir, training_args.second_opinion_samples,
            training_args.second_opinion_kinds or {},
            timeout=script_args.reward_timeout, gym_mode=script_args.reasoning_gym_answer,
            code_language=script_args.code_language,
            allow_unsandboxed=script_args.allow_unsandboxed_code_execution,
            cosine_min_correct=script_args.cosine_min_value_correct, seed=training_args.seed,
            background=True)
        if opinion.active:
            listeners.append(opinion)
    return listeners


def tripwire_callback(training_args: GRPOConfig, is_main: bool) -> Tripwires | None:
    """The tripwires of the recipe (`tripwires` over the defaults), or None with `tripwires_enabled: false`."""
    if not training_args.tripwires_enabled:
        return None
    return Tripwires(parse_tripwires(training_args.tripwires), training_args.output_dir,
                     training_args.tripwire_lr_factor, training_args.tripwire_max_rollbacks, is_main)


def finish(run: runs.Run, metrics: dict) -> dict:
    """The final model, evaluations, the optional `do_eval` pass and the push (`run.finish`), then summary.json."""
    runs.finish(run, evaluate=run.trainer.args.do_eval)
    summary = runs.heldout_summary(run, metrics)
    if summary:
        runs.write_json(run, "summary.json", summary)
        metrics["summary"] = summary
    runs.complete(run)
    return metrics


def startup_summary(script_args, training_args, model_args, trainer, dataset, checkpoint: str | None) -> str:
    """The block a run starts with: model, data (rows per split), rewards and weights, steps, output folder, resume."""
    params = sum(p.numel() for p in trainer.model.parameters())
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    dtype = next(trainer.model.parameters()).dtype
    precision = "bf16" if training_args.bf16 else "fp16" if training_args.fp16 else str(dtype).replace("torch.", "")
    weights = training_args.reward_weights or [1.0] * len(script_args.reward_funcs)
    args, world = training_args, training_args.world_size
    completions_per_step = args.per_device_train_batch_size * world * args.gradient_accumulation_steps
    prompts_per_step = completions_per_step // args.num_generations
    train_rows = len(dataset[script_args.dataset_train_split])
    if args.max_steps > 0:
        steps = f"{args.max_steps:,}"
    else:
        per_epoch = math.ceil(train_rows * args.num_generations * args.num_iterations / completions_per_step)
        steps = f"about {math.ceil(per_epoch * args.num_train_epochs):,} ({args.num_train_epochs:g} epochs)"
    source = script_args.dataset_name or f"mixture of {len(script_args.dataset_mixture.datasets)} datasets"
    if checkpoint:
        resume = f"continues {checkpoint} (resume: {args.resume})"
    else:
        resume = "starts at step 0" + (" (resume: never)" if args.resume == "never" else "")
    lines = [
        "r1kit grpo",
        f"  model    {model_args.model_name_or_path} ({params:,} parameters"
        + (", all trainable" if trainable == params else f", {trainable:,} trainable")
        + f"; {precision} on {args.device}" + (f" x {world} processes" if world > 1 else "") + ")",
        f"  data     {source}: {data.split_sizes(dataset)} rows; trains on '{script_args.dataset_train_split}', "
        f"prompt column '{script_args.dataset_prompt_column}'",
        "  rewards  " + ", ".join([f"{name} x{w:g}" for name, w in zip(script_args.reward_funcs, weights)] + [
            f"{name} x1 (the environment's)" for name in list(getattr(trainer, "reward_func_names", []))[
                len(script_args.reward_funcs):]]),
        f"  steps    {steps}, each {prompts_per_step} prompts x {args.num_generations} completions "
        f"(learning rate {args.learning_rate:g}, {getattr(args.lr_scheduler_type, 'value', args.lr_scheduler_type)})",
        f"  output   {args.output_dir}",
        f"  resume   {resume}",
        *(f"           {note}" for note in runs.resume_notes()),  # what changed since the checkpoint, and what is done
    ]
    extra = [f"  pass     {trainer.training_pass_summary()}"]  # above output and resume
    if world > 1 or args.fsdp or args.deepspeed:
        extra.append(f"  sharding {sharding_line(trainer, args)}")
    sampling = sampling_line(args)
    if sampling:
        extra.append(sampling)
    extra += [line for line in (rollouts_line(trainer, args), tools_line(script_args, args)) if line]
    if args.use_vllm:
        shared = any(isinstance(c, HeldOutAccuracyCallback) and c.engine is not None
                     for c in trainer.callback_handler.callbacks)
        extra.append(vllm_line(args, trainer.vllm_start_seconds, shared))
    if loader_variables_line():
        extra.append(loader_variables_line())
    at = lines.index(f"  output   {args.output_dir}")
    return "\n".join(lines[:at] + extra + lines[at:])


def sharding_line(trainer, args) -> str:
    """The start-up line for multi-process runs: the strategy in effect, the processes, the parameter bytes per rank,
    and what r1kit set so that accelerate shards as launched (ranks without a GPU)."""
    line = describe_sharding(trainer.accelerator, trainer.model, args)
    changes = getattr(args, "r1kit_launch_changes", None)
    return line + (f" (set: {'; '.join(changes)})" if changes else "")


def vllm_line(args: GRPOConfig, start_seconds: float | None, heldout_shares: bool = False) -> str:
    """The start-up line for vLLM generation: where it runs, its KV cache, how long the engine took to start, and
    whether held-out accuracy generates with the same engine (`heldout_shares`)."""
    if vllm_is_cpu_build() and args.vllm_mode == "server":
        cache = "the server's"
        where = "server, vLLM CPU build; weights written to a folder and reloaded by the server after every optimizer step"
    elif vllm_is_cpu_build():
        cache = f"KV cache {os.environ.get('VLLM_CPU_KVCACHE_SPACE', '?')} GiB (VLLM_CPU_KVCACHE_SPACE)"
        where = "colocated, vLLM CPU build; weights reloaded after every optimizer step"
    elif args.vllm_mode == "colocate":
        cache, where = f"{args.vllm_gpu_memory_utilization:g} of the GPU (vllm_gpu_memory_utilization)", "colocated"
    else:
        cache, where = "the server's", "server"
    if args.vllm_mode == "server":  # where the server is and whether the trainer proves who it is to it
        url = args.vllm_server_base_url or f"http://{args.vllm_server_host}:{args.vllm_server_port}"
        where = where.replace("server", f"server at {url} ({client_line()})", 1)
    started = f"; trainer and engine built in {start_seconds:.0f} s" if start_seconds is not None else ""
    shared = "; held-out accuracy generates with it too" if heldout_shares else ""
    return f"  vllm     {where}, {cache}{started}{shared}"


def rollouts_line(trainer, args: GRPOConfig) -> str | None:
    """The start-up line for asynchronous rollouts, when on: the generator, how far ahead, the staleness bound and the
    correction (so a user can tell the run is off-policy, and by how much)."""
    if trainer.rollouts is None:
        return None
    generator = type(trainer.rollouts.generator).__name__.replace("Generator", "").lower() or "the policy's copy"
    return (f"  rollouts async: a producer thread generates ({generator}) {trainer.rollouts.lookahead} generation "
            f"batch(es) ahead; a batch more than max_staleness {args.max_staleness} optimizer steps old is dropped "
            f"and generated again; weights to the generator every {args.weight_sync_steps} step(s); importance "
            f"sampling {args.vllm_importance_sampling_mode} (clip_min {args.vllm_importance_sampling_clip_min}, "
            f"clip_max {args.vllm_importance_sampling_clip_max})")


def tools_line(script_args: GRPOScriptArguments, args: GRPOConfig) -> str | None:
    """The start-up line for tool use, when on: the tools, the environment, the turns and the per-rollout budget."""
    tools, environment = list(script_args.tools or []), script_args.environment
    if not tools and not environment:
        return None
    parts = [", ".join(map(str, tools)), f"environment {environment}" if environment else "",
             f"up to {args.max_tool_calling_iterations} tool turns a rollout"]
    if "python" in tools:
        parts.append(f"python in the jail: {script_args.tool_calls_per_rollout} calls and "
                     f"{script_args.tool_seconds_per_rollout:g} s a rollout, {script_args.tool_time_limit:g} s and "
                     f"{script_args.tool_max_output} characters a call")
    if str(environment).startswith("openenv:"):
        parts.append(f"OpenEnv: {script_args.tool_calls_per_rollout} calls and {script_args.tool_seconds_per_rollout:g} s "
                     f"a rollout, {script_args.tool_time_limit:g} s and {script_args.tool_max_output} characters a reply; "
                     "a session per rollout in flight")
    return "  tools    " + "; ".join(p for p in parts if p)


def sampling_line(args: GRPOConfig) -> str | None:
    """The start-up line for dynamic sampling and the curriculum, when either is on."""
    parts = []
    if args.dynamic_sampling:
        parts.append(f"dynamic sampling (groups without signal dropped, up to {args.dynamic_sampling_max_rounds} "
                     "generation rounds)")
    if args.curriculum_active:
        window = args.curriculum_pass_rate_window
        skips = [f"solved in the last {args.curriculum_skip_solved}" if args.curriculum_skip_solved else "",
                 f"pass rate outside [{window[0]:g}, {window[1]:g}]" if window else ""]
        parts.append(f"curriculum by {args.curriculum_reward} (skips prompts {' or '.join(s for s in skips if s)}; "
                     f"explore {args.curriculum_explore:g})")
    return "  sampling " + "; ".join(parts) if parts else None


def dry_run(script_args: GRPOScriptArguments, training_args: GRPOConfig, model_args: ModelConfig) -> str:
    """Checks a recipe without loading a model; returns the resolved configuration as YAML."""
    preflight.check_grpo_recipe(script_args, training_args, model_args, dry_run=True)
    checked = ""
    if data.is_local(script_args):
        dataset, raw = prepare_dataset(script_args, training_args)
        get_callbacks(script_args, training_args, raw, None)  # a callback's own data checks
        if script_args.probe_rewards:
            table = probes.table(probes.check_rewards(script_args, training_args, dataset[script_args.dataset_train_split]))
            checked += f"\n{table}\n"
    else:
        logger.info("Dataset %s is remote: its columns are checked when the run starts.", script_args.dataset_name)
    return runs.resolved_recipe(script_args, training_args, model_args) + checked + (
        "recipe OK: keys, values, paths, cross-field rules and (local) dataset columns checked"
        + ("; rewards probed" if checked else "") + "; no model loaded.")


# --------------------------------------------------------------------------------------------------------------------
# The command: r1kit grpo [--config recipe.yaml] [--dry-run [--world-size N]] [--key value ...]
# --------------------------------------------------------------------------------------------------------------------
def add_parser(subparsers):
    """Adds `grpo` to the `r1kit` command."""
    return add_pass_through_command(subparsers, "grpo", "train with GRPO from a recipe", run)


def run(args) -> int:
    """`r1kit grpo`: parse the recipe strictly, then train (or only check, with --dry-run)."""
    processes, argv = launch.world_size(args.argv)
    if processes > 1:  # --world-size N: N processes of this machine, through r1kit launch
        return launch.local("grpo", argv, processes)
    return run_recipe_command(argv, usage("grpo"), GRPO_TYPES, dry_run, train_and_report, default_config=DEFAULT_RECIPE)


def train_and_report(script_args: GRPOScriptArguments, training_args: GRPOConfig, model_args: ModelConfig) -> int:
    try:
        metrics = pipeline(script_args, training_args, model_args)
    except RunStopped as stop:  # interrupted (75), stopped (3), already complete (0): said in one line
        return stop.exit_code
    if "summary" in metrics:
        print_summary(metrics["summary"])
    return 0


def print_summary(summary: dict) -> None:
    before, after = summary["accuracy_before"], summary["accuracy_after"]
    print(
        f"\nHeld-out accuracy {before:.1%} -> {after:.1%} ({(after - before) * 100:+.1f} points) "
        f"in {summary['steps']} GRPO steps, {summary['train_seconds']:.0f} s of training.\n"
        f"Outputs: {summary['output_dir']} (model, completions.jsonl, summary.json). "
        f"Draw the curves: r1kit report {summary['output_dir']}"
    )


if __name__ == "__main__":
    from r1kit.console import run_module

    sys.exit(run_module("grpo", add_parser))
