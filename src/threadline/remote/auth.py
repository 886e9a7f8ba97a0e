"""WebSocket authentication, as Codex's `--ws-auth`: a capability token (compared by its
SHA-256 in constant time) or an HS256 JWT signed with a shared secret (`exp` required, a
clock-skew leeway, optional issuer and audience). The client sends `Authorization: Bearer
<token>` on the upgrade. Tokens never reach a log."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from pathlib import Path

import jwt

__all__ = ["MIN_SECRET_BYTES", "AuthOptions", "WsAuth", "load_auth"]

MIN_SECRET_BYTES = 32
DEFAULT_SKEW_SECONDS = 30


@dataclass(frozen=True)
class AuthOptions:
    """The command line's `--ws-*` options."""

    mode: str | None = None
    token_file: str | None = None
    token_sha256: str | None = None
    shared_secret_file: str | None = None
    issuer: str | None = None
    audience: str | None = None
    max_clock_skew: int | None = None


@dataclass(frozen=True)
class WsAuth:
    """How upgrades are authenticated; `mode` None lets every upgrade in."""

    mode: str | None = None
    token_digest: bytes = b""
    secret: bytes = b""
    issuer: str | None = None
    audience: str | None = None
    skew: int = DEFAULT_SKEW_SECONDS

    def refusal(self, authorization: str | None) -> str | None:
        """Why an upgrade with this `Authorization` header is refused, or None."""
        if self.mode is None:
            return None
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return "missing websocket bearer token"
        if self.mode == "capability-token":
            digest = hashlib.sha256(token.encode()).digest()
            ok = hmac.compare_digest(digest, self.token_digest)
            return None if ok else "invalid websocket bearer token"
        try:
            jwt.decode(
                token,
                self.secret,
                algorithms=["HS256"],
                leeway=self.skew,
                issuer=self.issuer,
                audience=self.audience,
                options={"require": ["exp"], "verify_aud": self.audience is not None},
            )
        except jwt.PyJWTError as exc:
            return f"invalid websocket bearer token ({type(exc).__name__})"
        return None


def _read(path: str, what: str) -> bytes:
    if not Path(path).is_absolute():
        raise ValueError(f"{what} must be an absolute path: {path}")
    try:
        return Path(path).read_bytes().strip()
    except OSError as exc:
        raise ValueError(f"cannot read {what} {path}: {exc.strerror}") from None


def load_auth(opts: AuthOptions) -> WsAuth:
    """The checker `opts` describe; ValueError naming the option that is wrong."""
    if opts.mode is None:
        given = [opts.token_file, opts.token_sha256, opts.shared_secret_file]
        if any(given):
            raise ValueError("--ws-token-*/--ws-shared-secret-file need --ws-auth")
        return WsAuth()
    skew = DEFAULT_SKEW_SECONDS if opts.max_clock_skew is None else opts.max_clock_skew
    if opts.mode == "capability-token":
        if bool(opts.token_file) == bool(opts.token_sha256):
            raise ValueError(
                "--ws-auth capability-token needs one of --ws-token-file or --ws-token-sha256"
            )
        if opts.token_file:
            token = _read(opts.token_file, "--ws-token-file")
            if not token:
                raise ValueError(f"--ws-token-file {opts.token_file} is empty")
            return WsAuth(opts.mode, token_digest=hashlib.sha256(token).digest())
        try:
            digest = bytes.fromhex(opts.token_sha256 or "")
        except ValueError:
            digest = b""
        if len(digest) != 32:
            raise ValueError("--ws-token-sha256 must be 64 hex digits (a SHA-256 digest)")
        return WsAuth(opts.mode, token_digest=digest)
    if opts.mode == "signed-bearer-token":
        if not opts.shared_secret_file:
            raise ValueError("--ws-auth signed-bearer-token needs --ws-shared-secret-file")
        secret = _read(opts.shared_secret_file, "--ws-shared-secret-file")
        if len(secret) < MIN_SECRET_BYTES:
            raise ValueError(f"--ws-shared-secret-file must hold at least {MIN_SECRET_BYTES} bytes")
        return WsAuth(
            opts.mode, secret=secret, issuer=opts.issuer, audience=opts.audience, skew=skew
        )
    raise ValueError(f"--ws-auth {opts.mode}: expected capability-token or signed-bearer-token")
