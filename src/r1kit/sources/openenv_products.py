"""An example OpenEnv tool environment (needs `pip install 'r1kit[openenv]'`): products to compute with a tool and
submit. `environment: openenv:r1kit.sources.openenv_products:ProductsEnv` has r1kit serve it in its jail;
`python -m r1kit.sources.openenv_products --port 8000` serves it on 127.0.0.1:8000 for `openenv:http://127.0.0.1:8000`.

Each episode draws a product from the seed `reset` gets (r1kit seeds it from the row, so a GRPO group shares one),
says it in the observation (which TRL appends to the prompt), and pays 1.0 when `submit` is given the right value,
0.0 otherwise; the episode ends at the first submission. `multiply` is the tool the policy may lean on.
"""

from __future__ import annotations

import argparse
import random
import sys

sys.modules.setdefault("gradio", None)  # openenv's optional web UI, not used (6 s and 200 MB to import)

from fastmcp import FastMCP  # noqa: E402 - after the line above
from openenv.core.env_server.mcp_environment import MCPEnvironment  # noqa: E402
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation  # noqa: E402
from openenv.core.env_server.types import Observation, State  # noqa: E402


class TaskObservation(Observation):
    """What `reset` shows: the task, in words."""

    task: str = ""


class ToolEnvironment(MCPEnvironment):
    """An MCP tool environment that says a reward and whether the episode is done after every tool call
    (`judge(observation)` sets them): OpenEnv's MCPEnvironment leaves both unset for tool calls."""

    def judge(self, observation: CallToolObservation) -> None:
        raise NotImplementedError

    def _judged(self, observation):
        if isinstance(observation, CallToolObservation):
            self.judge(observation)
        return observation

    def step(self, action, timeout_s=None, **kwargs):
        return self._judged(super().step(action, timeout_s=timeout_s, **kwargs))

    async def step_async(self, action, timeout_s=None, **kwargs):  # (the WebSocket path)
        return self._judged(await super().step_async(action, timeout_s=timeout_s, **kwargs))

    def _step_impl(self, action, timeout_s=None, **kwargs):
        return Observation(done=False, reward=0.0)

    @property
    def state(self):
        return self._state


class ProductsEnv(ToolEnvironment):
    """Compute a product with `multiply`, then `submit` it."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # one environment per session; sessions share nothing

    def __init__(self):
        tools = FastMCP("products")

        @tools.tool
        def multiply(a: int, b: int) -> str:
            """Multiplies two integers and returns the product."""
            self._state.step_count += 1
            return str(a * b)

        @tools.tool
        def submit(answer: int) -> str:
            """Submits the final answer; the episode ends."""
            self._state.step_count += 1
            self._submitted = answer
            return "submitted"

        super().__init__(tools)
        self._state, self._a, self._b, self._submitted = State(), 0, 0, None

    def reset(self, seed=None, episode_id=None, **kwargs):
        rng = random.Random(seed)
        self._a, self._b = rng.randint(100, 999), rng.randint(100, 9999)
        self._state, self._submitted = State(episode_id=episode_id, step_count=0), None
        return TaskObservation(task=f"Compute {self._a}*{self._b}, then submit it.", done=False, reward=None)

    def judge(self, observation: CallToolObservation) -> None:
        observation.done = self._submitted is not None
        observation.reward = float(self._submitted == self._a * self._b)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Serve ProductsEnv on 127.0.0.1 (OpenEnv, WebSocket at /ws).")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--sessions", type=int, default=64, help="concurrent sessions admitted")
    opts = parser.parse_args()
    import uvicorn
    from openenv.core.env_server.http_server import create_fastapi_app

    app = create_fastapi_app(ProductsEnv, CallToolAction, CallToolObservation, max_concurrent_envs=opts.sessions)
    uvicorn.run(app, host="127.0.0.1", port=opts.port, log_level="warning")
