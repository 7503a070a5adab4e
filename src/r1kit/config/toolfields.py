"""The recipe's tool-use keys (`r1kit.training.tools`), a part of `GRPOScriptArguments`. The number of turns is TRL's own
`max_tool_calling_iterations` (a `GRPOConfig` key)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from r1kit.errors import ConfigError

OPENENV = "openenv:"  # environment: openenv:http://HOST:PORT | openenv:package.module:EnvClass


def openenv_target(spec: str) -> tuple[str, str]:
    """("url", its WebSocket URL) for `openenv:http(s)://HOST:PORT` (or ws(s)://), ("serve", "package.module:Class")
    for `openenv:package.module:Class`; a `ConfigError` in one line for anything else."""
    target = spec[len(OPENENV):].strip()
    if re.match(r"^(https?|wss?)://[^\s/?#]+(/[^\s?#]*)?$", target):
        scheme, rest = target.split("://", 1)
        return "url", f"{ {'http': 'ws', 'https': 'wss'}.get(scheme, scheme)}://{rest.rstrip('/')}/ws"
    module, _, name = target.partition(":")
    if re.match(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$", module) and name.isidentifier():
        return "serve", target
    raise ConfigError(f"environment: {spec!r} is neither openenv:http://HOST:PORT (a running OpenEnv server) nor "
                      "openenv:package.module:EnvClass (an environment r1kit serves in its jail)")


@dataclass
class ToolFields:
    """Tools the policy may call during a rollout.

    Args:
        tools (`list[str]`, defaults to `[]`): `python` (a Python interpreter run in r1kit's jail, stateless: each
            call a fresh interpreter) and/or `package.module:function` (your own functions, passed to TRL).
        environment (`str` or `None`, defaults to `None`): `package.module:Class`, an environment class passed to
            TRL's `environment_factory` (its public methods are the tools); each GRPO group's members start from
            the same state (its random generators seeded from the row). `openenv:http://HOST:PORT`: a running
            OpenEnv server, whose tools become the policy's and whose reward joins `reward_funcs` under its name;
            `openenv:package.module:EnvClass`: an OpenEnv environment r1kit serves itself, in its jail
            (`pip install 'r1kit[openenv]'`).
        tool_time_limit (`float`, defaults to `5.0`): seconds of wall time one `python` call may run.
        tool_memory_mb (`int`, defaults to `512`): memory one `python` call may use.
        tool_max_output (`int`, defaults to `4000`): characters of a call's output the model reads (the rest cut).
        tool_calls_per_rollout (`int`, defaults to `8`): `python` calls a rollout may make; later ones are refused
            with an error the model reads, without running.
        tool_seconds_per_rollout (`float`, defaults to `30.0`): seconds of `python` time a rollout may spend.
    """

    tools: list[str] = field(default_factory=list, metadata={"help": "python and/or package.module:function."})
    environment: str | None = field(default=None, metadata={
        "help": "package.module:Class (TRL's environment_factory), openenv:http://HOST:PORT or openenv:package.module:EnvClass."})
    tool_time_limit: float = field(default=5.0, metadata={"help": "Seconds one python call may run."})
    tool_memory_mb: int = field(default=512, metadata={"help": "Memory one python call may use, in MB."})
    tool_max_output: int = field(default=4000, metadata={"help": "Characters of a call's output the model reads."})
    tool_calls_per_rollout: int = field(default=8, metadata={"help": "python calls a rollout may make."})
    tool_seconds_per_rollout: float = field(default=30.0, metadata={"help": "Seconds of python time per rollout."})

    def check_tool_fields(self) -> None:
        if isinstance(self.tools, str):
            self.tools = [name.strip() for name in self.tools.split(",") if name.strip()]
        if not isinstance(self.tools, list) or not all(isinstance(name, str) for name in self.tools):
            raise ConfigError(f"tools must be a list of names (python, package.module:function), got {self.tools!r}")
        for name in self.tools:
            if name != "python" and ":" not in name:
                raise ConfigError(f"tools: {name!r} is neither python nor an import path package.module:function")
        if self.environment is not None and (not isinstance(self.environment, str) or ":" not in self.environment):
            raise ConfigError(f"environment must be an import path package.module:Class (or openenv:...), got "
                              f"{self.environment!r}")
        if self.environment.startswith(OPENENV) if isinstance(self.environment, str) else False:
            openenv_target(self.environment)
        for name, low in (("tool_time_limit", 0), ("tool_memory_mb", 0), ("tool_max_output", 0),
                          ("tool_calls_per_rollout", 0), ("tool_seconds_per_rollout", 0)):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value <= low:
                raise ConfigError(f"{name} must be a positive number, got {value!r}")

    @property
    def uses_tools(self) -> bool:
        return bool(self.tools or self.environment)
