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
from dataclasses import dataclass

from r1kit.config.toolfields import openenv_target
from r1kit.errors import ConfigError
from r1kit.training.tools import CountedEnvironment, ToolLimits, group_seed

logger = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 4 << 20  # a server's reply larger than this is a transport failure
MAX_TOOLS = 64  # tools taken from a server's list
MAX_PARAMETERS = 32  # parameters taken from a tool's schema (each is rendered into every prompt)
REWARD_BOUND = 1e6  # a step's reward beyond this (either sign) is malformed: TRL's float32 sums would overflow
CONNECT_SECONDS = 10.0  # opening a session at most (a run's preflight); a rollout's own opening: its reply time
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
    served: object = None  # the jailed server r1kit runs for it (`r1kit.sandbox.serving.Served`), if any

    def describe(self) -> str:
        return f"the environment r1kit serves ({self.unix_path})" if self.unix_path else self.url.removesuffix("/ws")

    def healthy(self) -> bool:
        """Whether the server still answers: a fresh session opens and answers `state` (a call that failed while it
        does was the call's own failure, not the infrastructure's)."""
        if self.served is not None and not self.served.alive():
            return False
        try:
            session = Session(self, open_seconds=min(CONNECT_SECONDS, max(1.0, self.reply_seconds)))
        except TransportFailure:
            return False
        try:
            session.request("state")
            return True
        except TransportFailure:
            return False
        finally:
            session.close()


class Session:
    """One WebSocket session of an OpenEnv server (one environment instance on the server)."""

    def __init__(self, endpoint: Endpoint, open_seconds: float = CONNECT_SECONDS):
        try:
            from websockets.sync import client  # deferred: the openenv extra
        except ImportError as e:
            raise ConfigError(f"environment: openenv needs the websockets package ({INSTALL_HINT})") from e
        self.endpoint = endpoint
        # A reply at most MAX_MESSAGE_BYTES, at most 2 unread (frames nobody asked for are not buffered by the
        # dozen), the closing handshake bounded by the reply time
        options = {"open_timeout": open_seconds, "max_size": MAX_MESSAGE_BYTES, "max_queue": 2,
                   "close_timeout": min(2.0, endpoint.reply_seconds)}
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
    """(observation, reward, done) of a reply; a reward that is not a number within +-REWARD_BOUND (null: none
    given, 0) or a `done` that is not a boolean is a malformed reply."""
    observation = data.get("observation")
    if not isinstance(observation, dict):
        raise TransportFailure("a reply without an observation object")
    reward = data.get("reward")
    if reward is None:
        reward = 0.0
    try:
        if isinstance(reward, bool) or not isinstance(reward, (int, float)):
            raise TypeError
        reward = float(reward)  # (an integer of 400 digits: OverflowError)
    except (TypeError, ValueError, OverflowError):
        raise TransportFailure(f"a reward that is not a number: {str(reward)[:40]}") from None
    if not math.isfinite(reward) or abs(reward) > REWARD_BOUND:
        raise TransportFailure(f"a reward out of bounds (|r| <= {REWARD_BOUND:g}): {str(reward)[:40]}")
    done = data.get("done", False)
    if not isinstance(done, bool):
        raise TransportFailure(f"a done flag that is not a boolean: {str(done)[:40]}")
    return observation, reward, done


def result_text(observation: dict, limit: int) -> str:
    """What the policy reads of a tool call's observation: the tool's text, or its error, cut at `limit`."""
    error = observation.get("error")
    result = observation.get("result")
    if error:
        message = error.get("message") if isinstance(error, dict) else error
        text = f"Error: {message}"
    elif isinstance(result, dict):
        content = result.get("content")
        content = content if isinstance(content, list) else []
        parts = [c.get("text") for c in content if isinstance(c, dict) and isinstance(c.get("text"), str)]
        data = result.get("data")
        text = "\n".join(parts) if parts else (data if isinstance(data, str) else json.dumps(data, default=str))
        if result.get("is_error"):
            text = f"Error: {text}"
    else:
        text = result if isinstance(result, str) else json.dumps(result, default=str)
    text = str(text)
    return text if len(text) <= limit else text[:limit] + f"\n... (output cut at {limit} characters)"


def observation_text(observation: dict, limit: int) -> str | None:
    """What `reset` hands TRL to append to the prompt: the observation's text fields (cut at `limit`), or None."""
    parts = [v for k, v in observation.items() if isinstance(v, str) and v.strip() and k not in ("metadata",)]
    text = "\n".join(parts)
    return (text if len(text) <= limit else text[:limit] + f"\n... (cut at {limit} characters)") if parts else None


# --------------------------------------------------------------------------------------------------------------------
# The server's tools as methods
# --------------------------------------------------------------------------------------------------------------------
@dataclass
class ToolSpec:
    name: str
    description: str
    parameters: dict  # parameter name -> (Python type, description)
    required: list


# Names a tool cannot take: TRL's own, and what r1kit's environment holds on each rollout (a tool of that name would
# be shadowed by the value, and TRL would find no function)
RESERVED = {"reset", "get_reward", "self", "calls", "errors", "seconds", "infrastructure_failures", "endpoint", "limits",
            "open_sessions", "served"}


def tool_specs(data: dict) -> list[ToolSpec]:
    """The tools a `list_tools` reply names, each checked (an identifier, not a reserved name, a JSON schema); one
    that cannot be a method is left out with a warning; `ConfigError` when none can."""
    observation = data.get("observation") if isinstance(data.get("observation"), dict) else {}
    tools = observation.get("tools")
    if not isinstance(tools, list) or not tools:
        raise ConfigError("environment: the OpenEnv server lists no tools (is it a tool environment, an MCPEnvironment?)")
    specs = []
    for tool in tools[:MAX_TOOLS]:
        try:
            specs.append(tool_spec(tool))
        except ValueError as e:
            logger.warning("environment: a tool of the server is left out: %s", str(e)[:200])
    if not specs:
        raise ConfigError("environment: none of the OpenEnv server's tools can be a method (names must be identifiers)")
    return specs


def tool_spec(tool) -> ToolSpec:
    """One listed tool as a `ToolSpec`; `ValueError` saying why it cannot be one."""
    import keyword

    def usable(name) -> bool:
        return (isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name)
                and not name.startswith("_") and name not in RESERVED)

    name = tool.get("name") if isinstance(tool, dict) else None
    if not usable(name):
        raise ValueError(f"{str(name)[:60]!r} is not a usable method name")
    schema = tool.get("input_schema") or tool.get("inputSchema") or {}
    properties = schema.get("properties") if isinstance(schema, dict) else None
    parameters = {}
    for key, value in list((properties if isinstance(properties, dict) else {}).items())[:MAX_PARAMETERS]:
        if not (isinstance(key, str) and key.isidentifier() and not keyword.iskeyword(key) and key != "self"):
            raise ValueError(f"{name}: its parameter {str(key)[:60]!r} cannot be a Python parameter")
        value = value if isinstance(value, dict) else {}
        kind = value.get("type")
        kind = next((k for k in kind if isinstance(k, str) and k != "null"), None) if isinstance(kind, list) else kind
        parameters[key] = (JSON_TYPES.get(kind, str) if isinstance(kind, str) else str,
                           " ".join(str(value.get("description") or key).split())[:500])
    required = schema.get("required") if isinstance(schema, dict) else None
    required = [r for r in required if isinstance(r, str) and r in parameters] if isinstance(required, list) else []
    return ToolSpec(name, " ".join(str(tool.get("description") or name).split())[:2000], parameters, required)


def tool_method(spec: ToolSpec):
    """A method `spec.name(self, **arguments)` whose signature, annotations and docstring are the tool's schema (what
    transformers renders into the prompt)."""

    def method(self, **arguments):
        return self._call(spec.name, arguments)

    parameters, annotations = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)], {}
    lines = []
    for name, (kind, description) in spec.parameters.items():
        default = inspect.Parameter.empty if name in spec.required else None
        parameters.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                            annotation=kind if default is inspect.Parameter.empty else kind | None))
        annotations[name] = parameters[-1].annotation
        lines.append(f"    {name}: {description}")
    annotations["return"] = str
    method.__name__ = method.__qualname__ = spec.name
    method.__signature__ = inspect.Signature(parameters, return_annotation=str)
    method.__annotations__ = annotations
    method.__doc__ = (spec.description or spec.name) + ("\n\nArgs:\n" + "\n".join(lines) if lines else "")
    return method


# --------------------------------------------------------------------------------------------------------------------
# The TRL environment
# --------------------------------------------------------------------------------------------------------------------
class OpenEnvEnvironment(CountedEnvironment):
    """One rollout's episode on an OpenEnv server (TRL builds one per rollout and resets it per batch). The tools are
    methods added by `environment_class`; everything else it holds is private (a tool may take any other name)."""

    endpoint: Endpoint
    limits = ToolLimits()
    open_sessions: set  # every instance holding a session (closed at the end of the run)

    def __init__(self):
        self._session: Session | None = None
        self._reset_counters()
        self._total, self._done, self._ended = 0.0, False, None

    def reset(self, **row):
        """Ends the last episode, opens a session and starts an episode seeded from the row. A failure here is the
        infrastructure's (the policy has done nothing yet): the rollout is unjudged."""
        self._close()
        self._reset_counters()
        self._total, self._done, self._ended = 0.0, False, None
        seed = group_seed(row) % 2**31
        try:
            self._session = Session(self.endpoint, open_seconds=min(CONNECT_SECONDS, max(1.0, self.limits.seconds)))
            self.open_sessions.add(self)
            observation, _, self._done = step_outcome(self._session.request("reset", {"seed": seed}))
        except TransportFailure as e:
            self._failed(e)
            return None
        return observation_text(observation, self.limits.max_output)

    def _call(self, name: str, arguments: dict) -> str:
        limits = self.limits
        if self.infrastructure_failures:
            return "Error: the environment is unavailable (infrastructure failure)"
        if self._ended:
            self.errors += 1
            return f"Error: this episode's session ended ({self._ended}); answer without the tool"
        if self._done:
            self.errors += 1
            return "Error: the episode is over; answer without the tool"
        spent = self._budget_spent()
        if spent:
            return spent
        self.calls += 1
        started = time.monotonic()
        try:
            data = self._session.request("step", {"type": "call_tool", "tool_name": name, "arguments": arguments})
            observation, reward, done = step_outcome(data)
            text = result_text(observation, limits.max_output)
        except TransportFailure as e:
            return self._call_failed(name, e)
        finally:
            self.seconds += time.monotonic() - started
        if not math.isfinite(self._total + reward):
            return self._call_failed(name, TransportFailure("the episode's reward overflows"))
        self._total += reward
        self._done = done
        if text.startswith("Error"):
            self.errors += 1
        return text

    def _call_failed(self, name: str, error: TransportFailure) -> str:
        """A call whose reply never came, or came out of protocol. If the server still answers, the call itself
        caused it (a program that never ends, output past every bound, a reward the environment cannot give): the
        call's failure, which the rollout answers for (its session ends, its reward is what it earned before);
        else the infrastructure's, and the rollout is unjudged."""
        self._close()
        if not self.endpoint.healthy():
            self._failed(error)
            return "Error: the environment is unavailable (infrastructure failure)"
        self.errors += 1
        self._ended = f"the call to {name} failed: {str(error)[:160]}"
        return f"Error: {self._ended}"

    def get_reward(self) -> float | None:
        """The episode's reward (the sum of its steps'), None when the infrastructure failed it; ends the session."""
        self._close()
        return None if self.infrastructure_failures else self._total

    def _failed(self, error: Exception) -> None:
        self.infrastructure_failures += 1
        logger.warning("OpenEnv environment (infrastructure; the rollout is unjudged): %s", error)
        self._close()

    def _close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None
        self.open_sessions.discard(self)


def environment_class(endpoint: Endpoint, specs: list[ToolSpec], limits: ToolLimits, name: str) -> type:
    """The TRL environment class for a server: one method per tool, named `name` (its reward's name). Sessions are
    held strongly (`open_sessions`): one an instance still holds is closed at the end, never left to the collector."""
    members = {spec.name: tool_method(spec) for spec in specs}
    members.update(endpoint=endpoint, limits=limits, open_sessions=set(),
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
            environment = connect(Endpoint("ws://localhost/ws", served.socket_path, reply_seconds=limits.seconds,
                                           served=served), sessions, limits, target.rsplit(":", 1)[1])
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
