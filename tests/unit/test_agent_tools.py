"""The pieces of tools for agents that need no server: MCP server configs (parsed, stored
without secrets, resolved), dynamic tool specs, and where the tool host's socket goes."""

from __future__ import annotations

from pathlib import Path

import pytest

from threadline.agent_tools.calls import flatten
from threadline.agent_tools.host import _MAX_SOCKET_PATH, _SOCKET_NAME, _socket_dir
from threadline.agent_tools.servers import (
    McpConfigError,
    McpHttpServer,
    McpStdioServer,
    parse_servers,
    resolve,
    stored_servers,
)
from threadline.protocol import DynamicToolSpec


def test_both_shapes_are_read_and_merged() -> None:
    config = {
        "mcpServers": [
            {"name": "acp", "command": "a", "args": ["-x"], "env": [{"name": "K", "value": "v"}]},
            {
                "type": "http",
                "name": "web",
                "url": "http://h",
                "headers": [{"name": "H", "value": "1"}],
            },
        ],
        "mcp_servers": {"codex": {"command": "c"}, "off": {"command": "x", "enabled": False}},
    }
    servers, warnings = resolve(parse_servers(config), {})
    assert warnings == []
    assert servers == [
        McpStdioServer(name="acp", command="a", args=["-x"], env={"K": "v"}),
        McpHttpServer(name="web", url="http://h", headers={"H": "1"}),
        McpStdioServer(name="codex", command="c"),
    ]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"mcp_servers": {"threadline": {"command": "x"}}}, "reserved"),
        ({"mcp_servers": {"a b": {"command": "x"}}}, "a name is"),
        ({"mcp_servers": {"s": {"command": "x", "url": "http://h"}}}, "either `command`"),
        ({"mcp_servers": {"s": {"command": "x", "args": "not a list"}}}, "config.mcp_servers.s"),
        ({"mcpServers": {"name": "x"}}, "must be a list"),
        ({"mcpServers": [{"command": "x"}]}, "with a `name`"),
    ],
)
def test_malformed_servers_name_the_problem(config: dict[str, object], message: str) -> None:
    with pytest.raises(McpConfigError, match=message):
        parse_servers(config)


def test_stored_servers_keep_references_not_values() -> None:
    servers = parse_servers(
        {
            "mcp_servers": {
                "s": {"command": "x", "env": {"TOKEN": "secret-1"}, "env_vars": ["HOME"]},
                "h": {
                    "url": "http://h",
                    "http_headers": {"X-Key": "secret-2"},
                    "bearer_token_env_var": "T",
                },
            }
        }
    )
    stored = stored_servers(servers)
    assert "secret" not in repr(stored)
    assert stored["s"] == {"command": "x", "env_vars": ["HOME"], "unstored_env": ["TOKEN"]}
    # resolved again after a restart: the references resolve, the missing values are named
    again, warnings = resolve(parse_servers({"mcp_servers": stored}), {"HOME": "/h", "T": "tok"})
    assert again[0] == McpStdioServer(name="s", command="x", env={"HOME": "/h"})
    assert again[1] == McpHttpServer(
        name="h", url="http://h", headers={"Authorization": "Bearer tok"}
    )
    assert len(warnings) == 2 and "TOKEN" in warnings[0] and "X-Key" in warnings[1]


def test_an_unresolvable_reference_leaves_the_server_out() -> None:
    servers = parse_servers(
        {"mcp_servers": {"s": {"url": "http://h", "env_http_headers": {"X": "NOPE"}}}}
    )
    resolved, warnings = resolve(servers, {})
    assert resolved == [] and "NOPE is not set" in warnings[0] and "'s'" in warnings[0]


def test_dynamic_tools_flatten_namespaces_and_refuse_bad_names() -> None:
    specs = [
        DynamicToolSpec(name="lookup", input_schema={"type": "object", "properties": {}}),
        DynamicToolSpec(name="kb", type="namespace", tools=[DynamicToolSpec(name="search")]),
    ]
    tools = flatten(specs)
    assert [(t.mcp_name, t.tool, t.namespace) for t in tools] == [
        ("lookup", "lookup", None),
        ("kb__search", "search", "kb"),
    ]
    assert tools[1].input_schema == {"type": "object"}
    with pytest.raises(ValueError, match="defined twice"):
        flatten([DynamicToolSpec(name="a"), DynamicToolSpec(name="a")])
    with pytest.raises(ValueError, match="letters"):
        flatten([DynamicToolSpec(name="a.b")])
    with pytest.raises(ValueError, match="type 'object'"):
        flatten([DynamicToolSpec(name="a", input_schema={"type": "array"})])


def test_the_socket_directory_falls_back_when_the_temp_path_is_too_long(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setenv("TMPDIR", str(deep))
    monkeypatch.setattr("tempfile.tempdir", None)
    directory = _socket_dir()
    try:
        assert not directory.startswith(str(deep))
        assert len(str(Path(directory) / _SOCKET_NAME).encode()) <= _MAX_SOCKET_PATH
        assert oct(Path(directory).stat().st_mode & 0o777) == "0o700"
    finally:
        Path(directory).rmdir()
