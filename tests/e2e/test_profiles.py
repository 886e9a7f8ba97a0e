"""Provider profiles with the real `claude` CLI: two threads on one backend, each with a profile
of its own, reach two different model servers with different keys; the keys (references to
the operator's environment and a file) never reach threadline's state, logs or messages; the
profile is applied again on resume; a reference that does not resolve fails `thread/start`
saying which."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from tests.e2e.claude_env import ClaudeEnv
from tests.fakes._base import secret_digest
from tests.fakes.anthropic import FakeAnthropic, Rule
from tests.support.events import agent_text, status, turn

pytestmark = pytest.mark.e2e

GATEWAY_KEY = "sk-gateway-SECRET-5555-never-log-me"
FILE_KEY = "sk-file-SECRET-6666-never-log-me"


def write_profiles(env: ClaudeEnv, gateway: FakeAnthropic) -> dict[str, str]:
    """The operator's profiles file and environment (THREADLINE_PROFILES and the key)."""
    key_file = env.tmp / "secrets" / "direct-key"
    key_file.parent.mkdir()
    key_file.write_text(FILE_KEY + "\n")
    path = env.tmp / "profiles.toml"
    path.write_text(
        f"""
[profiles.gateway]
backend = "claude"
model = "claude-gateway-model"
[profiles.gateway.env]
ANTHROPIC_BASE_URL = "{gateway.url}"
ANTHROPIC_API_KEY = {{ env = "GATEWAY_KEY" }}

[profiles.direct]
backend = "claude"
[profiles.direct.env]
ANTHROPIC_BASE_URL = "{env.fake.url}"
ANTHROPIC_API_KEY = {{ file = "{key_file}" }}

[profiles.broken]
backend = "claude"
[profiles.broken.env]
ANTHROPIC_API_KEY = {{ env = "MISSING_PROFILE_KEY" }}
"""
    )
    return {"THREADLINE_PROFILES": str(path), "GATEWAY_KEY": GATEWAY_KEY}


def leaked(*blobs: bytes | str) -> bool:
    for blob in blobs:
        text = blob.decode(errors="replace") if isinstance(blob, bytes) else blob
        if GATEWAY_KEY in text or FILE_KEY in text:
            return True
    return False


async def test_two_threads_two_providers(
    nursery: trio.Nursery, claude_env: ClaudeEnv, tmp_path: Path
) -> None:
    env = claude_env
    env.script(Rule("hello", ["Hello from the direct provider."]))
    rules = [Rule("hello", ["Hello from the gateway."]), Rule("again", ["Gateway again."])]
    with FakeAnthropic(*rules) as gateway:
        extra = write_profiles(env, gateway)
        log_file = tmp_path / "threadline.log"
        logging = {"THREADLINE_LOG_LEVEL": "DEBUG", "THREADLINE_LOG_FILE": str(log_file)}
        async with env.server(nursery, **extra, **logging) as srv:
            init = await srv.initialize()
            [claude] = [b for b in init["backends"] if b["id"] == "claude"]
            listed = {p["name"]: p for p in claude["profiles"]}
            assert (
                listed["gateway"]["usable"] and listed["gateway"]["model"] == "claude-gateway-model"
            )
            assert listed["gateway"]["env"] == ["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"]
            assert not listed["broken"]["usable"]
            assert "MISSING_PROFILE_KEY" in listed["broken"]["problems"][0]

            via_gateway = await srv.start_thread(
                env.work, modelProvider="claude", config={"profile": "gateway"}
            )
            direct = await srv.start_thread(
                env.work, modelProvider="claude", config={"profile": "direct"}
            )
            t1, events1 = await turn(srv, via_gateway, "hello")
            t2, events2 = await turn(srv, direct, "hello")
            assert agent_text(events1) == "Hello from the gateway."
            assert agent_text(events2) == "Hello from the direct provider."
            assert status(t1) == status(t2) == "completed"

            # a reference that does not resolve: thread/start says which, and nothing else
            err = await srv.error(
                "thread/start",
                {"modelProvider": "claude", "cwd": str(env.work), "config": {"profile": "broken"}},
            )
            assert "broken" in err["message"] and "MISSING_PROFILE_KEY" in err["message"], err
            err = await srv.error(
                "thread/start",
                {"modelProvider": "claude", "cwd": str(env.work), "config": {"profile": "nope"}},
            )
            assert err["code"] == -32602 and "gateway" in err["message"], err

        # each provider saw its own key, and only its own; the profile's model went along
        assert gateway.secrets_seen == {secret_digest(GATEWAY_KEY)}
        assert env.fake.secrets_seen == {secret_digest(FILE_KEY)}
        assert {r.body["model"] for r in gateway.model_requests} == {"claude-gateway-model"}

        # the profile is applied again on resume (its name is what the thread keeps)
        async with env.server(nursery, **extra) as srv:
            await srv.initialize()
            await srv.call("thread/resume", {"threadId": via_gateway})
            _, events3 = await turn(srv, via_gateway, "again")
            assert agent_text(events3) == "Gateway again."
        assert len(gateway.model_requests) == 2
        assert gateway.secrets_seen == {secret_digest(GATEWAY_KEY)}

    record: dict[str, Any] = env.thread_record(via_gateway)
    assert record["settings"]["config"]["profile"] == "gateway"
    assert not leaked(b"\n".join(srv.raw_lines), srv.stderr_text, log_file.read_bytes())
    for path in (p for p in env.home.rglob("*") if p.is_file()):
        assert not leaked(path.read_bytes()), f"a key leaked into {path}"


async def test_thread_env_within_the_operators_allow_list(
    nursery: trio.Nursery, claude_env: ClaudeEnv
) -> None:
    env = claude_env
    env.script(Rule("print it", ["Done."]))
    async with env.server(nursery, THREADLINE_THREAD_ENV="TL_NOTE,TL_FLAGS_*") as srv:
        await srv.initialize()
        params = {"modelProvider": "claude", "cwd": str(env.work)}
        for bad, why in (
            ({"OTHER_VAR": "x"}, "THREADLINE_THREAD_ENV"),
            ({"TL_FLAGS_API_KEY": "x"}, "secret"),
        ):
            err = await srv.error("thread/start", {**params, "config": {"env": bad}})
            assert err["code"] == -32602 and why in err["message"], err
        tid = await srv.start_thread(
            env.work, modelProvider="claude", config={"env": {"TL_NOTE": "hello-note"}}
        )
        t1, _ = await turn(srv, tid, "print it")
        assert status(t1) == "completed"
        # the CLI runs with it
        from tests.e2e.claude_env import claude_pid

        pid = claude_pid(srv)
        assert pid is not None
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert b"TL_NOTE=hello-note" in environ
