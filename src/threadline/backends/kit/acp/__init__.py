"""A shared Agent Client Protocol (ACP) client, used by every backend that drives an ACP agent.

An ACP agent (`gemini --acp`, `opencode acp`, `qwen --acp`, …) is one long-lived process speaking
JSON-RPC 2.0 over stdio that hosts many sessions (`host`). `AcpPool` keeps one agent process per
(command, cwd) and multiplexes threads onto it as sessions; a process lives in the server's
threads nursery (see `Backend.attach`) and is stopped a while after its last session closed.
Without an attached nursery (a backend used on its own) each session gets a private process.

`AcpSession` maps one thread onto one ACP session: `session/prompt` per turn, `session/update`
notifications → normalized events (`mapper`), `session/request_permission` → our approval
router, interrupt → `session/cancel`. `fs/read_text_file` / `fs/write_text_file` requests from
the agent are answered inside the thread's cwd only.
"""

from .backend import AcpAgent, PooledAcpBackend, open_acp_session
from .host import AcpError, AcpHost, error_info_for_code
from .mapper import AcpTurnMapper, McpCall, usage_from_prompt_result
from .pool import AcpPool
from .session import AcpSession

__all__ = [
    "AcpAgent",
    "AcpError",
    "AcpHost",
    "AcpPool",
    "AcpSession",
    "AcpTurnMapper",
    "McpCall",
    "PooledAcpBackend",
    "error_info_for_code",
    "open_acp_session",
    "usage_from_prompt_result",
]
