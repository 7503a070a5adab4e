"""r1kit's error vocabulary. Imports nothing, so that any module (and the console, which catches these) can use it
without pulling in TRL.

- `ConfigError`: a recipe, command line or input that cannot run. Its message is one line that names the field and
  says what to change; every command prints it as `r1kit: error: ...` with exit code 2 (`r1kit.console`).
- `ConfigWarning`: a recipe value r1kit changed or a default that moved; printed as one `r1kit: warning: ...` line.
- `GenerationUnavailable`: the generator (a background rollout producer, a vLLM server) failed beyond its retries;
  the run stops with exit code 75 (resumable: its last checkpoint is intact).
- Anything else raised is a bug (or an internal invariant broken mid-training) and keeps its traceback.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A recipe or command line that cannot run. The message says what to change."""


class ConfigWarning(UserWarning):
    """A recipe value r1kit changed (renamed key, dropped key, bf16 without a GPU)."""


class GenerationUnavailable(RuntimeError):
    """The generator failed and kept failing after its retries: the run stops, resumable from its last checkpoint."""


class RefusedReply(ValueError):
    """A generation server's reply that cannot be trained on (token ids out of the vocabulary, log-probabilities that
    are not finite or not one per token): refused and counted, generated again; never trained on."""


def one_line(exc: BaseException, limit: int = 300) -> str:
    """An exception's text on one line (whitespace runs collapsed), cut at `limit` characters; its type's name when
    it has no text. For quoting a library's error inside a `ConfigError`."""
    return " ".join(str(exc).split())[:limit] or type(exc).__name__
