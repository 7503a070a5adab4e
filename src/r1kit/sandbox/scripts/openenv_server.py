"""Serves one OpenEnv environment class inside r1kit's jail, on a listening Unix socket the trainer hands over.

    python -I -S -c SOURCE HEADER     (HEADER: {"paths": [...], "target": "package.module:Class", "sessions": N,
                                       "fd": the listening socket's descriptor})

The jail has no network and no host files but the read-only folders in `paths` (the interpreter's packages and the
environment's own package); the socket was bound by the trainer in a folder only its user can open, so only the
trainer connects. What the policy's tool calls make the environment run runs here. Prints nothing on success;
on a failure before serving, one line on stderr.
"""

import importlib
import json
import os
import sys


def main(header: dict) -> None:
    if header.get("memory"):  # the whole jail is capped where cgroups are usable (root); this process, always
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (header["memory"], header["memory"]))
    sys.path[:0] = header["paths"]
    os.environ.update(HOME="/tmp/work", XDG_CACHE_HOME="/tmp/work/.cache", XDG_DATA_HOME="/tmp/work/.local/share",
                      XDG_CONFIG_HOME="/tmp/work/.config")  # the jail's only writable place (packages ask for a home)
    sys.modules.setdefault("gradio", None)  # openenv's optional web UI: not served here (6 s and 200 MB to import)
    module, _, name = header["target"].partition(":")
    environment = getattr(importlib.import_module(module), name)
    from openenv.core.env_server.http_server import create_fastapi_app
    from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation

    app = create_fastapi_app(environment, CallToolAction, CallToolObservation,
                             max_concurrent_envs=header["sessions"])
    import uvicorn

    uvicorn.run(app, fd=header["fd"], log_level="warning", access_log=False)


if __name__ == "__main__":
    try:
        main(json.loads(sys.argv[1]))
    except Exception as e:  # noqa: BLE001 - one line for the trainer, which names it in its refusal
        sys.stderr.write(f"r1kit openenv server: {type(e).__name__}: {' '.join(str(e).split())[:600]}\n")
        sys.exit(3)
