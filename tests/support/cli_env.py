"""One test's threadline, and the real agent CLI it drives offline: the base of
tests/e2e/<cli>_env.py.

`ServerEnv` is what any test that starts threadline servers needs: threadline's state dir
(THREADLINE_HOME) and a work dir under the test's tmp dir, a marker variable every process
started for the test inherits, the orphan scan by that marker, and the timings and stderr a
test can print. `CliEnv` adds one real CLI: found in `TOOLS_BIN` (what `scripts/install-clis`
installs), then on PATH; the developer's own settings of every CLI scrubbed from the
environment; the other CLIs shadowed by instant stubs (`initialize` runs every CLI's
`--version`, seconds of node start-up each); a fake model server. A subclass per CLI holds what
differs: its backend id, its fake, its config files and variables (`setup`, `cli_vars`), the
prefixes of its developer variables (`private`).

`cli_fixtures(Env)` makes a CLI's two fixtures: `<id>_bin` (the CLI; a missing one skips the
test, and fails it under CI: CI must never go green by skipping the real-CLI tests) and
`<id>_env` (an `Env` around a fresh fake; after the test it checks the orphan rule, no
process started for the test may remain, and that the fake saw no handler errors; it prints
the timings a test recorded with `pytest -s`, and threadline's stderr when DUMP_STDERR is set).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import json
import os
import signal
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import pytest
import trio

from tests.fakes._base import FakeServer
from tests.support.client import ServerProcess, descendants, running_server
from tests.support.tools import cli_versions, find_cli
from threadline.backends.registry import SPECS

__all__ = [
    "CliEnv",
    "ServerEnv",
    "child_pids",
    "cli_fixtures",
    "cli_or_skip",
    "cmdline",
    "env_classes",
    "env_fixtures",
    "marked_pids",
    "private_prefixes",
]

#: threadline's own settings from the developer's shell, never passed on to a test's server.
OPERATOR_VARIABLES = ("BACKEND_CLI_PATH", "BACKEND_MODEL", "ALLOWED_TOOLS", "BACKEND_MAX_TURNS")

FakeT = TypeVar("FakeT", bound=FakeServer)


# -- processes -------------------------------------------------------------------------------------


def _environ(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


def _state(pid: int) -> str | None:
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return data[data.rfind(b")") + 2 :].split()[0].decode()


def marked_pids(marker: str) -> list[int]:
    """Live processes whose environment contains `marker` (a NAME=value pair)."""
    needle = b"\0" + marker.encode() + b"\0"
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        pid = int(name)
        if needle in b"\0" + _environ(pid) and _state(pid) not in (None, "Z", "X"):
            found.append(pid)
    return sorted(found)


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [p.decode(errors="replace") for p in raw.split(b"\0") if p]


def child_pids(srv: ServerProcess, match: Callable[[int], bool]) -> list[int]:
    """The processes threadline started itself (its direct children) that `match`."""
    return [
        pid
        for pid, info in sorted(descendants(srv.pid).items())
        if info.ppid == srv.pid and match(pid)
    ]


# -- the CLI ---------------------------------------------------------------------------------------


def cli_or_skip(name: str) -> Path:
    """The CLI `name`; skips the test if it is not installed (fails it under CI)."""
    path = find_cli(name)
    if path is None:
        message = (
            f"the {name} CLI is not installed (run scripts/install-clis, or put {name} on PATH)"
        )
        if os.environ.get("CI"):
            pytest.fail(message + "; CI must run the real-CLI tests", pytrace=False)
        pytest.skip(message)
    return path


def _stub_other_clis(bin_dir: Path, backend: str) -> None:
    """An instant `--version` for the CLI of every backend but `backend`, in `bin_dir`."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in {s.cli for s in SPECS.values() if s.cli and s.id != backend}:
        stub = bin_dir / name
        stub.write_text(f"#!/bin/sh\necho '{name} (stubbed by the {backend} tests)'\n")
        stub.chmod(0o755)


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


# -- environments ----------------------------------------------------------------------------------


@dataclass(kw_only=True)
class ServerEnv:
    """threadline's dirs for one test, the servers it started and the orphan scan."""

    #: the backend the servers run by default (AGENT_BACKEND)
    backend: ClassVar[str]

    tmp: Path
    #: threadline's state directory (THREADLINE_HOME)
    home: Path = field(init=False)
    #: the thread's working directory
    work: Path = field(init=False)
    timings: dict[str, float] = field(default_factory=dict, init=False)
    servers: list[running_server] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.home = _mkdir(self.tmp / "threadline")
        self.work = _mkdir(self.tmp / "work")

    @property
    def marker_var(self) -> str:
        return f"THREADLINE_{self.backend.upper()}_E2E"

    @property
    def marker(self) -> str:
        """NAME=value in the environment of every process started for this test."""
        return f"{self.marker_var}={self.tmp}"

    def env(self, **extra: str) -> dict[str, str]:
        """The server's environment (on top of the test process's own)."""
        return {"AGENT_BACKEND": self.backend, self.marker_var: str(self.tmp), **extra}

    def server(self, nursery: trio.Nursery, **extra: str) -> running_server:
        server = running_server(nursery, self.home, self.env(**extra))
        self.servers.append(server)
        return server

    def leftovers(self) -> list[int]:
        """Live processes started for this test (threadline, the CLI, tool commands)."""
        return marked_pids(self.marker)

    def sleepers(self, seconds: int) -> list[int]:
        """Live `sleep <seconds>` processes of this test (however deep they were started)."""
        return [p for p in self.leftovers() if cmdline(p)[:2] == ["sleep", str(seconds)]]

    async def wait_until(self, pred: Callable[[], bool], what: str, timeout: float = 15) -> None:
        """Poll `pred` (a /proc or file check) until true; fail with `what` after `timeout` s."""
        with trio.move_on_after(timeout):
            while not pred():  # noqa: ASYNC110 - polling /proc or a file
                await trio.sleep(0.02)
            return
        raise AssertionError(f"not within {timeout} s: {what}")

    async def wait_no_leftovers(self, timeout: float = 5) -> list[int]:
        """Wait up to `timeout` s for every process of this test to end; return survivors."""
        with trio.move_on_after(timeout):
            while self.leftovers():  # noqa: ASYNC110 - polling /proc
                await trio.sleep(0.05)
        return self.leftovers()

    async def check_orphans(self, timeout: float = 5) -> None:
        """The orphan rule: every process started for this test is gone once threadline is
        (survivors are killed, and fail the test)."""
        left = await self.wait_no_leftovers(timeout)
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        assert not left, f"processes left behind: {[(p, cmdline(p)[:3]) for p in left]}"

    def report(self) -> None:
        """threadline's stderr (with DUMP_STDERR) and the timings the test recorded."""
        for server in self.servers:
            if server.server is not None and os.environ.get("DUMP_STDERR"):
                print("---- threadline stderr\n" + server.server.stderr_text)
        if self.timings:
            print("timings:", {k: round(v, 2) for k, v in self.timings.items()})

    def thread_record(self, thread_id: str) -> dict[str, Any]:
        """threadline's stored record of a thread (backend session id, bootstrap flag)."""
        data = json.loads((self.home / "threads" / thread_id / "meta.json").read_text())
        assert isinstance(data, dict) and data["id"] == thread_id, data
        return data


@dataclass(kw_only=True)
class CliEnv(ServerEnv, Generic[FakeT]):
    """A real CLI against its fake model server; a subclass per CLI says what differs."""

    #: the fake model server's class (started by the `<id>_env` fixture)
    fake_type: ClassVar[Callable[[], FakeServer]]
    #: prefixes of the developer's variables for this CLI (credentials, config dirs)
    private: ClassVar[tuple[str, ...]]
    #: every CLI's env class, by backend id (filled as the modules are imported)
    registered: ClassVar[dict[str, type[CliEnv[Any]]]] = {}

    cli: Path
    fake: FakeT
    #: the CLI's HOME (its settings, sessions, logs), unless its `cli_vars` put HOME below it
    cli_home: Path = field(init=False)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "backend" in cls.__dict__:
            CliEnv.registered[cls.backend] = cls

    def __post_init__(self) -> None:
        super().__post_init__()
        self.cli_home = _mkdir(self.tmp / "cli-home")
        _stub_other_clis(self.tmp / "stub-bin", self.backend)
        self.setup()

    def setup(self) -> None:
        """Write the CLI's config files (the fake is running)."""

    def cli_vars(self) -> dict[str, str]:
        """The variables that point the CLI at the fake."""
        raise NotImplementedError

    def env(self, **extra: str) -> dict[str, str]:
        # As in CI (scripts/test): the pinned CLI's directory first on PATH, behind the stubs.
        path = [str(self.tmp / "stub-bin"), str(self.cli.parent), os.environ.get("PATH", "")]
        cli = {"LANG": "C.UTF-8", "HOME": str(self.cli_home), **self.cli_vars()}
        return {**cli, **super().env(PATH=os.pathsep.join(path), **extra)}

    async def open_thread(self, srv: ServerProcess, **params: Any) -> str:
        """`initialize`, then thread/start on this backend in the work dir."""
        await srv.initialize()
        return await srv.start_thread(self.work, modelProvider=self.backend, **params)

    def reported(self, init: dict[str, Any]) -> dict[str, Any]:
        """This backend's entry in `initialize.backends[]`, asserted usable: available, at this
        CLI's path, reporting the version installed for the tests."""
        [info] = [b for b in init["backends"] if b["id"] == self.backend]
        assert info["available"] is True and info["path"] == str(self.cli), info
        assert info["version"] == cli_versions()[str(SPECS[self.backend].cli)], info
        return info

    def script(self, *rules: Any, default: Any = None) -> None:
        """Replace the fake model's script (the fake's own `Rule`s and steps)."""
        self.fake.set_script(*rules, default=default)  # type: ignore[attr-defined]


# -- fixtures --------------------------------------------------------------------------------------

E = TypeVar("E", bound=CliEnv[Any])


def cli_fixtures(cls: type[E]) -> tuple[Any, Any]:
    """The `<id>_bin` and `<id>_env` fixtures of the CLI env class `cls`."""
    name, cli = cls.backend, str(SPECS[cls.backend].cli)

    @pytest.fixture(scope="session", name=f"{name}_bin")
    def cli_bin() -> Path:
        return cli_or_skip(cli)

    async def cli_env(**fixtures: Any) -> AsyncIterator[E]:
        monkeypatch: pytest.MonkeyPatch = fixtures["monkeypatch"]
        private = private_prefixes()
        for key in list(os.environ):
            if key.startswith(private) or key in OPERATOR_VARIABLES:
                monkeypatch.delenv(key)
        with cls.fake_type() as fake:
            env = cls(cli=fixtures[f"{name}_bin"], fake=fake, tmp=fixtures["tmp_path"])
            yield env
            await env.check_orphans()
            assert not fake.errors, fake.errors[0]
            env.report()

    # pytest takes a fixture's dependencies from its signature: this one names the CLI's.
    needs = (f"{name}_bin", "tmp_path", "monkeypatch")
    params = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY) for n in needs]
    cli_env.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    return cli_bin, pytest.fixture(name=f"{name}_env")(cli_env)


def env_classes() -> dict[str, type[CliEnv[Any]]]:
    """The env class of every backend with a CLI and a tests/e2e/<id>_env.py, by id."""
    for spec in SPECS.values():
        module = f"tests.e2e.{spec.id}_env"
        if spec.cli and importlib.util.find_spec(module) is not None:
            importlib.import_module(module)
    return {k: v for k, v in CliEnv.registered.items() if k in SPECS}


def env_fixtures() -> dict[str, Any]:
    """Every CLI's `<id>_bin` and `<id>_env` fixtures by name (for a conftest's globals)."""
    found = {}
    for backend in env_classes():
        module = importlib.import_module(f"tests.e2e.{backend}_env")
        for name in (f"{backend}_bin", f"{backend}_env"):
            found[name] = getattr(module, name)
    return found


def private_prefixes() -> tuple[str, ...]:
    """The prefixes of every CLI's developer variables."""
    return tuple(p for cls in env_classes().values() for p in cls.private)
