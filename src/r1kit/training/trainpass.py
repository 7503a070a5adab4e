"""The exact training pass: per-token log-probabilities of GRPO batches, computing each real token once.

TRL's GRPOTrainer scores `[rows, prompt + completion]` tensors: every completion is padded to the longest of the
generation batch, and every prompt is computed once per completion, G times per group. Here, for one chunk of rows
(a training micro-batch, or one chunk of the old or reference log-probability pass):

1. **No compute on padding** (`trim_padding`). Leading columns that are padding in every row are dropped (for models
   that number positions by column, the kept columns keep their numbers); the rows are sorted by completion length
   and split into buckets (`length_buckets`), each cut to its own longest completion. A causal model's earlier
   tokens never attend to later ones, so the dropped trailing columns change nothing that is scored.
2. **One prompt forward per distinct prompt** (`shared_prompt_pass`). The distinct prompts of the chunk run once,
   minus their last token, with a key/value cache; each bucket then runs its rows' last prompt token and completions
   on that cache, expanded to the rows (`index_select`, whose backward sums: the prompt's activations receive the sum
   of its completions' gradients, as in the dense pass).

Both go through the model's own forward (the fused LM head TRL adds, PEFT, DDP), with explicit position ids equal to
the dense pass's column numbers, so log-probabilities, entropies, the loss and every gradient equal TRL's dense pass
up to fp32 summation order (tests/test_trainpass.py states the tolerance). Where that cannot hold, `plan_for` turns
the part off and says why (the trainer says it once; the start-up block's `pass` line too).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

# Model types whose forward, given no position ids, numbers the columns 0, 1, ... (what TRL's dense pass sees), so
# that a pass over fewer columns stays exact when it passes the dense pass's numbers explicitly.
POSITIONS_BY_COLUMN = ("llama", "mistral", "qwen2", "qwen3", "gpt2")

# What one extra forward call costs, in scored tokens: the bucket split only pays off when it saves more padding
# than this per bucket. Measured on CPU with the demo model and a 4-layer, 256-wide Llama (benchmarks/training_pass.py).
BUCKET_OVERHEAD_TOKENS = 32
# Attention implementations the shared prompt is tested exact with (tests/test_trainpass.py, on CPU). Flash attention's
# and flex attention's cached paths with padding masks are not tested here (no GPU): they stand down, said once.
VERIFIED_ATTENTION = ("sdpa", "eager")
MAX_BUCKETS = 8


def completion_lengths(completion_mask: torch.Tensor) -> list[int]:
    """Per row, the column after its last real (mask 1) completion token; 0 for a row with none."""
    width = completion_mask.size(1)
    columns = torch.arange(1, width + 1, device=completion_mask.device)
    return (completion_mask.bool() * columns).max(dim=1).values.tolist()


def length_buckets(lengths: list[int], overhead: int = BUCKET_OVERHEAD_TOKENS,
                   max_buckets: int = MAX_BUCKETS) -> list[list[int]]:
    """Row indices grouped into buckets of similar length (each bucket is padded to its longest): the split of the
    length-sorted rows into at most `max_buckets` runs that minimises padded tokens plus `overhead` per bucket
    (a small dynamic programme over split points). Every row lands in exactly one bucket, sorted by length."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    widths = [max(1, lengths[i]) for i in order]
    n = len(order)
    if n == 0:
        return []
    inf = float("inf")
    # cost[k][j]: the best cost of the first j sorted rows in k buckets; a bucket of rows i..j-1 costs
    # (j - i) * widths[j - 1] (sorted, so its last row is its longest) plus the overhead.
    cost = [[inf] * (n + 1) for _ in range(max_buckets + 1)]
    split = [[0] * (n + 1) for _ in range(max_buckets + 1)]
    cost[0][0] = 0.0
    for k in range(1, max_buckets + 1):
        for j in range(1, n + 1):
            for i in range(j):
                if cost[k - 1][i] < inf:
                    c = cost[k - 1][i] + (j - i) * widths[j - 1] + overhead
                    if c < cost[k][j]:
                        cost[k][j], split[k][j] = c, i
    best = min(range(1, max_buckets + 1), key=lambda k: cost[k][n])
    buckets, j = [], n
    for k in range(best, 0, -1):
        i = split[k][j]
        buckets.append(order[i:j])
        j = i
    return buckets[::-1]


def distinct_rows(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(index of one row per distinct (ids, mask) row, and each row's position in that list)."""
    keys = torch.cat([ids * mask, mask], dim=1)
    _, inverse = torch.unique(keys, dim=0, return_inverse=True)
    first = torch.full((int(inverse.max()) + 1,), ids.size(0), dtype=torch.long, device=ids.device)
    first = first.scatter_reduce(0, inverse, torch.arange(ids.size(0), device=ids.device), reduce="amin")
    return first, inverse


def has_active_dropout(model: torch.nn.Module, training: bool) -> bool:
    """Whether a forward of `model` (in training mode when `training`) draws dropout masks: then two passes differ
    anyway, and a shared prompt would share one mask among its completions, which the dense pass never does."""
    if not training:
        return False
    if any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules()):
        return True
    config = getattr(model, "config", None)
    return bool(getattr(config, "attention_dropout", 0.0))


@dataclass
class PassPlan:
    """How one model's chunks are scored: `trim` (leading columns and length buckets), `share` (the shared prompt),
    `cache_keyword` (the name the model's forward takes its key/value cache by), `copy_tokens` (the memory one more
    forward call holds, which a bucket and the shared prompt must save to be taken)."""

    trim: bool
    share: bool
    by_column: bool
    cache_keyword: str = "past_key_values"
    copy_tokens: int = 0  # the memory one more forward call holds, in scored tokens (`call_copy_tokens`)


def plan_for(unwrapped: torch.nn.Module, trim: bool, share: bool, training: bool | None = None,
             gradient_checkpointing: bool | None = None) -> tuple[PassPlan, list[str]]:
    """The plan for the bare transformers model `unwrapped` (PEFT and DDP taken off), and the reasons a requested part
    stands down. `training` and `gradient_checkpointing` default to the model's current state (the start-up block
    passes what training will have)."""
    notes: list[str] = []
    config = getattr(unwrapped, "config", None)
    model_type = getattr(config, "model_type", None)
    by_column = model_type in POSITIONS_BY_COLUMN
    rope = length_dependent_rope(config)
    if rope and (trim or share):
        notes.append(f"trim_padding and shared_prompt_pass: off for this model (its {rope} rotary embedding takes its "
                     "frequencies from each forward's longest position, so a shorter forward would rotate otherwise); "
                     "TRL's dense pass")
        return PassPlan(trim=False, share=False, by_column=by_column), notes
    if share:
        training = unwrapped.training if training is None else training
        if gradient_checkpointing is None:
            gradient_checkpointing = bool(getattr(unwrapped, "is_gradient_checkpointing", False))
        why = shared_prompt_refusal(unwrapped, model_type, by_column, training, gradient_checkpointing)
        if why:
            notes.append(f"shared_prompt_pass: off for this model ({why}); each completion recomputes its prompt")
            share = False
    if trim and not by_column:
        notes.append(f"trim_padding: model type {model_type!r} is not known to number positions by column, so only "
                     "trailing completion padding is dropped (leading prompt padding stays)")
    keyword = cache_keyword(unwrapped) if share else "past_key_values"
    return PassPlan(trim=trim, share=share, by_column=by_column, cache_keyword=keyword), notes


def call_copy_tokens(unwrapped: torch.nn.Module, autocast_dtype: torch.dtype | None) -> int:
    """The memory one more forward call holds, in scored tokens: under autocast with frozen weights of a wider type
    (LoRA on a float32 base with bf16 autocast), every call makes a low-precision copy of those weights and keeps it
    for its backward (autocast caches the copies of trainable weights only); counted in the activation bytes a token
    keeps (estimated from the model's shape), so that splitting a micro-batch never holds more than the dense pass.
    0 otherwise."""
    if autocast_dtype is None:
        return 0
    size = torch.finfo(autocast_dtype).bits // 8
    copies = sum(p.numel() for p in unwrapped.parameters()
                 if not p.requires_grad and p.dim() == 2 and p.is_floating_point() and p.element_size() > size) * size
    if not copies:
        return 0
    config = getattr(unwrapped, "config", None)
    hidden = getattr(config, "hidden_size", None) or getattr(config, "n_embd", None) or 1024
    inner = getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) or 4 * hidden
    layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None) or 1
    per_token = layers * (8 * hidden + 3 * inner) * size  # what a decoder layer keeps per token, roughly
    return -(-copies // per_token)


def length_dependent_rope(config) -> str | None:
    """The rotary embedding type of `config` whose frequencies depend on the forward's longest position (`dynamic`
    NTK scaling, `longrope`), or None. Read from `rope_parameters` (transformers 5) or `rope_scaling`, per layer type
    too."""
    found = []

    def walk(value) -> None:
        if isinstance(value, dict):
            kind = value.get("rope_type", value.get("type"))
            if isinstance(kind, str) and ("dynamic" in kind or kind == "longrope"):
                found.append(kind)
            for inner in value.values():
                walk(inner)

    for key in ("rope_parameters", "rope_scaling"):
        walk(getattr(config, key, None))
    return found[0] if found else None


def shared_prompt_refusal(model: torch.nn.Module, model_type: str | None, by_column: bool, training: bool,
                          gradient_checkpointing: bool) -> str | None:
    """Why a shared prompt would not be exact for `model`, or None."""
    config = getattr(model, "config", None)
    if not by_column:
        return f"model type {model_type!r} is not known to number positions by column"
    attention = getattr(config, "_attn_implementation", None) or "eager"
    if attention not in VERIFIED_ATTENTION:
        return f"attention implementation {attention!r} is not verified exact with a shared key/value cache"
    if gradient_checkpointing and training:
        return "gradient checkpointing drops the key/value cache in training"
    if has_active_dropout(model, training):
        return "dropout is active (set disable_dropout: true)"
    layer_types = getattr(config, "layer_types", None) or []
    if any(kind != "full_attention" for kind in layer_types) or (
            model_type == "mistral" and getattr(config, "sliding_window", None)):
        return "sliding-window attention"
    return None


def cache_keyword(model: torch.nn.Module) -> str:
    """`cache` (transformers >= 5.2x) or `past_key_values`: what the backbone's forward names its cache argument."""
    backbone = getattr(model, "base_model", model)
    parameters = inspect.signature(backbone.forward).parameters
    return "cache" if "cache" in parameters and "past_key_values" not in parameters else "past_key_values"


def expanded_cache(cache, rows: torch.Tensor):
    """A new dynamic cache holding `cache`'s keys and values for `rows` (repeats allowed; differentiable)."""
    from transformers import DynamicCache

    expanded = DynamicCache()
    for index, layer in enumerate(cache.layers):
        expanded.update(layer.keys.index_select(0, rows), layer.values.index_select(0, rows), index)
    return expanded


def returned_cache(outputs):
    """The cache a forward returned: `cache` (transformers >= 5.2x), else `past_key_values`."""
    cache = outputs.get("cache") if hasattr(outputs, "get") else None
    return cache if cache is not None else getattr(outputs, "past_key_values", None)


def score_chunk(model, plan: PassPlan, input_ids: torch.Tensor, attention_mask: torch.Tensor, width: int,
                compute_entropy: bool, autocast) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probabilities (and entropies) of the last `width` columns of one chunk, `[rows, width]`, zero
    where the completion mask is zero: what TRL's dense pass returns for it, computed per `plan`."""
    prompt_ids, completion_ids = input_ids[:, :-width], input_ids[:, -width:]
    prompt_mask, completion_mask = attention_mask[:, :-width], attention_mask[:, -width:]
    first = 0
    if plan.trim and plan.by_column:
        real = prompt_mask.any(dim=0).nonzero()
        first = int(real[0]) if len(real) else 0
        first = min(first, prompt_ids.size(1) - 1)  # keep one prompt column: it predicts the first completion token
        prompt_ids, prompt_mask = prompt_ids[:, first:], prompt_mask[:, first:]
    with autocast():  # one context for every forward: a trainable weight's low-precision copy is made once
        pieces = forward_buckets(model, plan, prompt_ids, prompt_mask, completion_ids, completion_mask, first)
    return assemble(pieces, input_ids.size(0), width, compute_entropy)


def forward_buckets(model, plan: PassPlan, prompt_ids, prompt_mask, completion_ids, completion_mask,
                    first: int) -> list[tuple[torch.Tensor, int, object]]:
    """(rows, completion columns kept, the fused head's output) per length bucket; with the shared prompt, the
    distinct prompts' cache first."""
    lengths = completion_lengths(completion_mask)
    overhead = max(BUCKET_OVERHEAD_TOKENS, plan.copy_tokens)
    buckets = length_buckets(lengths, overhead=overhead) if plan.trim else [list(range(prompt_ids.size(0)))]
    share = plan.share and prompt_ids.size(1) >= 2
    cache, inverse = None, None
    if share:
        representatives, inverse = distinct_rows(prompt_ids, prompt_mask)
        # The prompt's own forward is one more call: taken when the prompt columns it saves pay for its memory.
        share = (prompt_ids.size(0) - len(representatives)) * (prompt_ids.size(1) - 1) >= plan.copy_tokens
    if share:
        cache = prompt_cache(model, plan, prompt_ids[representatives, :-1], prompt_mask[representatives, :-1], first)
    pieces = []
    for bucket in buckets:
        rows = torch.tensor(bucket, device=prompt_ids.device)
        keep = max(1, max(lengths[i] for i in bucket)) if plan.trim else completion_ids.size(1)
        if share:
            out = shared_bucket(model, plan, cache, inverse[rows], prompt_ids[rows, -1:], prompt_mask[rows],
                                completion_ids[rows, :keep], completion_mask[rows, :keep], first)
        else:
            out = dense_bucket(model, plan, prompt_ids[rows], prompt_mask[rows], completion_ids[rows, :keep],
                               completion_mask[rows, :keep], first)
        pieces.append((rows, keep, out))
    return pieces


def assemble(pieces: list, count: int, width: int, compute_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The buckets' values in the chunk's row order, `[count, width]`, zero past each bucket's kept columns. Written
    in place of zeros through index_put (differentiable), so each row's values come from its own bucket."""
    dtype = pieces[0][2].log_probs.dtype
    device = pieces[0][2].log_probs.device
    logps = torch.zeros(count, width, dtype=torch.float32, device=device)
    entropies = torch.zeros_like(logps) if compute_entropy else None
    for rows, keep, out in pieces:
        logps = logps.index_put((rows,), torch.nn.functional.pad(out.log_probs[:, -keep:].float(), (0, width - keep)))
        if compute_entropy:
            entropies = entropies.index_put(
                (rows,), torch.nn.functional.pad(out.entropy[:, -keep:].float(), (0, width - keep)))
    return logps.to(dtype), (entropies.to(pieces[0][2].entropy.dtype) if compute_entropy else None)


def positions(first: int, start: int, count: int, device) -> torch.Tensor:
    return torch.arange(first + start, first + start + count, device=device).unsqueeze(0)


def scored_labels(ids: torch.Tensor, mask: torch.Tensor, prompt_columns: int) -> torch.Tensor:
    """TRL's labels: the completion tokens the mask keeps; everything else -100."""
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :prompt_columns] = -100
    return labels


def dense_bucket(model, plan: PassPlan, prompt_ids, prompt_mask, completion_ids, completion_mask, first):
    ids = torch.cat([prompt_ids, completion_ids], dim=1)
    mask = torch.cat([prompt_mask, completion_mask], dim=1)
    kwargs = {"position_ids": positions(first, 0, ids.size(1), ids.device)} if plan.by_column else {}
    return model(input_ids=ids, attention_mask=mask, labels=scored_labels(ids, mask, prompt_ids.size(1)),
                 fused_lm_head=True, **kwargs)


def prompt_cache(model, plan: PassPlan, ids, mask, first):
    """The key/value cache of the distinct prompts (all but their last token), with gradients."""
    outputs = model(input_ids=ids, attention_mask=mask, position_ids=positions(first, 0, ids.size(1), ids.device),
                    use_cache=True, logits_to_keep=1)
    cache = returned_cache(outputs)
    if cache is None or not hasattr(cache, "layers"):
        raise RuntimeError("shared_prompt_pass: the model returned no key/value cache; set shared_prompt_pass: false")
    return cache


def shared_bucket(model, plan: PassPlan, cache, prompt_of_row, last_prompt_ids, prompt_mask, completion_ids,
                  completion_mask, first):
    """One bucket on the shared cache: the rows' last prompt token and their completions."""
    ids = torch.cat([last_prompt_ids, completion_ids], dim=1)
    tail_mask = torch.cat([prompt_mask[:, -1:], completion_mask], dim=1)
    mask = torch.cat([prompt_mask, completion_mask], dim=1)  # the cached columns and these
    past = prompt_mask.size(1) - 1
    return model(input_ids=ids, attention_mask=mask, position_ids=positions(first, past, ids.size(1), ids.device),
                 labels=scored_labels(ids, tail_mask, 1), fused_lm_head=True,
                 **{plan.cache_keyword: expanded_cache(cache, prompt_of_row)})
