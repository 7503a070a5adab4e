"""The packed training pass: one row per chunk, no padding, each distinct prompt once.

The chunk's real tokens go into one row. Each distinct prompt appears once, minus its last token; each completion
follows as a segment `[last prompt token, completion...]` that sees the whole prompt and itself, causally, and nothing
of its siblings (PrefixGrouper's layout; the repeated last prompt token is what predicts each completion's first
token, so TRL's fused LM head scores every segment as a plain shifted sequence). Position ids are the dense pass's
column numbers, so rotary and absolute positions are those of TRL's dense pass, and so are the values.

The mask `keep(q, k) = same group ∧ col[k] ≤ col[q] ∧ real[k] ∧ (k in the group's prompt ∨ same segment)` goes
through the model's own forward as a 4-D mask, under an attention function r1kit registers with transformers
(`r1kit_packed`) for the duration of the call:
- a dense boolean mask through SDPA (every device; on CPU the only path, and the oracle the tests compare against);
- on CUDA, a FlexAttention block mask (`create_block_mask`) through a compiled `flex_attention` (dynamic shapes, the
  packed length padded to the block size, dynamo's recompile limit raised: at its default a mismatched
  specialisation is silently reused). The first flex call of a run is checked against the SDPA mask
  (`FlexSelfCheck`); a mismatch turns flex off for the run, said once.

The layout is built on the host from one copy of the chunk's ids and mask (the only host sync of the pass), and
travels back as one index tensor.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

import numpy as np
import torch

logger = logging.getLogger(__name__)

ATTENTION_NAME = "r1kit_packed"
FLEX_BLOCK = 128  # FlexAttention's block size: the packed length is padded to a multiple of it
# The SDPA path materialises a [T, T] boolean mask and computes every pair: beyond this many packed tokens it is not
# a candidate (64 MiB of mask; the flex path or the bucketed pass take such chunks).
MAX_DENSE_MASK_TOKENS = 8192
RECOMPILE_LIMIT = 256


@dataclass
class PackedLayout:
    """One chunk packed into one row. Token vectors (length `length`, padding included) live on the chunk's device:
    `source` (flat index into the chunk's `[rows * columns]` ids), `positions`, `label_source` (flat index of the token
    each position predicts, -1 for none), and the mask's `group`, `segment` (-1 in a group's shared prompt), `column`,
    `real` and `self_only` (a query that sees no real key keeps itself, so that no softmax row is empty). `flex`: for
    FlexAttention (padded to its block size). `real_share`: the chunk's real tokens over its dense cells.
    `scored` and `destination`: for each scored completion token, its packed position and its flat index in the
    `[rows * width]` output."""

    rows: int
    width: int
    length: int
    real_tokens: int
    real_share: float
    flex: bool
    source: torch.Tensor
    positions: torch.Tensor
    label_source: torch.Tensor
    group: torch.Tensor
    segment: torch.Tensor
    column: torch.Tensor
    real: torch.Tensor
    self_only: torch.Tensor
    scored: torch.Tensor
    destination: torch.Tensor


def _group_of_rows(prompt_ids: np.ndarray, prompt_mask: np.ndarray, share: bool) -> np.ndarray:
    """Each row's group: rows with the same prompt (ids and mask) share one, when `share`; otherwise a row each."""
    if not share:
        return np.arange(prompt_ids.shape[0])
    keys = np.concatenate([prompt_ids * prompt_mask, prompt_mask], axis=1)
    _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    # numbered in order of first appearance, so the packed row follows the chunk's row order
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[inverse.reshape(-1)]


def layout_arrays(ids: np.ndarray, mask: np.ndarray, width: int, share: bool, pad_multiple: int = 1) -> dict:
    """The packed layout of one chunk, on the host (numpy): see `PackedLayout`. `ids` and `mask` are `[rows,
    prompt + width]`; `width` is the completion width."""
    rows, columns = ids.shape
    prompt = columns - width
    mask = mask.astype(bool)
    completion = mask[:, prompt:]
    lengths = np.where(completion.any(axis=1), width - np.argmax(completion[:, ::-1], axis=1), 0)
    has_prompt = mask[:, :prompt].any(axis=1)
    first = np.where(has_prompt, np.argmax(mask[:, :prompt], axis=1), prompt - 1)
    first = np.minimum(first, prompt - 1)  # keep one prompt column: it predicts the first completion token
    groups = _group_of_rows(ids[:, :prompt], mask[:, :prompt].astype(ids.dtype), share)

    token_row, token_column, token_group, token_segment = [], [], [], []
    for group in range(int(groups.max()) + 1 if rows else 0):
        members = np.flatnonzero(groups == group)
        head = members[0]
        shared = np.arange(first[head], prompt - 1)  # the prompt minus its last token, once
        token_row.append(np.full(len(shared), head))
        token_column.append(shared)
        token_group.append(np.full(len(shared), group))
        token_segment.append(np.full(len(shared), -1))
        for row in members:
            # without sharing the group is this row alone, and its prompt's start is its own
            segment = np.arange(prompt - 1, prompt + lengths[row])
            token_row.append(np.full(len(segment), row))
            token_column.append(segment)
            token_group.append(np.full(len(segment), group))
            token_segment.append(np.full(len(segment), row))
    row_of = np.concatenate(token_row).astype(np.int64)
    column = np.concatenate(token_column).astype(np.int64)
    group_of = np.concatenate(token_group).astype(np.int64)
    segment = np.concatenate(token_segment).astype(np.int64)
    real = mask[row_of, column]

    # Each segment token predicts the next column of its row while that column is a kept, real completion token.
    nxt = column + 1
    in_segment = (segment >= 0) & (nxt < prompt + lengths[row_of])
    predicts = in_segment & mask[row_of, np.minimum(nxt, columns - 1)]
    label_source = np.where(predicts, row_of * columns + nxt, -1)
    scored = np.flatnonzero(predicts)
    destination = row_of[scored] * width + (nxt[scored] - prompt)

    self_only = ~real & (_visible_real_keys(group_of, segment, real) == 0)
    count = len(column)
    length = -(-count // pad_multiple) * pad_multiple if count else pad_multiple
    pad = length - count
    if pad:  # padding tokens form a group of their own and see only themselves
        row_of = np.concatenate([row_of, np.zeros(pad, np.int64)])
        column = np.concatenate([column, np.zeros(pad, np.int64)])
        group_of = np.concatenate([group_of, np.full(pad, group_of.max(initial=-1) + 1)])
        segment = np.concatenate([segment, np.full(pad, -2)])
        real = np.concatenate([real, np.zeros(pad, bool)])
        self_only = np.concatenate([self_only, np.ones(pad, bool)])
        label_source = np.concatenate([label_source, np.full(pad, -1)])
    return {"rows": rows, "width": width, "length": length, "real_tokens": count,
            "source": row_of * columns + column, "positions": column, "label_source": label_source,
            "group": group_of, "segment": segment, "column": column, "real": real.astype(np.int64),
            "self_only": self_only.astype(np.int64), "scored": scored, "destination": destination}


def _visible_real_keys(group: np.ndarray, segment: np.ndarray, real: np.ndarray) -> np.ndarray:
    """For each token, how many real keys it sees (itself included): its group's shared prompt up to it, and for a
    segment token the group's whole shared prompt plus its segment up to it. Tokens come in runs of one (group,
    segment), each group's shared prompt first."""
    real = real.astype(np.int64)
    shared = segment == -1
    shared_total = np.bincount(group[shared], weights=real[shared], minlength=int(group.max()) + 1).astype(np.int64)
    starts = np.ones(len(group), dtype=bool)
    starts[1:] = (group[1:] != group[:-1]) | (segment[1:] != segment[:-1])
    running = np.cumsum(real)
    before_run = (running - real)[starts][np.cumsum(starts) - 1]  # the running count where each token's run starts
    within = running - before_run
    return np.where(shared, within, shared_total[group] + within)


VECTORS = ("source", "positions", "label_source", "group", "segment", "column", "real", "self_only")


def build_layout(input_ids: torch.Tensor, attention_mask: torch.Tensor, width: int, share: bool,
                 flex: bool = False) -> PackedLayout:
    """The chunk's `PackedLayout` on its device: one device-to-host copy of the ids and mask, one copy back. For
    `flex` (FlexAttention's block mask) the row is padded to the block size."""
    both = torch.stack([input_ids, attention_mask.to(input_ids.dtype)]).cpu().numpy()
    arrays = layout_arrays(both[0], both[1], width, share, FLEX_BLOCK if flex else 1)
    length, scored = arrays["length"], len(arrays["scored"])
    packed = np.concatenate([*(arrays[name] for name in VECTORS), arrays["scored"], arrays["destination"]])
    host = torch.from_numpy(packed.astype(np.int64))
    device = input_ids.device
    on_device = (host.pin_memory() if device.type == "cuda" else host).to(device, non_blocking=True)
    vectors = dict(zip(VECTORS, on_device[: len(VECTORS) * length].view(len(VECTORS), length)))
    tail = on_device[len(VECTORS) * length:]
    real_share = float(both[1].sum()) / max(1, both[1].size)  # of the chunk's cells, as the dense pass lays them out
    return PackedLayout(rows=arrays["rows"], width=width, length=length, real_tokens=arrays["real_tokens"],
                        real_share=real_share, flex=flex, scored=tail[:scored], destination=tail[scored:], **vectors)


def keep_pairs(layout: PackedLayout, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Whether query `q` attends to key `k` (index tensors that broadcast): the mask of the module docstring."""
    same_view = (layout.segment[k] == -1) | (layout.segment[k] == layout.segment[q])
    causal = layout.column[k] <= layout.column[q]
    keep = (layout.group[q] == layout.group[k]) & causal & (layout.real[k] == 1) & same_view
    return keep | ((q == k) & (layout.self_only[q] == 1))


def dense_mask(layout: PackedLayout) -> torch.Tensor:
    """The mask as SDPA takes it: `[1, 1, T, T]`, True where a query attends to a key."""
    index = torch.arange(layout.length, device=layout.group.device)
    return keep_pairs(layout, index[:, None], index[None, :])[None, None]


def block_mask(layout: PackedLayout):
    """The mask as FlexAttention takes it (`BlockMask`, built by a compiled kernel on CUDA)."""
    from torch.nn.attention.flex_attention import create_block_mask

    def mask_mod(batch, head, q, k):
        return keep_pairs(layout, q, k)

    device = layout.group.device
    return create_block_mask(mask_mod, None, None, layout.length, layout.length, device=device,
                             BLOCK_SIZE=FLEX_BLOCK, _compile=device.type == "cuda")


_FLEX_FUNCTIONS: dict[bool, object] = {}


def flex_function(compiled: bool):
    """`flex_attention`, compiled with dynamic shapes (CUDA), or eager (CPU, forward only: the tests)."""
    if compiled not in _FLEX_FUNCTIONS:
        from torch.nn.attention.flex_attention import flex_attention

        if compiled:
            import torch._dynamo

            config = torch._dynamo.config
            name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
            setattr(config, name, max(getattr(config, name), RECOMPILE_LIMIT))
            _FLEX_FUNCTIONS[compiled] = torch.compile(flex_attention, dynamic=True)
        else:
            _FLEX_FUNCTIONS[compiled] = flex_attention
    return _FLEX_FUNCTIONS[compiled]


def flex_available() -> bool:
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


def packed_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """The attention function of the packed call (registered as `r1kit_packed`): SDPA with the dense boolean mask,
    or FlexAttention with the block mask."""
    for unsupported in ("softcap", "s_aux", "sliding_window", "position_bias"):
        if kwargs.get(unsupported) is not None:
            raise RuntimeError(f"the packed training pass does not support attention with {unsupported}")
    if isinstance(attention_mask, torch.Tensor):
        if key.size(1) != query.size(1):  # grouped-query attention: as transformers' SDPA path repeats them
            repeat = query.size(1) // key.size(1)
            key, value = key.repeat_interleave(repeat, dim=1), value.repeat_interleave(repeat, dim=1)
        output = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling)
    else:
        if dropout:
            raise RuntimeError("the packed training pass's flex path does not support attention dropout")
        flex = flex_function(compiled=query.device.type == "cuda")
        output = flex(query, key, value, block_mask=attention_mask, scale=scaling,
                      enable_gqa=key.size(1) != query.size(1))
    return output.transpose(1, 2).contiguous(), None


def register_attention() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION_NAME, packed_attention)


@contextlib.contextmanager
def packed_attention_for(config):
    """The model whose config is `config` runs its attention through `packed_attention` inside the context."""
    register_attention()
    previous = config._attn_implementation
    config._attn_implementation = ATTENTION_NAME
    try:
        yield
    finally:
        config._attn_implementation = previous


def score_packed(model, config, input_ids: torch.Tensor, attention_mask: torch.Tensor, width: int, share: bool,
                 compute_entropy: bool, autocast, flex: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probabilities (and entropies) of the chunk's last `width` columns, `[rows, width]`, zero where
    the completion mask is zero: TRL's dense pass's values, from one packed forward. `config` is the bare model's
    (its attention implementation is switched for the call)."""
    layout = build_layout(input_ids, attention_mask, width, share, flex)
    return score_layout(model, config, layout, input_ids, compute_entropy, autocast)


def score_layout(model, config, layout: PackedLayout, input_ids: torch.Tensor, compute_entropy: bool,
                 autocast) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`score_packed` on a layout already built (a flex layout goes through FlexAttention)."""
    flat = input_ids.reshape(-1)
    ids = flat[layout.source].unsqueeze(0)
    labels = torch.where(layout.label_source >= 0, flat[layout.label_source.clamp(min=0)], -100).unsqueeze(0)
    mask = block_mask(layout) if layout.flex else dense_mask(layout)
    with autocast(), packed_attention_for(config):
        out = model(input_ids=ids, attention_mask=mask, position_ids=layout.positions.unsqueeze(0),
                    shift_labels=labels, fused_lm_head=True)
    return (unpack(out.log_probs, layout),
            unpack(out.entropy, layout) if compute_entropy else None)


def unpack(values: torch.Tensor, layout: PackedLayout) -> torch.Tensor:
    """The packed row's scored values in the chunk's `[rows, width]` layout, zeros elsewhere (differentiable)."""
    out = values.new_zeros(layout.rows * layout.width)
    out = out.index_put((layout.destination,), values[0, layout.scored])
    return out.view(layout.rows, layout.width)
