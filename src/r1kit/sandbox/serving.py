"""A service in the jail: an OpenEnv environment class r1kit serves itself (`environment: openenv:package.module:Class`).

The trainer binds a listening Unix socket in a fresh folder only its own user can open (that is the service's
authentication: nobody else can connect), and starts `scripts/openenv_server.py` in a jail (`r1kit.sandbox.jail`:
no network, no host files, its own PID namespace, as root a memory and process cap) with that socket handed over as a
descriptor and, read-only, the interpreter's packages and the environment's own package. So whatever the policy's
tool calls make the environment run (code included) runs in the jail, and the service is reachable by the trainer
alone. `stop` ends the jail and removes the folder; so does the end of the trainer's process.
"""

from __future__ import annotations

import atexit
import collections
import importlib.util
import json
import logging
import os
import shutil
import socket
import stat
import subprocess
import sysconfig
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from r1kit.errors import ConfigError
from r1kit.sandbox import jail

logger = logging.getLogger(__name__)

SERVER = jail.SCRIPTS / "openenv_server.py"
JAIL_SITE = "/opt/r1kit-site"
JAIL_ENV = "/opt/r1kit-env"
STARTUP_SECONDS = 90.0  # jail start and imports (fastapi, fastmcp, the environment): about 3 s here
JAIL_MEMORY = 4 << 30  # the whole jail where cgroups can cap it (root)
JAIL_PROCESSES = 128  # the server's threads count as processes


@dataclass
class Served:
    """A running jailed environment server."""

    socket_path: str
    process: subprocess.Popen
    folder: str
    cgroups: list = field(default_factory=list)
    stderr: collections.deque = field(default_factory=lambda: collections.deque(maxlen=20))

    def alive(self) -> bool:
        return self.process.poll() is None

    def why(self) -> str:
        return (list(self.stderr) or [f"exit code {self.process.poll()}"])[-1].strip()

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, 15)
                self.process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.process.pid, 9)
                except OSError:
                    pass
                self.process.wait(timeout=10)
        jail.remove_cgroups(self.cgroups)
        shutil.rmtree(self.folder, ignore_errors=True)


def package_folders(target: str) -> dict[str, str]:
    """Host folder (or file) -> where the jail shows it: this interpreter's site-packages, and the environment's own
    top-level package (only that package's folder, or its one module file: not the folder around it)."""
    shown: dict[str, str] = {}
    for i, folder in enumerate(dict.fromkeys(os.path.realpath(sysconfig.get_paths()[k]) for k in ("purelib", "platlib"))):
        if os.path.isdir(folder):
            shown[folder] = f"{JAIL_SITE}/{i}"
    top = target.partition(":")[0].split(".")[0]
    for name in dict.fromkeys((top, "r1kit")):  # (r1kit too: an environment may build on r1kit's example's base)
        source, inside = _package_source(name)
        if source and not any(source == f or source.startswith(f + "/") for f in shown):
            shown[source] = f"{JAIL_ENV}/{inside}"
    return shown


def _package_source(name: str) -> tuple[str | None, str]:
    """(the host folder or file of top-level package `name`, its name in the jail's JAIL_ENV), found without
    importing it; (None, ...) for a built-in or compiled module, which sits in the packages shown already."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as e:
        raise ConfigError(f"environment: cannot find {name!r} ({e})") from e
    if spec is None:
        raise ConfigError(f"environment: no module {name!r} is importable here")
    if spec.submodule_search_locations:
        return os.path.realpath(list(spec.submodule_search_locations)[0]), name
    if spec.origin and spec.origin.endswith(".py"):
        return os.path.realpath(spec.origin), f"{name}.py"
    return None, name


def serve_environment(target: str, sessions: int, memory_bytes: int = JAIL_MEMORY,
                      startup_seconds: float = STARTUP_SECONDS) -> Served:
    """Starts `target` (package.module:Class) in a jail, admitting `sessions` concurrent sessions; returns once it
    answers. `ConfigError` in one line when it cannot start (no jail, the class fails to import or to be served)."""
    if importlib.util.find_spec("openenv") is None:
        raise ConfigError("environment: openenv:package.module:Class serves the class with openenv-core, which is "
                          "not installed: pip install 'r1kit[openenv]'")
    problem = jail.probe()
    if problem:
        raise ConfigError(f"environment: r1kit serves an environment only in its jail, which cannot start here "
                          f"({problem}); {jail.JAIL_INSTALL_HINT}, or serve it yourself and give openenv:http://HOST:PORT")
    shown = package_folders(target)
    sweep_stale_folders()
    folder = tempfile.mkdtemp(prefix=f"r1kit-env-{os.getpid()}-")  # 0700: the socket inside is this user's alone
    path = os.path.join(folder, "env.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(max(64, 2 * sessions))
    listener.set_inheritable(True)
    paths = [p if p.startswith(JAIL_SITE) else JAIL_ENV for p in shown.values()]  # sys.path entries inside
    header = {"paths": list(dict.fromkeys(paths)), "target": target, "sessions": sessions, "fd": listener.fileno(),
              "memory": memory_bytes}
    cgroups = (jail.create_cgroups(f"r1kit-env-{os.getpid()}-{uuid.uuid4().hex[:12]}", memory_bytes, JAIL_PROCESSES + 8)
               if memory_bytes else [])
    fd = jail._seccomp_fd()
    try:
        process = subprocess.Popen(
            jail.jail_command(64 << 20, fd, ["-c", SERVER.read_text(), json.dumps(header)], cgroups, shown),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd="/",
            env={"PATH": "/usr/bin:/bin"}, start_new_session=True,
            pass_fds=[listener.fileno()] + ([fd] if fd is not None else []))
    except OSError as e:
        jail.remove_cgroups(cgroups)
        shutil.rmtree(folder, ignore_errors=True)
        raise ConfigError(f"environment: cannot start the jail for {target} ({e})") from e
    finally:
        if fd is not None:
            os.close(fd)
        listener.close()  # the jail holds it now
    served = Served(path, process, folder, cgroups)
    threading.Thread(target=_drain, args=(process.stderr, served.stderr), daemon=True).start()
    atexit.register(served.stop)
    _wait_until_ready(served, target, sessions, startup_seconds)
    logger.info("environment: serving %s in the jail (%d sessions at once), socket %s", target, sessions, path)
    return served


def sweep_stale_folders() -> int:
    """Removes the socket folders of servers whose trainer is gone (killed: no exit handler ran); returns how many.
    Only real folders (not links) of this user, named after a process that no longer exists."""
    removed = 0
    for path in Path(tempfile.gettempdir()).glob("r1kit-env-*-*"):
        try:
            info = os.lstat(path)
            pid = path.name.split("-")[2]
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or not pid.isdigit():
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
            removed += not path.exists()
        except OSError:  # gone meanwhile, another user's process: left alone
            continue
    return removed


def _drain(stream, tail: collections.deque) -> None:
    """Keeps the last lines the server writes on stderr (for a refusal's one line): read in chunks, whatever it
    writes (a line without end is not buffered whole), and 1 MB of it at most kept in view."""
    read, partial = 0, b""
    while chunk := os.read(stream.fileno(), 65536):
        read += len(chunk)
        if read > 1 << 20:
            continue
        lines = (partial + chunk).split(b"\n")
        partial = lines.pop()[-600:]
        tail.extend(line[:600].decode("utf-8", "replace") for line in lines if line.strip())
    if partial.strip() and read <= 1 << 20:
        tail.append(partial.decode("utf-8", "replace"))


def _wait_until_ready(served: Served, target: str, sessions: int, startup_seconds: float) -> None:
    deadline = time.monotonic() + startup_seconds
    while time.monotonic() < deadline:
        if not served.alive():
            time.sleep(0.2)  # its last line
            served.stop()
            raise ConfigError(f"environment: {target} could not be served for {sessions} concurrent sessions (the "
                              f"rollouts in flight): {served.why()}")
        if health(served.socket_path):
            return
        time.sleep(0.2)
    served.stop()
    raise ConfigError(f"environment: {target} did not answer within {startup_seconds:g} s of starting in the jail")


def health(path: str, timeout: float = 2.0) -> bool:
    """Whether the server on the Unix socket `path` answers GET /health."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(path)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            return s.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False

