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

Nothing in threadline imports this package: Ray is loaded only by those who use it.
"""

from __future__ import annotations

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
