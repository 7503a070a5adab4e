"""OpenEnv environments the OpenEnv tests serve (in r1kit's jail, or on loopback): hostile ones and one that cannot
hold several sessions. Importing this needs openenv-core."""

from __future__ import annotations

import os
import socket
import sys
import time

sys.modules.setdefault("gradio", None)

from fastmcp import FastMCP  # noqa: E402
from openenv.core.env_server.types import Observation, State  # noqa: E402

from r1kit.sources.openenv_products import ToolEnvironment  # noqa: E402


class _ToolEnv(ToolEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True
    reward = 0.0

    def reset(self, seed=None, episode_id=None, **kwargs):
        self._state = State(episode_id=episode_id, step_count=0)
        return Observation(done=False, reward=None)

    def judge(self, observation) -> None:
        observation.reward = self.reward


class HostileEnv(_ToolEnv):
    """Tools that misbehave as a server can: hang, flood, raise, pay a reward that is not a number; and one that
    reports what the process serving it can reach."""

    def __init__(self):
        tools = FastMCP("hostile")

        @tools.tool
        def hang(seconds: float) -> str:
            """Sleeps."""
            time.sleep(seconds)
            return "woke"

        @tools.tool
        def flood(megabytes: int) -> str:
            """Returns a lot of text."""
            return "x" * (megabytes << 20)

        @tools.tool
        def crash(message: str) -> str:
            """Raises."""
            raise RuntimeError(message)

        @tools.tool
        def pay(amount: str) -> str:
            """Sets the reward to float(amount)."""
            self.reward = float(amount)
            return "paid"

        @tools.tool
        def reach(path: str) -> str:
            """What this process can reach: its uid, host name, a host file, the network."""
            try:
                with open(path) as f:
                    seen = f"read {len(f.read())} characters"
            except OSError as e:
                seen = f"no file: {type(e).__name__}"
            try:
                socket.create_connection(("127.0.0.1", 22), timeout=1).close()
                network = "connected"
            except OSError as e:
                network = f"no network: {type(e).__name__}"
            return f"uid={os.getuid()} host={socket.gethostname()} {seen}; {network}"

        super().__init__(tools)
        self._state = State()


class OneSessionEnv(_ToolEnv):
    """An environment that does not say it can hold several sessions (OpenEnv's default)."""

    SUPPORTS_CONCURRENT_SESSIONS = False

    def __init__(self):
        tools = FastMCP("one")

        @tools.tool
        def ping() -> str:
            """Answers pong."""
            return "pong"

        super().__init__(tools)
        self._state = State()
