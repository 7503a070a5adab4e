"""Who may drive r1kit's vLLM server: an authenticating front in the server's process, and the trainer's side of it.

The weight push needs vLLM's development endpoints (`VLLM_SERVER_DEV_MODE=1`: `/collective_rpc`, `/reset_prefix_cache`,
`/update_weights`, `/sleep`, ...): whoever reaches them can load weights of their choice into the engine, which then
poisons every rollout. vLLM's own `--api-key` guards only its `/v1`, `/v2`, `/inference` and `/cohere` routes, not
these. So `r1kit vllm-serve` binds 127.0.0.1 unless told otherwise, and loads `AuthFront` into the server
(`--middleware r1kit.vllm_front.AuthFront`, vLLM's own hook): with a shared secret set, every request but
`GET /health` must carry `Authorization: Bearer <secret>`, or is refused with 401 before vLLM sees it. Binding any
other address needs the secret.

The secret comes from `R1KIT_VLLM_SECRET`, or the first line of the file `R1KIT_VLLM_SECRET_FILE` names (readable by
its owner only), on both sides; never from a recipe, which is shared (`r1kit.credentials.vllm_secret`). The trainer
sends it on every request of TRL's client (`authenticated_client`).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import ipaddress
import json
import logging

from r1kit.credentials import VLLM_SECRET_ENV, VLLM_SECRET_FILE_ENV, vllm_secret
from r1kit.errors import ConfigError

logger = logging.getLogger(__name__)

OPEN_PATHS = ("/health",)  # what anyone may ask (GET or HEAD): whether the server is up, nothing else
MIDDLEWARE = "r1kit.vllm_front.AuthFront"


# --------------------------------------------------------------------------------------------------------------------
# The server's side
# --------------------------------------------------------------------------------------------------------------------
class AuthFront:
    """ASGI middleware: with a shared secret (`secret`, else the environment's), a request without the right
    `Authorization: Bearer <secret>` header gets 401 (a websocket is closed), whatever its path, but `GET /health`.
    Without a secret every request passes: `r1kit vllm-serve` allows that on a loopback address only."""

    def __init__(self, app, secret: str | None = None):
        self.app = app
        secret = secret if secret is not None else vllm_secret()
        self.digest = hashlib.sha256(secret.encode()).digest() if secret else None

    async def __call__(self, scope, receive, send):
        if self.digest is None or scope["type"] not in ("http", "websocket") or self._open(scope) or \
                self._authenticated(scope):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = json.dumps({"error": f"this server needs its shared secret ({VLLM_SECRET_ENV}) as "
                                    "'Authorization: Bearer <secret>'"}).encode()
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
        await send({"type": "http.response.body", "body": body})

    @staticmethod
    def _open(scope) -> bool:
        path = scope.get("path", "")
        root = scope.get("root_path", "") or ""
        if root and path.startswith(root):
            path = path[len(root):]
        return scope["type"] == "http" and scope.get("method") in ("GET", "HEAD") and path in OPEN_PATHS

    def _authenticated(self, scope) -> bool:
        given = next((value for name, value in scope.get("headers", []) if name.lower() == b"authorization"), b"")
        scheme, _, token = given.decode("latin-1").partition(" ")
        digest = hashlib.sha256(token.strip().encode("latin-1")).digest()
        return scheme.lower() == "bearer" and hmac.compare_digest(digest, self.digest)


def is_loopback(host: str) -> bool:
    """Whether binding `host` keeps the server on this machine (127.0.0.0/8, ::1, localhost, a unix socket)."""
    if host.lower() == "localhost" or host.startswith("unix:"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        return False


def check_binding(host: str, secret: str | None) -> str:
    """Refuses (`ConfigError`) a server reachable from other machines without a shared secret; returns the start-up
    line that says what is bound and whether it is authenticated."""
    local = is_loopback(host)
    if not local and not secret:
        raise ConfigError(f"r1kit vllm-serve --host {host or '(every interface)'} lets other machines drive the engine "
                          f"(load weights, reset caches): set a shared secret first ({VLLM_SECRET_ENV}, or "
                          f"{VLLM_SECRET_FILE_ENV} naming a file only you can read), and the same on the trainer's side")
    where = f"{host} (this machine only)" if local else f"{host or 'every interface'} (reachable from other machines)"
    if secret:
        return f"r1kit vllm-serve: listening on {where}; every endpoint but /health needs the shared secret"
    return (f"r1kit vllm-serve: listening on {where}; unauthenticated: any user of this machine can drive it (set "
            f"{VLLM_SECRET_ENV} or {VLLM_SECRET_FILE_ENV} to require a shared secret)")


# --------------------------------------------------------------------------------------------------------------------
# The trainer's side
# --------------------------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def authenticated_client(args=None):
    """While TRL builds its server client (`VLLMClient`) for training arguments `args` that generate on a vLLM
    server (otherwise nothing): the shared secret, when set, goes on every request of the client's session
    (generation, the weight push, cache resets), from the client's first request on; a server that asks for a
    secret the trainer lacks is one clear error. (TRL opens its session, then checks `/health`, then asks
    `/v1/models`: the secret is set as the health check starts.)"""
    if args is None or not (args.use_vllm and args.vllm_mode == "server"):
        yield
        return
    from trl.generation.vllm_client import VLLMClient  # deferred: trl's vLLM client (imports requests)

    secret = vllm_secret()
    original = VLLMClient.check_server

    def check_then_authenticate(client, *args, **kwargs):
        if secret:
            client.session.headers["Authorization"] = f"Bearer {secret}"
        result = original(client, *args, **kwargs)
        if client.session.get(f"{client.base_url}/v1/models").status_code == 401:
            raise ConfigError(f"the vLLM server at {client.base_url} refused the trainer: "
                              + ("its shared secret differs from this one" if secret else "it needs a shared secret")
                              + f"; set {VLLM_SECRET_ENV} (or {VLLM_SECRET_FILE_ENV}) as on the server")
        return result

    VLLMClient.check_server = check_then_authenticate
    try:
        yield
    finally:
        VLLMClient.check_server = original


def client_line() -> str:
    """How the trainer talks to the server, for its start-up block."""
    return "authenticated with the shared secret" if vllm_secret() else "unauthenticated (no shared secret set)"
