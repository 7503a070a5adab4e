"""Root only: the stage between a trainer running as root and bwrap. Runs no model-written code.

    python -I -S _launcher.py UID CGROUPS SOURCE=NAME [SOURCE=NAME ...] -- BWRAP_PATH BWRAP_ARGS...

bwrap started by root would map the jail's user to host root, and the kernel exempts root from the process limit
(a fork bomb would be unbounded). So this stage drops to UID, a host uid no account has, before bwrap starts. The
files bwrap must read (its own binary, the interpreter) may sit under a folder only root can enter (/root), so it
first exposes each SOURCE read-only under /tmp/r1kit-expose/NAME, in a mount namespace of its own (the host's
mounts are untouched). Arguments of bwrap that start with `@NAME` are rewritten to that path. CGROUPS is a
comma-separated list of cgroup folders (made and capped by the provider) that this process joins first, so the whole
jail is counted there; "-" for none.

Standard library only: it runs with `python -I -S`.
"""

import ctypes
import os
import sys

CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
EXPOSE = "/tmp/r1kit-expose"
libc = ctypes.CDLL(None, use_errno=True)


def check(result, what):
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def mount(source, target, fstype, flags, data=None):
    check(libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                     data.encode() if data else None), f"mount {source} on {target}")


def main(argv):
    uid = int(argv[0])
    for folder in argv[1].split(",") if argv[1] != "-" else []:
        with open(os.path.join(folder, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    split = argv.index("--")
    sources = [spec.split("=", 1) for spec in argv[2:split]]
    bwrap = argv[split + 1 :]
    check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    mount("none", "/", None, MS_REC | MS_PRIVATE)
    fds = {name: os.open(path, os.O_PATH | os.O_CLOEXEC) for path, name in sources}  # in this namespace, before /tmp is covered
    mount("r1kit-expose", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    os.makedirs(EXPOSE, mode=0o755)
    for name, fd in fds.items():
        target = os.path.join(EXPOSE, name)
        os.makedirs(target, mode=0o755) if os.path.isdir(f"/proc/self/fd/{fd}") else open(target, "w").close()
        mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
        mount("none", target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
        os.close(fd)
    os.chmod(EXPOSE, 0o755)
    bwrap = [os.path.join(EXPOSE, a[1:]) if a.startswith("@") else a for a in bwrap]
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    os.execv(bwrap[0], bwrap)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except Exception as e:  # noqa: BLE001 - report on stderr; the provider turns it into a sandbox error
        sys.stderr.write(f"r1kit launcher: {type(e).__name__}: {e}\n")
        sys.exit(125)
