"""OpenEnv environments in one recipe key: `environment: openenv:http://HOST:PORT` for a running server, and
`environment: openenv:package.module:EnvClass` for an environment r1kit serves itself, in its jail.

An OpenEnv server (`openenv-core`) holds one environment per WebSocket session: `reset`, then `step` actions; a
tool environment (`MCPEnvironment`) lists its tools and runs `call_tool` actions, each answered with an observation,
a reward and whether the episode is done. r1kit turns it into a TRL environment class (`environment_factory`):

- each tool the server lists becomes a method of the class, with the tool's name, description and parameters (from
  its JSON schema), so TRL renders them into the prompt and the policy calls them like any tool;
- each rollout holds its own session for its episode: `reset` opens it with a seed taken from the row (a GRPO
  group's rows are one prompt repeated, so the group starts alike), and `get_reward` closes it, so the sessions in
  use are at most the rollouts in flight;
- the episode's reward (the sum of its steps' rewards) joins `reward_funcs` under the environment's name (TRL's
  `get_reward`);
- a transport failure (the server unreachable, a refused session, a reply late, too large or malformed) is the
  infrastructure's: the rollout is marked (`infrastructure_failures`) and every reward of it becomes None, never 0;
- every reply is read as hostile: bounded in size and time, text cut at `tool_max_output` characters, a reward that
  is not a finite number is a malformed reply;
- a server that admits fewer concurrent sessions than the rollouts in flight is refused in one line, before the model
  loads (`check_capacity` opens that many sessions and sees each answer).

An environment r1kit serves (`openenv:package.module:EnvClass`) runs in r1kit's jail (`r1kit.sandbox.serving`): no
network, no host files but the packages it imports, read-only, reached over a Unix socket in a folder only this user
can open. Whatever the policy's calls make it run runs there, never in the trainer's process or unjailed.

The client here speaks OpenEnv's WebSocket protocol itself (`websockets`, no import of `openenv` in the trainer).
"""

from __future__ import annotations

import atexit
import inspect
import json
import logging
import math
import re
import threading
import time
import weakref
from dataclasses import dataclass

from r1kit.config.toolfields import openenv_target
from r1kit.errors import ConfigError
from r1kit.training.tools import CountedEnvironment, ToolLimits, group_seed

logger = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 4 << 20  # a server's reply larger than this is a transport failure
MAX_TOOLS = 64  # tools taken from a server's list
CONNECT_SECONDS = 10.0
INSTALL_HINT = "pip install 'r1kit[openenv]'"
JSON_TYPES = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list, "object": dict}


class TransportFailure(RuntimeError):
    """The environment's server could not be reached or answered out of protocol (the infrastructure's failure)."""


# --------------------------------------------------------------------------------------------------------------------
# One session: OpenEnv's WebSocket protocol, every reply bounded and checked
# --------------------------------------------------------------------------------------------------------------------
@dataclass
class Endpoint:
    """Where sessions connect: a ws:// URL, or a Unix socket (`unix_path`) of a server r1kit serves."""

    url: str
    unix_path: str | None = None
    reply_seconds: float = 30.0  # a reply later than this is a transport failure

    def describe(self) -> str:
        return f"the environment r1kit serves ({self.unix_path})" if self.unix_path else self.url.removesuffix("/ws")


class Session:
    """One WebSocket session of an OpenEnv server (one environment instance on the server)."""

    def __init__(self, endpoint: Endpoint):
        try:
            from websockets.sync import client  # deferred: the openenv extra
        except ImportError as e:
            raise ConfigError(f"environment: openenv needs the websockets package ({INSTALL_HINT})") from e
        self.endpoint = endpoint
        options = {"open_timeout": CONNECT_SECONDS, "max_size": MAX_MESSAGE_BYTES}
        if "proxy" in inspect.signature(client.connect).parameters:  # websockets >= 15 reads proxy variables
            options["proxy"] = None  # ... which would send a loopback server's sessions elsewhere
        try:
            if endpoint.unix_path:
                connection = client.unix_connect(endpoint.unix_path, uri=endpoint.url, **options)
            else:
                connection = client.connect(endpoint.url, **options)
            self.ws = connection.__enter__()  # (entered: the connection is ours to close, as `close` does)
        except Exception as e:  # noqa: BLE001 - refused, unreachable, a bad handshake: the infrastructure's
            raise TransportFailure(f"cannot open a session at {endpoint.describe()}: {type(e).__name__}: {e}") from e

    def request(self, kind: str, data: dict | None = None) -> dict:
        """Sends one message and returns the reply's `data` (an object); anything else is a `TransportFailure`."""
        try:
            self.ws.send(json.dumps({"type": kind, **({"data": data} if data is not None else {})}))
            raw = self.ws.recv(timeout=self.endpoint.reply_seconds)
        except TimeoutError as e:
            raise TransportFailure(f"no reply to {kind} within {self.endpoint.reply_seconds:g} s") from e
        except Exception as e:  # noqa: BLE001 - closed, too large, reset
            raise TransportFailure(f"{kind}: {type(e).__name__}: {e}") from e
        try:
            reply = json.loads(raw)
        except (ValueError, RecursionError) as e:
            raise TransportFailure(f"{kind}: a reply that is not JSON") from e
        if not isinstance(reply, dict):
            raise TransportFailure(f"{kind}: a reply that is not an object")
        if reply.get("type") == "error":
            error = reply.get("data") if isinstance(reply.get("data"), dict) else {}
            raise TransportFailure(f"{kind}: the server says {str(error.get('message', 'error'))[:300]} "
                                   f"({str(error.get('code', 'no code'))[:40]})")
        data = reply.get("data")
        if not isinstance(data, dict):
            raise TransportFailure(f"{kind}: a reply without a data object")
        return data

    def close(self) -> None:
        try:
            self.ws.send(json.dumps({"type": "close"}))
        except Exception:  # noqa: BLE001 - best effort: the socket closes below either way
            pass
        try:
            self.ws.close()
        except Exception:  # noqa: BLE001
            pass


def step_outcome(data: dict) -> tuple[dict, float, bool]:
    """(observation, reward, done) of a reply; a reward that is not a finite number (or null: none given) is a
    malformed reply."""
    observation = data.get("observation")
    if not isinstance(observation, dict):
        raise TransportFailure("a reply without an observation object")
    reward = data.get("reward")
    if reward is None:
        reward = 0.0
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
        raise TransportFailure(f"a reward that is not a finite number: {str(reward)[:40]}")
    return observation, float(reward), bool(data.get("done"))


def result_text(observation: dict, limit: int) -> str:
    """What the policy reads of a tool call's observation: the tool's text, or its error, cut at `limit`."""
    error = observation.get("error")
    result = observation.get("result")
    if error:
        message = error.get("message") if isinstance(error, dict) else error
        text = f"Error: {message}"
    elif isinstance(result, dict):
        parts = [c.get("text") for c in result.get("content") or [] if isinstance(c, dict) and isinstance(c.get("text"), str)]
        data = result.get("data")
        text = "\n".join(parts) if parts else (data if isinstance(data, str) else json.dumps(data, default=str))
        if result.get("is_error"):
            text = f"Error: {text}"
    else:
        text = result if isinstance(result, str) else json.dumps(result, default=str)
    text = str(text)
    return text if len(text) <= limit else text[:limit] + f"\n... (output cut at {limit} characters)"


def observation_text(observation: dict) -> str | None:
    """What `reset` hands TRL to append to the prompt: the observation's text fields, or None."""
    parts = [v for k, v in observation.items() if isinstance(v, str) and v.strip() and k not in ("metadata",)]
    return "\n".join(parts) if parts else None


# --------------------------------------------------------------------------------------------------------------------
# The server's tools as methods
# --------------------------------------------------------------------------------------------------------------------
@dataclass
class ToolSpec:
    name: str
    description: str
    parameters: dict  # JSON schema properties
    required: list


def tool_specs(data: dict) -> list[ToolSpec]:
    """The tools a `list_tools` reply names, checked: identifiers, not r1kit's or TRL's own names, a JSON schema."""
    observation = data.get("observation") if isinstance(data.get("observation"), dict) else {}
    tools = observation.get("tools")
    if not isinstance(tools, list) or not tools:
        raise ConfigError("environment: the OpenEnv server lists no tools (is it a tool environment, an MCPEnvironment?)")
    specs = []
    for tool in tools[:MAX_TOOLS]:
        if not isinstance(tool, dict):
            continue
        name = tool.get("name")
        schema = tool.get("input_schema") or tool.get("inputSchema") or {}
        if (not isinstance(name, str) or not name.isidentifier() or name.startswith("_")
                or name in ("reset", "get_reward") or not isinstance(schema, dict)):
            logger.warning("environment: the server's tool %r is left out (not a usable method name)", str(name)[:60])
            continue
        properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        properties = {k: v if isinstance(v, dict) else {} for k, v in properties.items() if k.isidentifier()}
        required = [r for r in schema.get("required") or [] if r in properties]
        specs.append(ToolSpec(name, str(tool.get("description") or name)[:2000], properties, required))
    if not specs:
        raise ConfigError("environment: none of the OpenEnv server's tools can be a method (names must be identifiers)")
    return specs


def tool_method(spec: ToolSpec):
    """A method `spec.name(self, **arguments)` whose signature, annotations and docstring are the tool's schema (what
    transformers renders into the prompt)."""

    def method(self, **arguments):
        return self._call(spec.name, arguments)

    parameters, annotations = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)], {}
    lines = []
    for name, schema in spec.parameters.items():
        kind = JSON_TYPES.get(schema.get("type"), str)
        default = inspect.Parameter.empty if name in spec.required else None
        parameters.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                            annotation=kind if default is inspect.Parameter.empty else kind | None))
        annotations[name] = parameters[-1].annotation
        lines.append(f"    {name}: {' '.join(str(schema.get('description') or name).split())[:500]}")
    annotations["return"] = str
    method.__name__ = method.__qualname__ = spec.name
    method.__signature__ = inspect.Signature(parameters, return_annotation=str)
    method.__annotations__ = annotations
    description = " ".join(spec.description.split()) or spec.name
    method.__doc__ = description + ("\n\nArgs:\n" + "\n".join(lines) if lines else "")
    return method


# --------------------------------------------------------------------------------------------------------------------
# The TRL environment
# --------------------------------------------------------------------------------------------------------------------
class OpenEnvEnvironment(CountedEnvironment):
    """One rollout's episode on an OpenEnv server (TRL builds one per rollout and resets it per batch). The tools are
    methods added by `environment_class`."""

    endpoint: Endpoint
    limits = ToolLimits()
    open_sessions: weakref.WeakSet  # every instance holding a session (closed at the end of the run)

    def __init__(self):
        self.session: Session | None = None
        self._reset_counters()
        self.total, self.done = 0.0, False

    def reset(self, **row):
        """Ends the last episode, opens a session and starts an episode seeded from the row."""
        self._close()
        self._reset_counters()
        self.total, self.done = 0.0, False
        seed = group_seed(row) % 2**31
        try:
            self.session = Session(self.endpoint)
            self.open_sessions.add(self)
            observation, _, self.done = step_outcome(self.session.request("reset", {"seed": seed}))
        except TransportFailure as e:
            self._failed(e)
            return None
        return observation_text(observation)

    def _call(self, name: str, arguments: dict) -> str:
        limits = self.limits
        if self.infrastructure_failures:
            return "Error: the environment is unavailable (infrastructure failure)"
        if self.done:
            self.errors += 1
            return "Error: the episode is over; answer without the tool"
        if self.calls >= limits.calls or self.seconds >= limits.total_seconds:
            self.errors += 1
            return (f"Error: this rollout's tool budget is spent ({limits.calls} calls, {limits.total_seconds:g} s); "
                    "answer without the tool")
        self.calls += 1
        started = time.monotonic()
        try:
            data = self.session.request("step", {"type": "call_tool", "tool_name": name, "arguments": arguments})
            observation, reward, self.done = step_outcome(data)
        except TransportFailure as e:
            self._failed(e)
            return "Error: the environment is unavailable (infrastructure failure)"
        finally:
            self.seconds += time.monotonic() - started
        self.total += reward
        text = result_text(observation, limits.max_output)
        if text.startswith("Error"):
            self.errors += 1
        return text

    def get_reward(self) -> float | None:
        """The episode's reward (the sum of its steps'), None when the infrastructure failed it; ends the session."""
        self._close()
        return None if self.infrastructure_failures else self.total

    def _failed(self, error: Exception) -> None:
        self.infrastructure_failures += 1
        logger.warning("OpenEnv environment (infrastructure; the rollout is unjudged): %s", error)
        self._close()

    def _close(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None
        self.open_sessions.discard(self)


def environment_class(endpoint: Endpoint, specs: list[ToolSpec], limits: ToolLimits, name: str) -> type:
    """The TRL environment class for a server: one method per tool, named `name` (its reward's name)."""
    members = {spec.name: tool_method(spec) for spec in specs}
    members.update(endpoint=endpoint, limits=limits, open_sessions=weakref.WeakSet(),
                   __doc__=f"The OpenEnv environment at {endpoint.describe()}.")
    return type(name, (OpenEnvEnvironment,), members)


def close_all(environment: type) -> int:
    """Closes every session an environment class still holds; returns how many."""
    open_now = list(getattr(environment, "open_sessions", ()))
    for instance in open_now:
        instance._close()
    return len(open_now)


# --------------------------------------------------------------------------------------------------------------------
# Before the model loads: the server, its tools, its room
# --------------------------------------------------------------------------------------------------------------------
def reward_name(metadata_name: str | None, fallback: str) -> str:
    """The environment reward's name: the server's own name, else the class's, as an identifier."""
    name = re.sub(r"\W+", "_", str(metadata_name or fallback)).strip("_")[:60] or "openenv"
    return name if name[0].isalpha() else f"env_{name}"


def check_capacity(endpoint: Endpoint, sessions: int) -> None:
    """Opens `sessions` sessions at once and asks each for the state: a server that refuses one (OpenEnv closes a
    session past its `max_concurrent_envs` with CAPACITY_REACHED) is refused in one line."""
    opened: list[Session] = []
    try:
        for number in range(1, sessions + 1):
            try:
                session = Session(endpoint)
                opened.append(session)
                session.request("state")
            except TransportFailure as e:
                raise ConfigError(
                    f"environment: {endpoint.describe()} admits {number - 1} concurrent sessions, fewer than the "
                    f"{sessions} rollouts in flight (one session each); start it with max_concurrent_envs >= "
                    f"{sessions} (and SUPPORTS_CONCURRENT_SESSIONS = True), or generate fewer rollouts at once "
                    f"({str(e)[:200]})") from e
    finally:
        for session in opened:
            session.close()


def connect(endpoint: Endpoint, sessions: int, limits: ToolLimits, fallback_name: str) -> type:
    """The environment class for a running server, after checking that it answers, lists tools and admits
    `sessions` sessions at once. `ConfigError` in one line otherwise."""
    try:
        session = Session(endpoint)
    except TransportFailure as e:
        raise ConfigError(f"environment: no OpenEnv server answers at {endpoint.describe()} ({e})") from e
    try:
        specs = tool_specs(session.request("step", {"type": "list_tools"}))
    except TransportFailure as e:
        raise ConfigError(f"environment: {endpoint.describe()} does not list its tools ({e})") from e
    finally:
        session.close()
    check_capacity(endpoint, sessions)
    name = reward_name(server_name(endpoint), fallback_name)
    logger.info("environment: OpenEnv %s at %s, %d sessions at once; tools %s; its reward is %s", name,
                endpoint.describe(), sessions, ", ".join(s.name for s in specs), name)
    return environment_class(endpoint, specs, limits, name)


def server_name(endpoint: Endpoint) -> str | None:
    """The server's own name (GET /metadata), when it says one; never fails."""
    if endpoint.unix_path:
        return None
    import urllib.request

    url = endpoint.url.removesuffix("/ws").replace("ws://", "http://", 1).replace("wss://", "https://", 1)
    try:
        with urllib.request.urlopen(url + "/metadata", timeout=5) as reply:  # noqa: S310 - the recipe's own server
            name = json.loads(reply.read(65536)).get("name")
        return name if isinstance(name, str) else None
    except Exception:  # noqa: BLE001
        return None


_LOCK = threading.Lock()
_CONNECTED: dict[str, type] = {}  # spec -> environment class, made once per process (preflight, then the trainer)


def build(spec: str, limits: ToolLimits, sessions: int) -> type:
    """The TRL environment class for `environment: openenv:...`: connected (and served, for an import path) once
    per process."""
    with _LOCK:
        if spec in _CONNECTED:
            return _CONNECTED[spec]
        kind, target = openenv_target(spec)
        if kind == "url":
            environment = connect(Endpoint(target, reply_seconds=limits.seconds), sessions, limits, "openenv")
        else:
            from r1kit.sandbox.serving import serve_environment  # deferred: starts the jailed server

            served = serve_environment(target, sessions)
            environment = connect(Endpoint("ws://localhost/ws", served.socket_path, reply_seconds=limits.seconds),
                                  sessions, limits, target.rsplit(":", 1)[1])
            environment.served = served
        if not _CONNECTED:
            atexit.register(shut_down)
        _CONNECTED[spec] = environment
        return environment


def shut_down() -> None:
    """Closes every session and stops every server this process started (the end of a run)."""
    with _LOCK:
        for environment in _CONNECTED.values():
            close_all(environment)
            served = getattr(environment, "served", None)
            if served is not None:
                served.stop()
        _CONNECTED.clear()
