"""The generic `acp` backend against the scripted ACP agent (tests/unit/fake_acp_agent.py):
how a thread names its agent (config.command and config.env, or the operator's
BACKEND_CLI_PATH and BACKEND_CLI_ARGS), and what a client sees when the agent has no command,
is missing, dies at start, cannot load sessions, takes no images, writes lines that are no
message for threadline, or asks permission for a session that does not exist."""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.support.client import assert_items_balanced, notifications
from tests.support.fake_acp import AGENT, Agent, agent
from tests.support.inproc import InProcClient, inproc_server
from threadline.backends import base as b
from threadline.backends.acp.backend import AcpBackend
from threadline.backends.gemini.backend import GeminiBackend
from threadline.rpc.errors import INVALID_PARAMS, INVALID_REQUEST
from threadline.server.app import backend_infos
from threadline.server.config import ConfigError, ServerConfig

# The fixture comes from fake_acp.py (referenced here so it counts as used).
_FIXTURES = (agent,)

COMMAND = [sys.executable, str(AGENT)]
# A 1x1 PNG.
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def server(home: Path, **config: Any) -> Any:
    return inproc_server(
        {"acp": AcpBackend()}, home, config=ServerConfig(default_backend="acp", **config)
    )


async def open_thread(client: InProcClient, agent: Agent, *flags: str, **config: Any) -> str:
    config.setdefault("command", [*COMMAND, *flags])
    return await client.start_thread(modelProvider="acp", cwd=str(agent.work), config=config)


def texts(events: list[dict[str, Any]]) -> str:
    return "".join(e["params"]["delta"] for e in notifications(events, "item/agentMessage/delta"))


def warnings(events: list[dict[str, Any]]) -> list[str]:
    return [e["params"]["message"] for e in notifications(events, "warning")]


async def turn(client: InProcClient, tid: str, text: Any) -> tuple[dict[str, Any], list[Any]]:
    done, events = await client.run_turn(tid, text, timeout=20)
    assert_items_balanced(events)
    return done["params"]["turn"], events


# -- the command ---------------------------------------------------------------------------------


async def test_config_command_and_env_start_the_agent(tmp_path: Path, agent: Agent) -> None:
    async with server(tmp_path / "home") as client:
        tid = await open_thread(client, agent, "--a-flag", env={"FAKE_ACP_NOTE": "from-config"})
        t, events = await turn(client, tid, "say:hello there")
        assert t["status"] == "completed" and texts(events) == "hello there", t
    facts = agent.journal("facts")
    assert ["argv", "--a-flag"] in facts
    # config.env reaches the agent, which runs in the thread's cwd (PWD too)
    assert ["env", "from-config", str(agent.work)] in facts


async def test_the_operators_command_is_the_default(tmp_path: Path, agent: Agent) -> None:
    """AGENT_BACKEND=acp with BACKEND_CLI_PATH and BACKEND_CLI_ARGS: a thread needs no
    config; the arguments are split as a shell would."""
    config = ServerConfig.from_env(
        {
            "AGENT_BACKEND": "acp",
            "BACKEND_CLI_PATH": str(agent.launcher),
            "BACKEND_CLI_ARGS": "--acp 'two words'",
        }
    )
    assert config.cli_args == ("--acp", "two words")
    async with inproc_server({"acp": AcpBackend()}, tmp_path / "home", config=config) as client:
        tid = await client.start_thread(modelProvider="acp", cwd=str(agent.work))
        t, events = await turn(client, tid, "say:default")
        assert t["status"] == "completed" and texts(events) == "default", t
    assert ["argv", "--acp", "two words"] in agent.journal("facts")


def test_options_the_agent_does_not_take_from_threadline_are_named() -> None:
    """BACKEND_CLI_ARGS is the acp backend's; a model goes in the agent's own command."""

    def settings(**kw: Any) -> b.SessionSettings:
        return b.SessionSettings(thread_id="t", cwd="/tmp", mode="acp", **kw)

    assert AcpBackend().unsupported_options(settings(cli_args=["--acp"])) == []
    assert GeminiBackend().unsupported_options(settings(cli_args=["--acp"])) == ["BACKEND_CLI_ARGS"]
    [model] = AcpBackend().unsupported_options(settings(model="some-model"))
    assert model.startswith("model (BACKEND_MODEL)"), model


def test_unsplittable_cli_args_refuse_to_start() -> None:
    with pytest.raises(ConfigError, match="BACKEND_CLI_ARGS"):
        ServerConfig.from_env({"AGENT_BACKEND": "acp", "BACKEND_CLI_ARGS": "--x 'unclosed"})


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ({}, "config.command"),
        ({"command": "gemini --acp"}, "config.command must be a non-empty list of strings"),
        ({"command": []}, "config.command must be a non-empty list of strings"),
        ({"command": ["gemini", 3]}, "config.command must be a non-empty list of strings"),
        ({"command": ["gemini"], "env": {"A": 1}}, "config.env must be an object of strings"),
    ],
)
async def test_a_thread_without_a_usable_command_is_refused(
    tmp_path: Path, config: dict[str, Any], says: str
) -> None:
    async with server(tmp_path / "home") as client:
        error = await client.call_error(
            "thread/start", {"modelProvider": "acp", "cwd": str(tmp_path), "config": config}
        )
    assert error["code"] == INVALID_PARAMS and says in error["message"], error
    if not config:  # what to set, both ways
        assert "BACKEND_CLI_PATH" in error["message"] and "BACKEND_CLI_ARGS" in error["message"]


async def test_a_missing_agent_is_refused_at_thread_start(tmp_path: Path) -> None:
    async with server(tmp_path / "home") as client:
        error = await client.call_error(
            "thread/start",
            {
                "modelProvider": "acp",
                "cwd": str(tmp_path),
                "config": {"command": ["/nonexistent/agent", "--acp"]},
            },
        )
    assert error["code"] == INVALID_REQUEST, error
    assert "not found at /nonexistent/agent" in error["message"], error


async def test_an_agent_that_exits_at_start_fails_the_turn_readably(
    tmp_path: Path, agent: Agent
) -> None:
    async with server(tmp_path / "home") as client:
        tid = await open_thread(client, agent, "--exit-at-start")
        for _ in range(2):  # the thread stays usable; the failure is the same each time
            t, events = await turn(client, tid, "say:never")
            assert t["status"] == "failed", t
            message = t["error"]["message"]
            assert "exited during start-up (exit code 3)" in message, message
            assert "--exit-at-start" in message  # the command, as configured
            assert "no model configured, giving up" in message  # its stderr
            started = [e["params"]["item"]["type"] for e in notifications(events, "item/started")]
            assert started == ["userMessage"]


# -- resume ----------------------------------------------------------------------------------------


async def resume_and_turn(home: Path, tid: str, **resume: Any) -> dict[str, Any]:
    async with server(home) as client:
        await client.call("thread/resume", {"threadId": tid, **resume})
        t, _ = await turn(client, tid, "say:after the restart")
        return t


async def test_config_env_is_never_stored_and_comes_back_with_resume(
    tmp_path: Path, agent: Agent
) -> None:
    home = tmp_path / "home"
    secret = "sk-SECRET-config-env-never-stored"
    async with server(home) as client:
        tid = await open_thread(client, agent, env={"FAKE_ACP_NOTE": secret})
        await turn(client, tid, "say:first")
    stored = [p for p in home.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert stored == []
    # The client passes it again on resume; the agent gets it.
    t = await resume_and_turn(home, tid, config={"env": {"FAKE_ACP_NOTE": "again"}})
    assert t["status"] == "completed", t
    assert ["env", "again", str(agent.work)] in agent.journal("facts")


async def test_resume_loads_the_session_when_the_agent_offers_it(
    tmp_path: Path, agent: Agent
) -> None:
    home = tmp_path / "home"
    async with server(home) as client:
        tid = await open_thread(client, agent)
        await turn(client, tid, "say:first")
    t = await resume_and_turn(home, tid)
    assert t["status"] == "completed", t
    [new] = [e[1] for e in agent.journal() if e[0] == "new"]
    assert ["load", new] in [e[:2] for e in agent.journal()]


async def test_resume_is_refused_when_the_agent_cannot_load_sessions(
    tmp_path: Path, agent: Agent
) -> None:
    home = tmp_path / "home"
    async with server(home) as client:
        tid = await open_thread(client, agent, "--no-load")
        t, _ = await turn(client, tid, "say:first")
        assert t["status"] == "completed", t
    t = await resume_and_turn(home, tid)
    assert t["status"] == "failed", t
    message = t["error"]["message"]
    assert "cannot load a session" in message and "start a new thread" in message, message
    assert "--no-load" in message
    assert not [e for e in agent.journal() if e[0] in ("load", "new")][1:], agent.journal()


# -- images ----------------------------------------------------------------------------------------


async def test_images_go_only_to_an_agent_that_takes_them(tmp_path: Path, agent: Agent) -> None:
    picture = agent.work / "pixel.png"
    picture.write_bytes(PIXEL)
    data_url = "data:image/png;base64," + base64.b64encode(PIXEL).decode()
    inputs = [
        {"type": "text", "text": "say:seen"},
        {"type": "localImage", "path": str(picture)},
        {"type": "image", "url": data_url},
    ]
    async with server(tmp_path / "home") as client:
        takes = await open_thread(client, agent, "--images")
        t, events = await turn(client, takes, inputs)
        assert t["status"] == "completed" and warnings(events) == [], t
        refuses = await open_thread(client, agent)
        t, events = await turn(client, refuses, inputs)
        assert t["status"] == "completed" and texts(events) == "seen", t
        [warning] = warnings(events)
        assert "does not accept images: 2 left out" in warning, warning
    blocks = [e[2] for e in agent.journal("facts") if e[0] == "blocks"]
    assert blocks == ["text,image,image", "text"]


# -- what the agent sends ------------------------------------------------------------------------


async def test_lines_that_are_no_message_are_ignored(tmp_path: Path, agent: Agent) -> None:
    async with server(tmp_path / "home") as client:
        tid = await open_thread(client, agent)
        t, events = await turn(client, tid, "garbage:x")
        assert t["status"] == "completed" and texts(events) == "x ok", t
        t, events = await turn(client, tid, "say:still here")
        assert t["status"] == "completed" and texts(events) == "still here", t
    assert len(agent.pids()) == 1, "the agent was restarted"


@pytest.mark.parametrize(
    ("decision", "status", "says"),
    [("accept", "completed", "done x"), ("decline", "declined", "skipped x")],
)
async def test_an_approval_shows_the_command_the_first_sight_lacked(
    tmp_path: Path, agent: Agent, decision: str, status: str, says: str
) -> None:
    """The agent announced the call with only the tool's name; its permission request has
    the command: that is what the client is asked about, and what the item ends with."""
    async with server(tmp_path / "home") as client:
        tid = await open_thread(client, agent)
        done, events = await client.run_turn(
            tid, "ask:x", on_request=lambda _r: {"decision": decision}, timeout=20
        )
        assert_items_balanced(events)
    assert done["params"]["turn"]["status"] == "completed" and texts(events) == says, done
    [request] = [e for e in events if "id" in e and "method" in e]
    assert request["method"] == "item/commandExecution/requestApproval", request
    assert request["params"]["command"] == "touch x", request
    [item] = [
        e["params"]["item"]
        for e in notifications(events, "item/completed")
        if e["params"]["item"]["type"] == "commandExecution"
    ]
    assert item["command"] == "touch x" and item["status"] == status, item


async def test_a_permission_request_for_an_unknown_session_is_refused(
    tmp_path: Path, agent: Agent
) -> None:
    async with server(tmp_path / "home") as client:
        tid = await open_thread(client, agent)
        t, events = await turn(client, tid, "ask-unknown:p")
        assert t["status"] == "completed" and texts(events) == "asked p", t
        assert not [e for e in events if "id" in e and "method" in e], "a client was asked"
        with trio.fail_after(5):  # (the agent journals threadline's answer when it reads it)
            while ["reply", "perm-p", "error"] not in agent.journal():  # noqa: ASYNC110
                await trio.sleep(0.01)


# -- initialize and doctor -----------------------------------------------------------------------


async def test_without_a_command_it_is_available_and_says_what_to_configure() -> None:
    [info] = await backend_infos({"acp": AcpBackend()})
    assert info.available and info.path is None, info
    assert info.message is not None and "configure a command" in info.message, info
    assert "`gemini --acp`" in info.message and "`opencode acp`" in info.message
    caps = info.capabilities["acp"]
    assert caps.approvals and caps.interrupt and caps.resume and caps.images


async def test_with_the_operators_agent_it_reports_that_binary(agent: Agent) -> None:
    [info] = await backend_infos({"acp": AcpBackend()}, str(agent.launcher), cli_path_for="acp")
    assert info.available and info.path == str(agent.launcher), info
