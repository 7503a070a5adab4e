"""The recipe's schema: every dataclass a recipe fills, with the rules each can check on its own.

    GRPOScriptArguments, GRPOConfig, ModelConfig          r1kit grpo (and, with PassRateArguments, r1kit pass-rate)
    SFTScriptArguments, SFTConfig, ModelConfig            r1kit sft
    RunFields                                             the fields GRPOConfig and SFTConfig share, held once

A rule that one dataclass can check by itself (a range, a choice, an ordering, a field another field needs) lives in
its `__post_init__`, so it holds however the dataclass is built. Closed sets r1kit owns are `Literal` types (the
parser lists their choices); sets TRL owns are read from TRL (`trl_choices`). Rules that need another object, the
data, the machine or a stage's registry are the pre-flight's (`r1kit.run.preflight`). Reading YAML and the command line
into these classes is `r1kit.config.recipe`'s job; Open-R1's renamed keys and moved defaults are `r1kit.config.compat`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import trl
import trl.trainer.model_config
from trl import ScriptArguments

from r1kit.config.checks import (  # noqa: F401 (read from here too)
    check_chat_template,
    check_generation_batch,
    check_literal_fields,
    check_range,
    check_trl_choice,
    literal_fields,
    lookahead_batches,
    optimizer_steps_per_batch,
    trl_choices,
)
from r1kit.config.command import check_choice  # noqa: F401 (read from here too)
from r1kit.config.datafields import (  # noqa: F401 (read from here too)
    DataFields,
    DatasetConfig,
    DatasetMixtureConfig,
    parse_dataset_mixture,
)
from r1kit.config.runfields import (  # noqa: F401 (read from here too)
    REPORT_TO_PACKAGES,
    RunFields,
    apply_machine_defaults,
    check_deepspeed_field,
    check_report_to,
    report_to_integrations,
)
from r1kit.config.toolfields import ToolFields
from r1kit.config.yaml_limits import load_yaml
from r1kit.errors import ConfigError
from r1kit.integrity.second_opinion import KINDS
from r1kit.integrity.tripwires import parse_tripwires
from r1kit.rewards.competitive import IoiProviderName, ScoringMode
from r1kit.rewards.format import RepetitionLanguage, check_repetition_params
from r1kit.rewards.gym import AnswerMode
from r1kit.rewards.math import check_cosine_bounds
from r1kit.rewards.verify import DEFAULT_TIMEOUT
from r1kit.sandbox import ProviderName

TRAINING_PASSES = ("auto", "dense", "bucketed", "packed", "packed_flex")  # r1kit.training.passchoice

# --------------------------------------------------------------------------------------------------------------------
# GRPO: data and rewards
# --------------------------------------------------------------------------------------------------------------------
@dataclass
class GRPOScriptArguments(ToolFields, DataFields, ScriptArguments):
    """Data and reward arguments of a GRPO run (every field Open-R1 has, with its bugs fixed).

    Args:
        dataset_name (`str` or `None`, defaults to `None`): Hub id, local file or folder, or a built-in task
            (`r1kit:addition`). Either this or `dataset_mixture` is required.
        dataset_mixture (`dict` or `None`, defaults to `None`): `{datasets: [{id, config, split, columns, weight}],
            seed, test_split_size}`; turned into a `DatasetMixtureConfig`.
        dataset_prompt_column (`str`, defaults to `"prompt"`): column holding the user message.
        dataset_options (`dict` or `None`, defaults to `None`): options of a generated dataset (`dataset_name` of
            the form `r1kit:<task>`); for `r1kit:addition`: `min_digits`, `max_digits` (each problem's operands have
            a digit count drawn between them; unset: 10 to 999), `train_size`, `test_size`, `seed`.
        reward_funcs (`list[str]`, defaults to `["accuracy", "format", "tag_count"]`): registry names (see
            `r1kit rewards`) or import paths `package.module:function`.
        cosine_min_value_wrong (`float`, defaults to `-1.0`): cosine reward of a wrong answer at length 0 (the most
            penalised case; Open-R1's config default 0.0 inverted this).
        cosine_max_value_wrong (`float`, defaults to `-0.5`): cosine reward of a wrong answer at `cosine_max_len`.
        cosine_min_value_correct (`float`, defaults to `0.5`): cosine reward of a correct answer at `cosine_max_len`.
        cosine_max_value_correct (`float`, defaults to `1.0`): cosine reward of a correct answer at length 0.
        cosine_max_len (`int`, defaults to `1000`): length scale of the cosine reward (tokens when ids are given).
        repetition_n_grams (`int`, defaults to `3`): n of the repetition penalty.
        repetition_max_penalty (`float`, defaults to `-1.0`): most negative repetition penalty; must be <= 0.
        max_completion_len (`int` or `None`, defaults to `None`): soft-overlong limit in tokens; `None` follows the
            trainer's `max_completion_length`.
        soft_punish_cache (`int` or `None`, defaults to `None`): width of the soft-overlong ramp in tokens; `None`
            is a quarter of the limit.
        code_language (`str`, defaults to `"python"`): fence language of `code_format` and the code rewards.
        code_provider (`str`, defaults to `"local"`): sandbox for `code` / `binary_code`.
        code_eval_test_batch_size (`int`, defaults to `1`): tests run at once per sample by `ioi_code` / `cf_code`;
            0 or less runs them all at once (as Open-R1's Codeforces scoring does).
        code_eval_scoring_mode (`str`, defaults to `"weighted_sum"`): `cf_code` scoring.
        parallel_code_exec_per_proc (`int` or `None`, defaults to `None`): sandbox concurrency per process; `None`
            is the number of cores.
        e2b_router_url (`str` or `None`), morph_router_url (`str` or `None`): routers for the remote sandboxes.
        ioi_provider (`str`, defaults to `"local"`): back end of `ioi_code` (`local` or `piston`; Open-R1: piston).
        ioi_test_cases (`str`, defaults to `"open-r1/ioi-test-cases"`): tests of IOI rows without inline `test_cases`:
            a Hub dataset with one config per year, or a local file or folder with the same columns (`problem_id`,
            `test_name`, `test_input`, `test_output`; a folder may hold one file per year, named by the year).
        cf_tests_folder (`str` or `None`, defaults to `$CF_TESTS_FOLDER`): Codeforces generated tests,
            `test_cases_<contest:04d>.parquet` with `problem_id`, `input`, `output`, added to `official_tests`.
        cf_patch_code (`bool`, defaults to `False`): `cf_code` fixes common slips before running (Python imports
            moved in Python 3, missing C++ includes), as Open-R1's `patch_code` option does.
        allow_unsandboxed_code_execution (`bool`, defaults to `False`): where no jail can run, let the `local`
            provider run model-written programs with only resource limits (your user's files, network and processes
            exposed), and reasoning-gym's scorers score answers without the jail (some evaluate answers as code).
            Off, a run with a local code reward or reasoning-gym scoring stops before training and says what to install.
        repetition_language (`str`, defaults to `"en"`): `en` (whitespace words) or `zh` (jieba).
        format_think_prefilled (`bool` or `None`, defaults to `None`): accept completions that start inside the think
            block; `None` turns it on when the chat template's generation prompt ends in `<think>`.
        reward_timeout (`float`, defaults to `5.0`): seconds allowed to verify one math answer.
        reward_workers (`int` or `None`, defaults to `None`): math-verify worker processes (cores, at most 8).
        reasoning_gym_answer (`str`, defaults to `"last_number"`): where the `reasoning_gym` reward (and held-out
            accuracy on reasoning-gym data) reads the answer when a completion has no `<answer>` block:
            `last_number` (the last number for a numeric gold, else the last line) or `reply` (the whole reply, as
            reasoning-gym's scorers expect: a reply that only contains the answer earns their partial credit).
        reasoning_gym_strict (`bool`, defaults to `True`): the `reasoning_gym` reward pays full marks or nothing, and
            nothing for an answer copied from the question (a premise, the first quoted statement, the numbers in
            order, the last sentence; for propositional_logic a conclusion one premise gives). reasoning-gym's
            default scorer pays `len(gold) / len(answer)` to any answer that contains the gold, so a hedge of
            candidates earned partial credit; `false` keeps the scorers' partial credit where it is wanted.
        probe_rewards (`bool`, defaults to `True`): before the model loads (and in `--dry-run` with local data), score
            replies that deserve nothing (empty, the prompt echoed, the format alone, every candidate hedged, the gold
            outside the answer, a huge reply, look-alike digits; for code rewards exit(0), printed outputs, an always-
            equal object, an infinite loop, reading the tests) with every reward, and the gold answer, on a few of the
            dataset's rows (`r1kit.probes`); a probe above its bound stops the run. `false` skips them.
        probe_acknowledged (`list[str]`, defaults to `[]`): `reward:probe` pairs the recipe accepts
            (`tests.my_rewards:contains_gold:hedge`, `accuracy:lookalike`): those probes are reported, not stopped on.
    """

    dataset_name: str | None = field(
        default=None, metadata={"help": "Hub id, local file/folder or built-in task (r1kit:addition)."}
    )
    dataset_mixture: dict[str, Any] | None = field(
        default=None, metadata={"help": "Mixture {datasets: [{id, config, split, columns, weight}], seed, test_split_size}."}
    )
    dataset_prompt_column: str = field(default="prompt", metadata={"help": "Column holding the user message."})
    dataset_options: dict[str, Any] | None = field(
        default=None, metadata={"help": "Options of a generated dataset (r1kit:<task>), e.g. {max_digits: 6}."}
    )
    reward_funcs: list[str] = field(
        default_factory=lambda: ["accuracy", "format", "tag_count"],
        metadata={"help": "Reward names from `r1kit rewards`, or import paths package.module:function."},
    )
    cosine_min_value_wrong: float = field(default=-1.0, metadata={"help": "Cosine reward, wrong answer, length 0."})
    cosine_max_value_wrong: float = field(default=-0.5, metadata={"help": "Cosine reward, wrong answer, max length."})
    cosine_min_value_correct: float = field(default=0.5, metadata={"help": "Cosine reward, correct answer, max length."})
    cosine_max_value_correct: float = field(default=1.0, metadata={"help": "Cosine reward, correct answer, length 0."})
    cosine_max_len: int = field(default=1000, metadata={"help": "Cosine reward length scale."})
    repetition_n_grams: int = field(default=3, metadata={"help": "n-gram size of the repetition penalty."})
    repetition_max_penalty: float = field(default=-1.0, metadata={"help": "Most negative repetition penalty (<= 0)."})
    max_completion_len: int | None = field(
        default=None, metadata={"help": "Soft-overlong limit in tokens (default: the trainer's max_completion_length)."}
    )
    soft_punish_cache: int | None = field(
        default=None, metadata={"help": "Soft-overlong ramp width in tokens (default: a quarter of the limit)."}
    )
    code_language: str = field(default="python", metadata={"help": "Fence language for code rewards (python, cpp)."})
    code_provider: ProviderName = field(default="local", metadata={"help": "Sandbox: local, e2b, morph, piston."})
    code_eval_test_batch_size: int = field(default=1, metadata={"help": "Tests per batch for ioi_code/cf_code."})
    code_eval_scoring_mode: ScoringMode = field(
        default="weighted_sum", metadata={"help": "cf_code scoring mode."}
    )
    parallel_code_exec_per_proc: int | None = field(
        default=None, metadata={"help": "Sandbox concurrency per process (default: number of cores)."}
    )
    e2b_router_url: str | None = field(default=None, metadata={"help": "E2B router host:port."})
    morph_router_url: str | None = field(default=None, metadata={"help": "Morph router host:port."})
    ioi_provider: IoiProviderName = field(default="local", metadata={"help": "ioi_code back end: local or piston."})
    ioi_test_cases: str = field(
        default="open-r1/ioi-test-cases",
        metadata={"help": "Where ioi_code finds tests: a Hub dataset (one config per year) or a local file/folder."},
    )
    cf_tests_folder: str | None = field(
        default=None,
        metadata={"help": "Folder of Codeforces generated tests (test_cases_<contest>.parquet); default $CF_TESTS_FOLDER."},
    )
    cf_patch_code: bool = field(default=False, metadata={"help": "cf_code: fix common Python-import / C++-include slips."})
    allow_unsandboxed_code_execution: bool = field(
        default=False,
        metadata={"help": "DANGER: where no jail is available, run model-written code (local code rewards, reasoning-gym scorers) without one."},
    )
    repetition_language: RepetitionLanguage = field(default="en", metadata={"help": "Repetition penalty tokenisation: en or zh."})
    format_think_prefilled: bool | None = field(
        default=None,
        metadata={"help": "Accept completions that start inside <think> (default: when the template pre-fills it)."},
    )
    reward_timeout: float = field(default=DEFAULT_TIMEOUT, metadata={"help": "Seconds allowed to verify one math answer."})
    reward_workers: int | None = field(
        default=None, metadata={"help": "Processes verifying math answers (default: number of cores, at most 8)."}
    )
    reasoning_gym_answer: AnswerMode = field(
        default="last_number",
        metadata={"help": "reasoning_gym reward, outside <answer>: last_number or reply (the whole reply)."},
    )
    reasoning_gym_strict: bool = field(
        default=True, metadata={"help": "reasoning_gym reward: full marks or nothing, copied answers nothing."}
    )
    probe_rewards: bool = field(
        default=True, metadata={"help": "Probe every reward for exploits before training (r1kit probe-rewards)."}
    )
    probe_acknowledged: list[str] = field(
        default_factory=list, metadata={"help": "reward:probe pairs whose probe may score above its bound."}
    )


    def __post_init__(self):
        self.check_data_fields()
        self.check_tool_fields()
        if isinstance(self.reward_funcs, str):
            self.reward_funcs = [name.strip() for name in self.reward_funcs.split(",") if name.strip()]
        if not self.reward_funcs and not self.environment:  # (an environment may own the reward: checked at its build)
            raise ConfigError("reward_funcs is empty: name at least one reward (see `r1kit rewards`)")
        for name in ("dataset_name", "dataset_prompt_column", "code_language"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ConfigError(f"{name} must be a non-empty string, got {value!r}")
        check_literal_fields(self)
        check_range(
            self,
            [
                ("reward_timeout", ">", 0),
                ("reward_workers", ">=", 1),
                ("parallel_code_exec_per_proc", ">=", 1),
                ("max_completion_len", ">=", 1),
                ("soft_punish_cache", ">=", 0),
            ],
        )
        self.check_reward_parameters()

    def check_reward_parameters(self) -> None:
        """The selected rewards' rules on their parameters (each reward module owns its rule)."""
        if "cosine" in self.reward_funcs:
            check_cosine_bounds(self.cosine_min_value_wrong, self.cosine_max_value_wrong,
                                self.cosine_min_value_correct, self.cosine_max_value_correct, self.cosine_max_len)
        if "repetition_penalty" in self.reward_funcs:
            check_repetition_params(self.repetition_n_grams, self.repetition_max_penalty, self.repetition_language)


# --------------------------------------------------------------------------------------------------------------------
# GRPO: the trainer
# --------------------------------------------------------------------------------------------------------------------
@dataclass
class GRPOConfig(RunFields, trl.GRPOConfig):
    """TRL's `GRPOConfig` plus the shared run fields (`RunFields`) and these.

    Args:
        num_completions_to_print (`int`, defaults to `0`): completions printed per logging step.
        heldout_eval_steps (`int`, defaults to `0`): with the `heldout_accuracy` callback, evaluate every N steps
            (0: only before and after training).
        heldout_size (`int`, defaults to `200`): test problems the `heldout_accuracy` callback evaluates.
        compact_progress (`bool`, defaults to `False`): the progress bar shows the latest reward, accuracy and length
            instead of a printed dict per logging step (metrics still reach trainer_state.json and `report_to`).
        log_completions_file (`bool`, defaults to `True`): write every scored completion with its rewards to
            `OUTPUT_DIR/completions.jsonl`.
        bf16 (`bool` or `None`, defaults to `None`): `None` means bf16 where a GPU supports it, fp32 otherwise;
            `true` on a machine without a GPU becomes fp32 with a warning.
        dynamic_sampling (`bool`, defaults to `False`): drop prompt groups whose rewards are all equal (no
            advantage, no gradient) and generate for more prompts until the step's batch holds only groups with
            signal (DAPO's dynamic sampling); see `r1kit.training.trainer`.
        dynamic_sampling_max_rounds (`int`, defaults to `4`): generation rounds per generation batch, the first
            included; when they run out the batch trains on the groups with signal it has, the empty places masked
            out of the loss.
        curriculum_reward (`str`, defaults to `"accuracy"`): reward whose group mean is a prompt's pass rate, for the
            curriculum (a name in `reward_funcs`).
        curriculum_skip_solved (`int`, defaults to `0`): skip a prompt whose every completion was right in each of
            its last k appearances (0: never skip).
        curriculum_pass_rate_window (`list[float]` or `None`, defaults to `None`): `[low, high]`: prefer prompts
            whose estimated pass rate lies in it; a prompt never seen is always taken.
        curriculum_explore (`float`, defaults to `0.1`): probability that a prompt the curriculum would skip is
            taken anyway, so that its estimate stays current.
        curriculum_history (`int`, defaults to `4`): appearances per prompt the pass-rate estimate averages.
        unjudged_share_limit (`float` or `None`, defaults to `1.0`): a reward that leaves at least this share of a
            generation batch unjudged (None: test cases unreachable, no sandbox, unparseable golds), two batches
            running, stops the run with its name and its latest warnings. 1.0 stops only a reward that judges
            nothing; lower it to be stricter; `None` never stops (the rows still count in the logs).
        trim_padding (`bool`, defaults to `True`): no compute on padding in the loss pass (and in the old and
            reference log-probabilities): each micro-batch drops the columns that are padding in every one of its
            rows and splits its rows into buckets of similar completion length, each padded only to its own
            longest; same log-probabilities, entropies, loss and gradients as TRL's dense pass. Leading padding goes
            only for models that number positions by column (Llama, Mistral, Qwen2/3, GPT-2); a micro-batch with
            images or token types stays dense (said once). See `r1kit.training.trainpass`.
        shared_prompt_pass (`bool`, defaults to `True`): in the same passes, each distinct prompt of a micro-batch
            is computed once and its completions attend to its keys and values (the prompt's activations get the
            sum of its completions' gradients, as in the dense pass). Needs a model that numbers positions by column
            and takes a key/value cache; it stands down, said once, under gradient checkpointing, with dropout
            active, for MoE auxiliary losses and for multimodal batches.
        training_pass (`str`, defaults to `"auto"`): which exact pass scores the micro-batches. `auto` measures the
            candidates on the device the run is on, per batch shape, in the first steps, and keeps the fastest
            (`r1kit.training.passchoice`; OUTPUT_DIR/training_pass.json): `dense` (TRL's), `bucketed` (length buckets and the
            shared prompt's key/value cache, `r1kit.training.trainpass`), `packed` (one row per micro-batch, no padding, each
            prompt once, through an SDPA mask, `r1kit.training.packing`) and, on CUDA, `packed_flex` (the same through a
            FlexAttention block mask). Naming one takes it where it can run (TRL's dense pass otherwise, said so).
        second_opinion_samples (`int`, defaults to `4`): completions per reward and per training batch judged again
            by an independent judge, never the reward's scorer (`r1kit.integrity.independent`; math: a parser and evaluator of
            its own; code: a fresh jail, tests in reverse order or the prompt's examples; reasoning_gym: the answer
            re-verified on twins of its question and on the question stripped to one premise), drawn on the main
            process, weighted toward high rewards; logs `second_opinion/<reward>/disagreement`, `unchecked`,
            `judge_correct`, `reward_correct` and writes disagreeing rows to `OUTPUT_DIR/second_opinion.jsonl`. 0
            turns it off. See `r1kit.integrity.second_opinion`.
        second_opinion_kinds (`dict[str, str]` or `None`, defaults to `None`): rewards of `reward_funcs` without a
            second opinion of their own (a `module:function`) checked as a kind: `math` (reads `solution`), `code`
            (`verification_info`) or `reasoning_gym` (`reasoning_gym`).
        tripwires (`dict` or `None`, defaults to `None`): per wire (`reward_vs_heldout`, `format_vs_accuracy`,
            `length_blowup`, `length_collapse`, `collapse`, `disagreement`, `drift`, `unchecked`) any of `threshold`
            (`float`), `window`
            (`int`, steps) and `action` (`warn`, `stop` or `rollback`), over the defaults of
            `r1kit.integrity.tripwires.DEFAULT_WIRES` (every wire `warn`). `{}` or `None`: the defaults.
        tripwires_enabled (`bool`, defaults to `True`): measure and log the tripwires at all.
        tripwire_lr_factor (`float`, defaults to `0.5`): each `rollback` continues from its checkpoint with the
            learning rate multiplied by this, in (0, 1].
        tripwire_max_rollbacks (`int`, defaults to `2`): rollbacks allowed in a run; past them `rollback` stops.
        async_rollouts (`bool`, defaults to `False`): generate the next generation batches in the background, with
            the newest weights the generator has, while the trainer trains on the current one (one producer thread
            per process: a copy of the policy under transformers, the colocated vLLM engine, or a client of the vLLM
            server). The loss corrects for the older sampler with TRL's truncated importance weights
            (`vllm_importance_sampling_*`; per token, truncated, unless the recipe sets the mode). See
            `r1kit.training.rollouts` and docs/async-rollouts.md.
        max_staleness (`int`, defaults to `1`): optimizer steps a batch's weights may lag the trainer's when it is
            trained; an older batch is dropped, counted (`rollouts/stale_dropped`) and generated again. The producer
            reads `max_staleness - weight_sync_steps + 1` generation batches ahead.
        weight_sync_steps (`int`, defaults to `1`): optimizer steps between weight updates of the generator
            (TRL's async trainer's name); at most `max_staleness`.
        rollout_timeout (`float`, defaults to `600.0`): seconds one request to the vLLM server may take under
            async_rollouts before it counts as failed (retried, then the run stops with exit code 75), and seconds
            the trainer waits for any one rollout job (a generator that never answers stops the run, exit 75).
    """

    dynamic_sampling: bool = field(
        default=False, metadata={"help": "Drop groups whose rewards are all equal and generate more to fill the batch."}
    )
    dynamic_sampling_max_rounds: int = field(
        default=4, metadata={"help": "Generation rounds per generation batch with dynamic_sampling (first included)."}
    )
    curriculum_reward: str = field(default="accuracy", metadata={"help": "Reward whose group mean is the pass rate."})
    curriculum_skip_solved: int = field(
        default=0, metadata={"help": "Skip prompts solved by every completion in their last k appearances (0: off)."}
    )
    curriculum_pass_rate_window: list[float] | None = field(
        default=None, metadata={"help": "[low, high]: prefer prompts whose estimated pass rate lies in it."}
    )
    curriculum_explore: float = field(
        default=0.1, metadata={"help": "Probability of taking a prompt the curriculum would skip."}
    )
    curriculum_history: int = field(default=4, metadata={"help": "Appearances the pass-rate estimate averages."})
    num_completions_to_print: int | None = field(default=0, metadata={"help": "Completions printed per log step."})
    unjudged_share_limit: float | None = field(
        default=1.0, metadata={"help": "Stop when a reward leaves this share of two generation batches running "
                                       "unjudged (None); null: never stop."}
    )
    trim_padding: bool = field(
        default=True, metadata={"help": "No compute on padding in the loss pass: trim and bucket by length (exact)."}
    )
    shared_prompt_pass: bool = field(
        default=True, metadata={"help": "Compute each distinct prompt of a micro-batch once in the loss pass (exact)."}
    )
    training_pass: str = field(
        default="auto", metadata={"help": "auto (the fastest, measured here) | dense | bucketed | packed | packed_flex."}
    )
    second_opinion_samples: int = field(
        default=4, metadata={"help": "Completions per reward and batch judged again by an independent path (0: off)."}
    )
    second_opinion_kinds: dict[str, str] | None = field(
        default=None, metadata={"help": "Rewards checked as a kind: {'my.mod:fn': math | code | reasoning_gym}."}
    )
    tripwires: dict[str, Any] | None = field(
        default=None, metadata={"help": "Per wire {threshold, window, action: warn | stop | rollback}, over the defaults."}
    )
    tripwires_enabled: bool = field(default=True, metadata={"help": "Measure, log and act on the tripwires."})
    tripwire_lr_factor: float = field(
        default=0.5, metadata={"help": "Learning rate multiplier after each tripwire rollback, in (0, 1]."}
    )
    tripwire_max_rollbacks: int = field(default=2, metadata={"help": "Tripwire rollbacks allowed in a run."})
    heldout_eval_steps: int = field(default=0, metadata={"help": "heldout_accuracy: evaluate every N steps (0: start/end)."})
    heldout_size: int = field(default=200, metadata={"help": "heldout_accuracy: test problems evaluated."})
    log_completions_file: bool = field(default=True, metadata={"help": "Write OUTPUT_DIR/completions.jsonl."})
    compact_progress: bool = field(
        default=False, metadata={"help": "Show the latest reward on the progress bar instead of printing every log."}
    )
    async_rollouts: bool = field(
        default=False, metadata={"help": "Generate the next batches in the background while the trainer trains."}
    )
    max_staleness: int = field(
        default=1, metadata={"help": "async_rollouts: optimizer steps a batch's weights may lag; older ones are dropped."}
    )
    weight_sync_steps: int = field(
        default=1, metadata={"help": "async_rollouts: optimizer steps between weight updates of the generator."}
    )
    rollout_timeout: float = field(
        default=600.0, metadata={"help": "async_rollouts: seconds a rollout request or job may take (then exit 75)."}
    )

    def __post_init__(self):
        apply_machine_defaults(self)
        self.check_run_fields()
        self.check_grpo_fields()
        super().__post_init__()
        self.check_sampling()  # after TRL's: it derives steps_per_generation from generation_batch_size

    def benchmark_generation_length(self) -> int:
        return self.benchmark_max_new_tokens or self.max_completion_length

    @property
    def curriculum_active(self) -> bool:
        """Whether the curriculum replaces any prompt (a skip rule or a pass-rate window is set)."""
        return bool(self.curriculum_skip_solved or self.curriculum_pass_rate_window is not None)

    def check_grpo_fields(self) -> None:
        """TRL's string choices (read from TRL) and the ranges TRL checks late (at the first step) or not at all."""
        for name in ("loss_type", "importance_sampling_level", "vllm_mode", "multi_objective_aggregation"):
            check_trl_choice(self, name)
        if isinstance(self.scale_rewards, str) and self.scale_rewards.lower() in ("true", "false"):
            self.scale_rewards = self.scale_rewards.lower() == "true"  # TRL maps True/False to group/none
        if not isinstance(self.scale_rewards, bool):
            check_trl_choice(self, "scale_rewards", "or true / false")
        check_range(self, [
            ("max_completion_length", ">=", 1), ("num_iterations", ">=", 1), ("temperature", ">", 0),
            ("top_p", ">", 0), ("top_p", "<=", 1), ("top_k", ">=", 0), ("beta", ">=", 0), ("epsilon", ">=", 0),
            ("heldout_size", ">=", 1), ("heldout_eval_steps", ">=", 0), ("num_completions_to_print", ">=", 0),
            ("dynamic_sampling_max_rounds", ">=", 1), ("curriculum_skip_solved", ">=", 0),
            ("curriculum_explore", ">=", 0), ("curriculum_explore", "<=", 1), ("curriculum_history", ">=", 1),
        ])
        self.check_curriculum_window()
        self.check_async_rollouts()
        check_choice("training_pass", self.training_pass, TRAINING_PASSES)
        limit = self.unjudged_share_limit
        if limit is not None and not (isinstance(limit, (int, float)) and 0.0 < limit <= 1.0):
            raise ConfigError(f"unjudged_share_limit must be in (0, 1] or null (never stop), got {limit!r}")
        self.check_reward_watch()

    def check_reward_watch(self) -> None:
        """The second opinion's and the tripwires' fields (given as JSON/YAML text on the command line, too)."""
        check_range(self, [("second_opinion_samples", ">=", 0), ("tripwire_max_rollbacks", ">=", 0),
                           ("tripwire_lr_factor", ">", 0), ("tripwire_lr_factor", "<=", 1)])
        for name in ("second_opinion_kinds", "tripwires"):
            if isinstance(getattr(self, name), str):
                setattr(self, name, load_yaml(getattr(self, name), name))
        kinds = self.second_opinion_kinds or {}
        if not isinstance(kinds, dict):
            raise ConfigError(f"second_opinion_kinds must be a mapping of reward: kind, got {kinds!r}")
        for reward, kind in kinds.items():
            check_choice(f"second_opinion_kinds.{reward}", kind, KINDS)
        parse_tripwires(self.tripwires)

    def check_async_rollouts(self) -> None:
        """What asynchronous rollouts need: a staleness bound the weight updates can keep, the correction for the
        older sampler, and a generator one background thread can own."""
        check_range(self, [("max_staleness", ">=", 0), ("weight_sync_steps", ">=", 1), ("rollout_timeout", ">", 0)])
        if not self.async_rollouts:
            return
        if self.weight_sync_steps > self.max_staleness:
            raise ConfigError(f"async_rollouts needs weight_sync_steps ({self.weight_sync_steps}) <= max_staleness "
                              f"({self.max_staleness}): otherwise no batch can be generated ahead without being too "
                              "stale; raise max_staleness or lower weight_sync_steps")
        refusals = [
            (not self.vllm_importance_sampling_correction, "vllm_importance_sampling_correction: false (the "
             "correction for samples of older weights); set it to true"),
            (self.use_vllm and self.vllm_enable_sleep_mode, "vllm_enable_sleep_mode (the engine would sleep while it "
             "should generate); set it to false"),
            (self.use_vllm and self.vllm_mode == "colocate" and self.vllm_tensor_parallel_size > 1,
             "vllm_tensor_parallel_size > 1 in colocate mode (its generation is a collective a background thread "
             "cannot join); use vllm_mode: server"),
            (self.use_transformers_continuous_batching, "use_transformers_continuous_batching; set it to false"),
        ]
        for refused, what in refusals:
            if refused:
                raise ConfigError(f"async_rollouts does not work with {what}")

    def settle_async_rollouts(self, explicit: set[str]) -> None:
        """Once the recipe is parsed (`explicit`: the keys it or the command line set): async rollouts weigh stale
        samples per token, truncated (`token_truncate`, TRL's original truncated importance sampling), unless the
        recipe chose a mode. TRL's default for vLLM's samples, `sequence_mask`, suits a sampler with the same weights;
        for weights one update older, a sequence's ratio is a product over its tokens that strays far from 1 (mean
        0.4-0.6 in the demo's early steps, masking or shrinking most of the batch), and the demo learned 3.9 points
        less over 3 seeds."""
        if not self.async_rollouts:
            return
        if "vllm_importance_sampling_mode" not in explicit:
            self.vllm_importance_sampling_mode = "token_truncate"
        if self.loss_type == "vespo" and self.vllm_importance_sampling_mode not in ("token_truncate", "token_mask"):
            raise ConfigError("async_rollouts with loss_type vespo needs vllm_importance_sampling_mode token_truncate "
                              f"or token_mask, not {self.vllm_importance_sampling_mode}")

    def check_curriculum_window(self) -> None:
        """`curriculum_pass_rate_window` is `[low, high]` with 0 <= low <= high <= 1 (also given as "low,high")."""
        window = self.curriculum_pass_rate_window
        if window is None:
            return
        if isinstance(window, str):
            window = [part for part in window.replace("[", "").replace("]", "").split(",") if part.strip()]
        try:
            low, high = (float(x) for x in window)
        except (TypeError, ValueError):
            raise ConfigError(f"curriculum_pass_rate_window must be [low, high], got {self.curriculum_pass_rate_window!r}") from None
        if not 0 <= low <= high <= 1:
            raise ConfigError(f"curriculum_pass_rate_window must satisfy 0 <= low <= high <= 1, got [{low}, {high}]")
        self.curriculum_pass_rate_window = [low, high]

    def check_async_span(self) -> None:
        """Async rollouts read whole generation batches ahead: one that spans more optimizer steps than max_staleness
        allows (steps_per_generation x num_iterations past the accumulation) makes every batch read ahead too stale
        when it trains: dropped and generated again, so async would bring nothing. Refused before the model loads
        (by the recipe parser, once the per-process steps_per_generation is known: `r1kit.config.recipe`)."""
        if not self.async_rollouts:
            return
        span = optimizer_steps_per_batch(self.steps_per_generation, self.num_iterations,
                                         self.gradient_accumulation_steps)
        if lookahead_batches(self.max_staleness, self.weight_sync_steps, span) == 0:
            raise ConfigError(
                f"async_rollouts: a generation batch trains over {span} optimizer steps (steps_per_generation "
                f"{self.steps_per_generation} x num_iterations {self.num_iterations} / gradient_accumulation_steps "
                f"{self.gradient_accumulation_steps}), so a batch read ahead is at least {span} steps old when it "
                f"starts training, past max_staleness {self.max_staleness} (weight_sync_steps "
                f"{self.weight_sync_steps}): every one would be dropped and generated again. Set max_staleness: "
                f"{span + self.weight_sync_steps - 1} or more, or fewer steps per generation batch")

    def check_sampling(self) -> None:
        """Dynamic sampling and the curriculum work on whole prompt groups per process, and dynamic sampling needs
        advantages that depend on the group alone (they are computed per generation round)."""
        if not (self.dynamic_sampling or self.curriculum_active):
            return
        if self.dynamic_sampling:
            if self.scale_rewards == "batch":
                raise ConfigError("dynamic_sampling needs per-group advantages: scale_rewards 'batch' would scale each "
                                  "generation round by its own batch; use scale_rewards 'group' (default) or 'none'")
            if self.multi_objective_aggregation != "sum_then_normalize":
                raise ConfigError("dynamic_sampling needs per-group advantages: multi_objective_aggregation "
                                  "'normalize_then_sum' normalises over each round's batch; use 'sum_then_normalize'")
        steps = self.steps_per_generation or self.gradient_accumulation_steps
        local = self.per_device_train_batch_size * steps
        if local % self.num_generations:
            what = "dynamic_sampling" if self.dynamic_sampling else "the curriculum"
            raise ConfigError(
                f"{what} needs whole prompt groups on each process: per_device_train_batch_size "
                f"{self.per_device_train_batch_size} x steps_per_generation {steps} = {local} is not a multiple "
                f"of num_generations {self.num_generations}"
            )


@dataclass
class ModelConfig(trl.trainer.model_config.ModelConfig):
    """TRL's `ModelConfig` plus a GGUF source.

    Args:
        gguf_file (`str` or `None`, defaults to `None`): a GGUF file inside the `model_name_or_path` folder; the
            model is turned into a trainable float32 copy (cached). A `model_name_or_path` ending in `.gguf` works too.
    """

    gguf_file: str | None = field(default=None, metadata={"help": "GGUF file in the model_name_or_path folder."})

    def __post_init__(self):
        super().__post_init__()
        if self.model_name_or_path is None:
            raise ConfigError("model_name_or_path is required: a Hub id, a local folder or r1kit:tiny-random")


# --------------------------------------------------------------------------------------------------------------------
# SFT
# --------------------------------------------------------------------------------------------------------------------
SFT_BUILTIN_TASK = "r1kit:addition"


@dataclass
class SFTScriptArguments(DataFields, ScriptArguments):
    """Data and model-construction arguments of an SFT run.

    Args:
        dataset_name (`str` or `None`, defaults to `"r1kit:addition"`): Hub id, local file or folder, or the built-in
            task `r1kit:addition` (worked solutions of multi-digit additions). Either this or `dataset_mixture`.
        dataset_mixture (`dict` or `None`, defaults to `None`): Open-R1's `{datasets: [{id, config, split, columns,
            weight}], seed, test_split_size}`.
        dataset_options (`dict` or `None`, defaults to `None`): options of a generated dataset (the built-in
            `r1kit:addition` takes `train_size` instead).
        train_size (`int`, defaults to `20000`): training problems generated for `r1kit:addition`.
        heldout_size (`int`, defaults to `200`): test problems for the accuracy checks (`r1kit:addition`).
        eval_every_steps (`int`, defaults to `25`): steps between accuracy checks (`r1kit:addition`).
        stop_at_accuracy (`float` or `None`, defaults to `None`): stop once held-out accuracy reaches this.
        hidden_size / num_layers / num_heads (`int`): model size when building from scratch (`r1kit:scratch`).
        characters (`str` or `None`, defaults to `None`): vocabulary of a tokenizer built from scratch.
        publish_to (`str` or `None`, defaults to `None`): copy the final model and tokenizer here.
    """

    dataset_name: str | None = field(default=SFT_BUILTIN_TASK, metadata={"help": "Dataset: Hub id, local path or built-in."})
    dataset_mixture: dict[str, Any] | None = field(default=None, metadata={"help": "Open-R1's dataset mixture."})
    dataset_options: dict[str, Any] | None = field(
        default=None, metadata={"help": "Options of a generated dataset (reasoning-gym:<generator>)."}
    )
    train_size: int = field(default=20000, metadata={"help": "Training problems generated (r1kit:addition)."})
    heldout_size: int = field(default=200, metadata={"help": "Held-out problems for accuracy checks (r1kit:addition)."})
    eval_every_steps: int = field(default=25, metadata={"help": "Steps between accuracy checks (r1kit:addition)."})
    stop_at_accuracy: float | None = field(default=None, metadata={"help": "Stop once held-out accuracy reaches this."})
    hidden_size: int = field(default=128, metadata={"help": "Hidden size of a model built from scratch."})
    num_layers: int = field(default=4, metadata={"help": "Layers of a model built from scratch."})
    num_heads: int = field(default=4, metadata={"help": "Attention heads of a model built from scratch."})
    characters: str | None = field(default=None, metadata={"help": "Characters of a tokenizer built from scratch."})
    publish_to: str | None = field(default=None, metadata={"help": "Copy the final model and tokenizer here."})

    def __post_init__(self):
        self.check_data_fields()
        if self.uses_builtin_task and self.dataset_options:
            raise ConfigError("dataset_options: the SFT worked solutions of r1kit:addition take train_size and "
                              "heldout_size instead; remove dataset_options")
        check_range(self, [("train_size", ">=", 1), ("heldout_size", ">=", 1), ("eval_every_steps", ">=", 1),
                           ("stop_at_accuracy", ">=", 0), ("stop_at_accuracy", "<=", 1), ("hidden_size", ">=", 1),
                           ("num_layers", ">=", 1), ("num_heads", ">=", 1)])

    @property
    def uses_builtin_task(self) -> bool:
        return self.dataset_mixture is None and self.dataset_name == SFT_BUILTIN_TASK


@dataclass
class SFTConfig(RunFields, trl.SFTConfig):
    """TRL's `SFTConfig` plus the shared run fields (`RunFields`), with r1kit's machine defaults (fp32 without a GPU,
    `gradient_checkpointing` read as `activation_checkpointing`, no pinned memory on CPU)."""

    def __post_init__(self):
        apply_machine_defaults(self)
        self.check_run_fields()
        super().__post_init__()


# --------------------------------------------------------------------------------------------------------------------
# Pass-rate filtering (a GRPO recipe plus these keys)
# --------------------------------------------------------------------------------------------------------------------
@dataclass
class PassRateArguments:
    """The filtering keys of a pass-rate recipe.

    Args:
        pass_rate_min (`float`, defaults to `0.1`) / pass_rate_max (`float`, defaults to `0.9`): rows whose pass rate
            lies strictly between them are kept.
        dataset_split (`str`, defaults to `"train"`): the split scored.
        dataset_start_index / dataset_end_index (`int` or `None`): score only rows [start, end) of the split.
        output_dataset_name (`str` or `None`, defaults to `None`): Hub dataset the filtered rows are pushed to.
    """

    pass_rate_min: float = field(default=0.1, metadata={"help": "Keep rows with a pass rate above this."})
    pass_rate_max: float = field(default=0.9, metadata={"help": "Keep rows with a pass rate below this."})
    dataset_split: str = field(default="train", metadata={"help": "Split to score."})
    dataset_start_index: int | None = field(default=None, metadata={"help": "First row scored."})
    dataset_end_index: int | None = field(default=None, metadata={"help": "Row after the last one scored."})
    output_dataset_name: str | None = field(default=None, metadata={"help": "Hub dataset for the filtered rows."})

    def __post_init__(self):
        if not 0.0 <= self.pass_rate_min <= self.pass_rate_max <= 1.0:
            raise ConfigError(f"pass_rate_min ({self.pass_rate_min}) and pass_rate_max ({self.pass_rate_max}) must "
                              "satisfy 0 <= pass_rate_min <= pass_rate_max <= 1")
        check_range(self, [("dataset_start_index", ">=", 0), ("dataset_end_index", ">=", 0)])


def field_names(*dataclass_types: type) -> set[str]:
    """Every field name of the given dataclasses (what a recipe may set)."""
    return {f.name for kind in dataclass_types for f in fields(kind)}
