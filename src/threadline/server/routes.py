"""The client methods the engine serves (all but `initialize`), by name."""

from __future__ import annotations

from typing import Any

from .control import ThreadControl
from .management import ThreadAdmin
from .service import ThreadService

__all__ = ["handlers"]


def handlers(service: ThreadService) -> dict[str, Any]:
    admin, control = ThreadAdmin(service), ThreadControl(service)
    return {
        "thread/start": service.thread_start,
        "thread/resume": service.thread_resume,
        "thread/fork": control.fork,
        "thread/list": service.thread_list,
        "thread/read": service.thread_read,
        "thread/archive": service.thread_archive,
        "thread/unarchive": admin.unarchive,
        "thread/delete": admin.delete,
        "thread/name/set": admin.name_set,
        "thread/metadata/update": admin.metadata_update,
        "thread/turns/list": admin.turns_list,
        "thread/items/list": admin.items_list,
        "thread/loaded/list": service.thread_loaded_list,
        "thread/inject_items": control.inject_items,
        "thread/compact/start": control.compact_start,
        "turn/start": service.turn_start,
        "turn/steer": control.turn_steer,
        "turn/interrupt": service.turn_interrupt,
        "turn/cancel": service.turn_interrupt,
        "model/list": service.model_list,
        "mailbox/send": service.mail.send,
        "mailbox/list": service.mail.list_messages,
        "mailbox/read": service.mail.read,
        "mailbox/markRead": service.mail.mark_read,
    }
