"""When unjudged rows stop a run (`unjudged_share_limit`), the way TRL's multi-task rewards allow: a reward returns
None for the rows it does not judge (TRL's documented way to mix math and code rows in one run), so a None alone is
no fault. The run stops when, in two generation batches running,

- a reward that names the rows it judges (the dataset columns it reads: `RewardSpec.columns` for the registry's
  rewards, or a function's own `r1kit_columns` attribute) leaves at least `limit` of those rows unjudged while the
  batch holds some: it can never judge (test cases out of reach, no sandbox, unparseable golds); a batch without
  any of its rows counts neither way;
- or at least `limit` of the batch's rows that some reward names as its own go unjudged by every reward.

A reward that names no rows (a plain function, as in TRL's tests) never stops a run: TRL warns and trains on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from r1kit.rewards import COLUMNS_ATTRIBUTE

Kind = tuple[str, ...] | None  # the columns a reward reads (() : every row is its own); None: it does not say


def reward_kind(func: Any) -> Kind:
    """The columns `func` says it judges rows by, or None when it does not say."""
    kind = getattr(func, COLUMNS_ATTRIBUTE, None)
    return tuple(kind) if isinstance(kind, (list, tuple)) else None


def own_rows(rows: Sequence[dict], kinds: Sequence[Kind]) -> list[list[bool]]:
    """[row][reward]: whether the row is the reward's to judge (it holds every column the reward reads, not empty);
    never for a reward that does not say."""
    return [[kind is not None and all(row.get(c) not in (None, "", [], {}) for c in kind) for kind in kinds]
            for row in rows]


class UnjudgedWatch:
    """Counts, per reward and for the rows no reward judged, the generation batches running that crossed the limit;
    `check` returns the stop's message, or None."""

    def __init__(self, names: Sequence[str], kinds: Sequence[Kind], limit: float | None):
        self.names, self.kinds, self.limit = list(names), list(kinds), limit
        self.streak = {i: 0 for i in range(len(self.names))}
        self.nobody_streak = 0

    @property
    def active(self) -> bool:
        """Whether any reward names its rows (otherwise there is nothing to check, as under TRL)."""
        return self.limit is not None and any(kind is not None for kind in self.kinds)

    def check(self, unjudged: Sequence[Sequence[bool]], own: Sequence[Sequence[bool]]) -> str | None:
        """`unjudged[row][reward]`: the reward returned None; `own[row][reward]`: the row is the reward's (both over
        every rank's rows of the batch)."""
        if not self.active or not unjudged:
            return None
        for i, name in enumerate(self.names):
            mine = [u[i] for u, o in zip(unjudged, own) if o[i]]
            if not mine:
                continue  # no row of its kind in this batch: a math batch in a math + code run
            share = sum(mine) / len(mine)
            self.streak[i] = self.streak[i] + 1 if share >= self.limit else 0
            if self.streak[i] >= 2:
                return (f"reward '{name}' left {share:.0%} of its rows unjudged (None) in two generation batches "
                        f"running (unjudged_share_limit {self.limit:g}), so it trains nothing")
        claimed = [all(u) for u, o in zip(unjudged, own) if any(o)]
        share = sum(claimed) / len(claimed) if claimed else 0.0
        self.nobody_streak = self.nobody_streak + 1 if claimed and share >= self.limit else 0
        if self.nobody_streak >= 2:
            return (f"no reward ({', '.join(self.names)}) judged {share:.0%} of the rows in two generation batches "
                    f"running (unjudged_share_limit {self.limit:g}), so they train nothing")
        return None
