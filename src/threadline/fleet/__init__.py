"""A fleet of threadline servers on Ray (the `ray` extra: `pip install '.[ray]'` in a checkout).

    import ray
    from threadline.fleet import Fleet

    ray.init()
    with Fleet(4, home="/srv/threadline", env={"AGENT_BACKEND": "claude"}) as fleet:
        tid = fleet.start_thread({"cwd": "/srv/work"})["thread"]["id"]
        for message in fleet.run_turn(tid, "Fix the failing test"):   # Codex wire dicts
            if "id" in message:                                       # an approval
                fleet.answer(message, {"decision": "accept"})
            ...

Each `ThreadlineActor` owns one `threadline app-server` child over stdio; `Fleet` places
threads on actors and routes every call for a thread to its actor. See docs/scale.md.

Nothing in threadline imports this package: Ray is loaded only by those who use it (and only
by the modules that need it: `ServerHost` runs without Ray).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .actor import ThreadlineActor
    from .fleet import ActorLost, Fleet
    from .host import HostClosed, ServerHost, TurnRefused
    from .turn_events import RequestHandler, TurnEvents
    from .wire import Message

__all__ = [
    "ActorLost",
    "Fleet",
    "HostClosed",
    "Message",
    "RequestHandler",
    "ServerHost",
    "ThreadlineActor",
    "TurnEvents",
    "TurnRefused",
]

#: Where each name lives: imported on first use, so `ServerHost` and the wire helpers work
#: without Ray.
_HOMES = {
    "ActorLost": "fleet",
    "Fleet": "fleet",
    "HostClosed": "host",
    "Message": "wire",
    "RequestHandler": "turn_events",
    "ServerHost": "host",
    "ThreadlineActor": "actor",
    "TurnEvents": "turn_events",
    "TurnRefused": "host",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_HOMES[name]}", __name__), name)
