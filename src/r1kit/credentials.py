"""Credentials: which values are secrets, and how they stay out of every file r1kit writes or pushes.

A secret reaches a run from the recipe or the command line (`hub_token`; a URL with `user:password@`, such as a
router's or the vLLM server's), from the environment (`HF_TOKEN`, `WANDB_API_KEY`, `E2B_API_KEY`, `MORPH_API_KEY`,
any `*_TOKEN`, `*_API_KEY`, `*_SECRET`, `*_PASSWORD`, a proxy URL with a password; the recipe's `env:` block sets
some) or from a provider's own file (the Hub's token file, `~/.netrc`, the vLLM server's shared secret). Two things
keep them out of what r1kit writes:

- `seal(*args)`: each secret field of the parsed recipe becomes a `Secret`, a `str` to every library that uses it,
  whose pickle holds no secret (`None`, or the URL without its password). `training_args.bin`, written at the top
  of the output folder and in every checkpoint and uploaded with the model by transformers' `push_to_hub`, is a
  pickle of the training arguments. A resumed run parses its recipe, command line and environment again, so its
  secrets come from where they came from; nothing reads them back from a checkpoint.
- `redact(text)`: every known secret value, a URL's `user:password@` and an `Authorization` header's value become
  `<redacted>`. Every JSON record (`records.write_text`), the output folder's lock file, every log record
  (`guard_logs`), a dry run's printout and the one-line error pass through it.

Imports nothing of r1kit but its errors, so that any module can use it.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

import yaml

from r1kit.errors import ConfigError

REDACTED = "<redacted>"
MIN_SECRET_CHARS = 6  # shorter values are not remembered: redacting "1" or "true" everywhere would garble the logs

# Field names that hold a secret whatever their value (a tokenizer's `eos_token` is not one of them).
SECRET_FIELD = re.compile(r"(^|_)(hub|auth|access|api|bearer|id|refresh)_token$|api_?key|secret|passw(or)?d|"
                          r"credential", re.IGNORECASE)
# Environment variables that hold a secret: HF_TOKEN, WANDB_API_KEY, AWS_SECRET_ACCESS_KEY, DB_PASSWORD, ... (not
# TOKENIZERS_PARALLELISM); a name ending in _FILE, _PATH or _DIR names where a secret is, not the secret.
SECRET_ENV = re.compile(r"(^|_)(TOKEN|API_?KEY|SECRET|ACCESS_KEY|PRIVATE_KEY|PASSWORD|PASSWD|CREDENTIALS?)($|_)",
                        re.IGNORECASE)
NOT_A_SECRET_ENV = re.compile(r"_(FILE|PATH|DIR)$", re.IGNORECASE)
USERINFO = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://)([^/\s:@]+):([^/\s@]+)@")  # scheme://user:password@
AUTHORIZATION = re.compile(r"(?i)\b((?:proxy-)?authorization['\"]?\s*[:=]\s*['\"]?(?:(?:bearer|basic|token)\s+)?)"
                           r"[^\s'\",}]+")
HUB_TOKEN_SHAPE = re.compile(r"\bhf_[A-Za-z0-9]{30,}\b")  # a Hugging Face token, known or not

# The vLLM server's shared secret (`r1kit vllm-serve` and the trainer): from the environment or a file, never a recipe.
VLLM_SECRET_ENV = "R1KIT_VLLM_SECRET"
VLLM_SECRET_FILE_ENV = "R1KIT_VLLM_SECRET_FILE"
RECIPE_FORBIDDEN_ENV = {VLLM_SECRET_ENV: VLLM_SECRET_FILE_ENV}  # variable -> what to use instead

_known: set[str] = set()
_lock = threading.Lock()


# --------------------------------------------------------------------------------------------------------------------
# Knowing the secrets
# --------------------------------------------------------------------------------------------------------------------
def remember(value: str | None) -> None:
    """Adds `value` to the secrets `redact` replaces (values under `MIN_SECRET_CHARS` are left out)."""
    if isinstance(value, str) and len(value.strip()) >= MIN_SECRET_CHARS:
        with _lock:
            _known.add(str(value.strip()))


def remember_environment(environ: dict[str, str] | None = None) -> None:
    """Remembers the secrets of the environment (secret-named variables, passwords in URLs) and of the providers'
    own files (the Hub's token, `~/.netrc`)."""
    environ = os.environ if environ is None else environ
    for name, value in environ.items():
        if SECRET_ENV.search(name) and not NOT_A_SECRET_ENV.search(name):
            remember(value)
        for match in USERINFO.finditer(value):
            remember(match[3])
    remember(_hub_token())
    for password in _netrc_passwords():
        remember(password)


def _hub_token() -> str | None:
    try:
        from huggingface_hub import get_token  # deferred: huggingface_hub (only to know the value, never to use it)

        return get_token()
    except Exception:  # noqa: BLE001 - no hub library, an unreadable token file: nothing to remember
        return None


def _netrc_passwords() -> list[str]:
    """The passwords of the netrc file HTTP clients read (`NETRC`, else `~/.netrc`; W&B keeps its key there)."""
    import netrc

    try:
        hosts = netrc.netrc(os.environ.get("NETRC") or None).hosts
    except (OSError, netrc.NetrcParseError):  # no ~/.netrc, or one we cannot read: nothing to remember
        return []
    return [password for _, _, password in hosts.values() if password]


def is_secret_field(name: str) -> bool:
    return bool(SECRET_FIELD.search(name))


def without_secrets(environ: dict[str, str] | None = None) -> dict[str, str]:
    """`environ` (the process's environment) less its secret-named variables and any value holding a URL password:
    for the processes that parse model-written answers outside a jail (math-verify's workers, an unsandboxed
    reasoning-gym scorer), which need the rest."""
    environ = os.environ if environ is None else environ
    return {name: value for name, value in environ.items()
            if not (SECRET_ENV.search(name) and not NOT_A_SECRET_ENV.search(name)) and not USERINFO.search(value)}


# --------------------------------------------------------------------------------------------------------------------
# Values that are never saved
# --------------------------------------------------------------------------------------------------------------------
class Secret(str):
    """A secret's value: the `str` itself to every library that uses it, but never saved. Pickled (`torch.save` of
    the training arguments) it becomes `saved`: None, or a URL without its password. Copies (`copy.copy`,
    `copy.deepcopy`, which TRL and accelerate make of the arguments) keep the value."""

    saved: str | None = None

    def __reduce_ex__(self, protocol):
        return (str, (self.saved,)) if self.saved is not None else (type(None), ())

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __repr__(self) -> str:
        return repr(self.saved) if self.saved is not None else f"'{REDACTED}'"


def saved_form(value: Any) -> Any:
    """`value` as it may be written: a `Secret` (or a list holding some) as it pickles, anything else as it is."""
    if isinstance(value, Secret):
        return value.saved
    if isinstance(value, list) and any(isinstance(v, Secret) for v in value):
        return [saved_form(v) for v in value]
    return value


class SealedFields:
    """For training arguments: `to_dict` (and so `to_json_string`, what TensorBoard's args text, W&B's config and
    every integration record) writes each sealed secret as it pickles, never its value (transformers hides fields
    ending in `_token`, not a URL's password)."""

    def to_dict(self) -> dict:
        return {name: saved_form(value) for name, value in super().to_dict().items()}


# YAML (a dry run's printout) writes a secret as it would be pickled: never its value.
yaml.SafeDumper.add_representer(Secret, lambda dumper, secret: dumper.represent_str(secret.saved or REDACTED))


def sealed(value: str, whole: bool) -> Secret:
    """`value` as a `Secret`, remembered: `whole`, the value is the secret; else the passwords of its URLs are."""
    secret = Secret(value)
    if whole:
        remember(value)
    else:
        for match in USERINFO.finditer(value):
            remember(match[3])
        secret.saved = USERINFO.sub(rf"\1{REDACTED}@", value)
    return secret


def seal(*objects: Any) -> None:
    """Turns each secret attribute of `objects` (the parsed recipe's dataclasses) into a `Secret`, in place: a field
    named as a secret (`hub_token`), and any text or list of texts holding a URL with a password. Remembers the
    environment's secrets too and guards the logs (`guard_logs`), so that from here on nothing written names one."""
    remember_environment()
    guard_logs()
    for obj in objects:
        for name, value in list(vars(obj).items()):
            if isinstance(value, Secret):
                continue
            if isinstance(value, str) and is_secret_field(name):
                setattr(obj, name, sealed(value, whole=True))
            elif isinstance(value, str) and USERINFO.search(value):
                setattr(obj, name, sealed(value, whole=False))
            elif isinstance(value, list) and any(isinstance(v, str) and USERINFO.search(v) for v in value):
                setattr(obj, name, [sealed(v, whole=False) if isinstance(v, str) and USERINFO.search(v) else v
                                    for v in value])


# --------------------------------------------------------------------------------------------------------------------
# Text that never names one
# --------------------------------------------------------------------------------------------------------------------
def redact(text: str) -> str:
    """`text` with every remembered secret, every URL's `user:password@` and every Authorization header's value
    replaced by `<redacted>`."""
    text = str(text)
    with _lock:
        known = sorted(_known, key=len, reverse=True)  # a longer secret first: one may contain another
    for value in known:
        if value in text:
            text = text.replace(value, REDACTED)
    if "://" in text:
        text = USERINFO.sub(rf"\1{REDACTED}@", text)
    if "uthorization" in text:
        text = AUTHORIZATION.sub(rf"\1{REDACTED}", text)
    return HUB_TOKEN_SHAPE.sub(REDACTED, text) if "hf_" in text else text


def redact_argv(argv: list[str]) -> list[str]:
    """A command line with its secrets redacted, the value after a secret-named flag included."""
    out, hide_next = [], False
    for arg in argv:
        flag, eq, value = arg.partition("=")
        secret_flag = arg.startswith("--") and is_secret_field(flag[2:].replace("-", "_"))
        if hide_next:
            out.append(REDACTED)
        elif secret_flag and eq:
            out.append(f"{flag}={REDACTED}")
        else:
            out.append(redact(arg))
        hide_next = secret_flag and not eq
    return out


def guard_logs() -> None:
    """From now on every log record of this process, whichever library logs it and whichever handler writes it, is
    made redacted (its message and its traceback), and so is the traceback of an exception nothing caught."""
    previous = logging.getLogRecordFactory()
    if getattr(previous, "r1kit_guard", False):
        return

    def make_record(*args, **kwargs):
        record = previous(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed log call: the handler reports it as logging always does
            return record
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[0] is not None and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return record

    make_record.r1kit_guard = True
    logging.setLogRecordFactory(make_record)
    guard_tracebacks()


def guard_tracebacks() -> None:
    """An uncaught exception's traceback (the main thread's or another's), printed redacted, as Python prints it."""

    def print_redacted(kind, value, tb, header: str = "") -> None:
        sys.stderr.write(redact(header + "".join(traceback.format_exception(kind, value, tb))))

    def thread_hook(args) -> None:
        if args.exc_type is not SystemExit:
            name = args.thread.name if args.thread is not None else threading.get_ident()
            print_redacted(args.exc_type, args.exc_value, args.exc_traceback, f"Exception in thread {name}:\n")

    sys.excepthook = print_redacted
    threading.excepthook = thread_hook


# --------------------------------------------------------------------------------------------------------------------
# The vLLM server's shared secret
# --------------------------------------------------------------------------------------------------------------------
def vllm_secret(environ: dict[str, str] | None = None) -> str | None:
    """The shared secret of r1kit's vLLM server: `R1KIT_VLLM_SECRET`, else the first line of the file
    `R1KIT_VLLM_SECRET_FILE` names; None when neither is set. A file others can read is refused: then it is no
    secret. Remembered, so that nothing written names it."""
    environ = os.environ if environ is None else environ
    secret = environ.get(VLLM_SECRET_ENV, "").strip()
    path = environ.get(VLLM_SECRET_FILE_ENV, "").strip()
    if not secret and path:
        secret = _secret_from_file(Path(path).expanduser())
    if secret and len(secret) < 16:
        raise ConfigError(f"{VLLM_SECRET_ENV}: a shared secret of {len(secret)} characters is guessable; use 16 or "
                          "more (e.g. python -c 'import secrets; print(secrets.token_urlsafe())')")
    remember(secret)
    return secret or None


def _secret_from_file(path: Path) -> str:
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{VLLM_SECRET_FILE_ENV}: cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"{VLLM_SECRET_FILE_ENV}: {path} can be read by other users (mode {stat.S_IMODE(mode):o}); "
                          f"chmod 600 {path}")
    secret = (text.strip().splitlines() or [""])[0].strip()
    if not secret:
        raise ConfigError(f"{VLLM_SECRET_FILE_ENV}: {path} is empty")
    return secret
