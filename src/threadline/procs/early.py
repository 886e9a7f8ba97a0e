"""A CLI started before the engine is loaded.

A stdio server spends its first ~0.2-0.4 s importing the engine, and a CLI spends as long or
longer starting up (claude ~0.5 s, codex app-server ~0.1 s, gemini --acp over 1 s); done one
after the other, they add up in the first turn of every new server. So each server remembers,
per directory it was started in, the first session process it opened (`Plan`: argv, cwd and
the environment entries that differ from its own; see `_PLAN_ENV_KEYS`), and the next server
started there starts that process at once, from light modules, while it imports the engine.

The first session process the engine opens then takes it over (`take`) when it would be the
very same process: same argv (but for the `free` flags, e.g. claude's `--session-id=`, whose
value the CLI reports back), cwd and environment. Any other first spawn kills it and becomes
the plan. Unclaimed, it is killed after `UNCLAIMED_SECONDS`, and at shutdown (`discard`); it
is in the process ledger from its start, so a SIGKILLed server's next start reaps it.
`THREADLINE_EARLY_START=0` turns this off. Only light modules here: this runs before trio.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    import logging
    import subprocess

    from .ledger import ProcessLedger

# Imported where used (subprocess, uuid, logging, the ledger): `begin` runs before the
# `initialize` answer, and a server with no plan must not pay for them.

__all__ = [
    "ANY",
    "PLAN_FILE",
    "UNCLAIMED_SECONDS",
    "Plan",
    "begin",
    "discard",
    "enabled",
    "ledger",
    "take",
    "waiting",
]


def _log() -> logging.Logger:
    import logging

    return logging.getLogger("threadline.process")


#: The plans, in the state directory: {server cwd: plan}.
PLAN_FILE = "early-start.json"
_MAX_PLANS = 32
#: How long a process started early waits for the engine to take it.
UNCLAIMED_SECONDS = 30.0
#: The environment entries any plan may store besides the spawn's own `Eligible.env_keys`; a
#: spawn whose environment differs from the server's in any other entry (a thread's own
#: variables, credentials) is never a plan, so no secret is written. Every other entry comes
#: from the server's environment when the plan is used.
_PLAN_ENV_KEYS = frozenset({"PWD", "OLDPWD"})
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL", "AUTH")


class Eligible:
    """How a session process may be one started early: the flag prefixes whose values are
    fresh UUIDs (`Plan.free`), and the variables its backend sets that hold no secret."""

    __slots__ = ("env_keys", "free")

    def __init__(self, free: tuple[str, ...] = (), env_keys: tuple[str, ...] = ()) -> None:
        self.free = free
        self.env_keys = env_keys


#: A session process with nothing of its own to declare.
ANY = Eligible()


class Plan:
    """A process to start early: argv, cwd, the environment entries that differ from the
    server's, and the flag prefixes (`--session-id=`) whose values are fresh UUIDs (new ones
    in each early start, any value in a spawn)."""

    __slots__ = ("argv", "cwd", "env_set", "env_unset", "free")

    def __init__(
        self,
        argv: list[str],
        cwd: str,
        env_set: dict[str, str],
        env_unset: list[str],
        free: list[str],
    ) -> None:
        self.argv = argv
        self.cwd = cwd
        self.env_set = env_set
        self.env_unset = env_unset
        self.free = free

    def fresh_argv(self) -> list[str]:
        return [_fresh(a, self.free) for a in self.argv]

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        env = {k: v for k, v in base.items() if k not in self.env_unset}
        env.update(self.env_set)
        return env

    def matches(self, argv: Sequence[str], cwd: str | None, env: Mapping[str, str]) -> bool:
        return (
            len(argv) == len(self.argv)
            and all(_same_arg(a, b, self.free) for a, b in zip(argv, self.argv, strict=True))
            and cwd == self.cwd
            and dict(env) == self.env(os.environ)
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "argv": self.argv,
            "cwd": self.cwd,
            "envSet": self.env_set,
            "envUnset": self.env_unset,
            "free": self.free,
        }

    @classmethod
    def from_json(cls, data: Any) -> Plan | None:
        try:
            plan = cls(
                [str(a) for a in data["argv"]],
                str(data["cwd"]),
                {str(k): str(v) for k, v in data["envSet"].items()},
                [str(k) for k in data["envUnset"]],
                [str(f) for f in data["free"]],
            )
        except (KeyError, TypeError, AttributeError):
            return None
        return plan if plan.argv else None


def _fresh(arg: str, free: Sequence[str]) -> str:
    for prefix in free:
        if arg.startswith(prefix):
            import uuid

            return f"{prefix}{uuid.uuid4()}"
    return arg


def _same_arg(a: str, b: str, free: Sequence[str]) -> bool:
    return a == b or any(a.startswith(f) and b.startswith(f) for f in free)


def enabled(env: Mapping[str, str] | None = None) -> bool:
    value = (env if env is not None else os.environ).get("THREADLINE_EARLY_START", "1")
    return value.strip().lower() not in ("0", "false", "no", "off")


class _Started:
    __slots__ = ("argv", "plan", "popen")

    def __init__(self, plan: Plan, argv: list[str], popen: subprocess.Popen[bytes]) -> None:
        self.plan = plan
        self.argv = argv
        self.popen = popen


class _Early:
    """This server's early process and plan (one per server process)."""

    def __init__(self) -> None:
        self.root: Path | None = None  # set by `begin`: plans are kept for this server
        self.key = ""
        self.ledger: ProcessLedger | None = None
        self.started: _Started | None = None
        self.settled = False  # the engine opened its first session process


_early = _Early()


def _plans_path(root: Path) -> Path:
    return root / PLAN_FILE


def _read_plans(root: Path) -> dict[str, Any]:
    try:
        data = msgspec.json.decode(_plans_path(root).read_bytes())
    except (OSError, msgspec.DecodeError):
        return {}
    plans = data.get("plans") if isinstance(data, dict) else None
    return plans if isinstance(plans, dict) else {}


def _write_plan(root: Path, key: str, plan: Plan | None) -> None:
    plans = _read_plans(root)
    plans.pop(key, None)
    if plan is not None:
        plans[key] = plan.to_json()  # last: the most recent plans are kept
    plans = dict(list(plans.items())[-_MAX_PLANS:])
    path = _plans_path(root)
    tmp = path.with_name(f"{PLAN_FILE}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(msgspec.json.encode({"version": 1, "plans": plans}))
        os.replace(tmp, path)
    except OSError as exc:  # a plan is an optimisation: never an error
        _log().debug("cannot write %s: %s", path, exc)
        with contextlib.suppress(OSError):
            tmp.unlink()


def begin(root: Path, run_dir: Path) -> None:
    """Start this directory's planned process (if any, recorded in a process ledger on
    `run_dir`) and keep plans for this server."""
    if not enabled():
        return
    early = _early
    early.root, early.key = root, os.getcwd()
    plan = Plan.from_json(_read_plans(root).get(early.key))
    if plan is None or not os.path.isdir(plan.cwd):
        return
    import subprocess

    from .ledger import ProcessLedger

    argv = plan.fresh_argv()
    try:
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=plan.cwd,
            env=plan.env(os.environ),
            start_new_session=True,
        )
    except OSError as exc:  # the binary moved: the engine spawns (and says why) as usual
        _log().debug("early start of %s failed: %s", plan.argv[0], exc)
        return
    early.ledger = ProcessLedger(run_dir)
    early.ledger.add_group(popen.pid)
    early.started = _Started(plan, argv, popen)


def ledger() -> ProcessLedger | None:
    """The process ledger `begin` started, if it started a process (the server's own)."""
    return _early.ledger


def take(
    argv: Sequence[str], cwd: str | None, env: Mapping[str, str], eligible: Eligible
) -> tuple[subprocess.Popen[bytes], list[str]] | None:
    """For the engine's session processes: the early process and its argv when it is the
    very process `argv` in `cwd` with `env` would be (the caller then owns it), else None.
    The first call also settles the plan: kept when it was used, else replaced by this
    spawn."""
    early = _early
    started, early.started = early.started, None
    first, early.settled = not early.settled, True
    if started is not None and started.plan.matches(argv, cwd, env):
        if started.popen.poll() is None:
            _log().debug("%s: taking over the process started early", argv[0])
            return started.popen, started.argv
        _end(started)  # it died meanwhile: spawn afresh, and keep the plan
        return None
    if started is not None:
        _log().debug("early process %s is not the one needed: killing it", started.plan.argv[0])
        _end(started)
    if first and early.root is not None and cwd is not None:
        _write_plan(early.root, early.key, _plan_for(argv, cwd, env, eligible))
    return None


def _plan_for(
    argv: Sequence[str], cwd: str, env: Mapping[str, str], eligible: Eligible
) -> Plan | None:
    """The plan of this spawn, or None when it cannot be stored without a secret."""
    base = os.environ
    env_set = {k: v for k, v in env.items() if base.get(k) != v}
    env_unset = sorted(k for k in base if k not in env)
    other = (env_set.keys() | set(env_unset)) - _PLAN_ENV_KEYS - set(eligible.env_keys)
    if other:
        _log().debug("no early start of %s: it needs variables of its own (%s)", argv[0], other)
        return None
    secrets = [
        v for k, v in base.items() if len(v) >= 8 and any(w in k.upper() for w in _SECRET_WORDS)
    ]
    if any(s in arg for arg in argv for s in secrets):
        _log().debug("no early start of %s: a credential is in its arguments", argv[0])
        return None
    return Plan(list(argv), cwd, env_set, env_unset, list(eligible.free))


def _end(started: _Started) -> None:
    """Kill an early process's group (it has done nothing yet: nothing to save) and reap it."""
    popen = started.popen
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(popen.pid, signal.SIGKILL)
    import subprocess

    with contextlib.suppress(subprocess.TimeoutExpired):
        popen.wait(timeout=2.0)
    for stream in (popen.stdin, popen.stdout, popen.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    if _early.ledger is not None and popen.returncode is not None:
        _early.ledger.remove_group(popen.pid)


def waiting() -> bool:
    """An early process waits to be taken."""
    return _early.started is not None


def discard() -> None:
    """Kill the early process if nothing took it (`UNCLAIMED_SECONDS` on, or at shutdown)."""
    started, _early.started = _early.started, None
    if started is not None:
        _log().debug("early process %s was not used: killing it", started.plan.argv[0])
        _end(started)
