"""The wire contract: msgspec Structs only, no behaviour. JSON Schemas are generated from here."""

from .base import *  # noqa: F403
from .common import *  # noqa: F403
from .control import *  # noqa: F403
from .inputs import *  # noqa: F403
from .items import *  # noqa: F403
from .mailbox import *  # noqa: F403
from .management import *  # noqa: F403
from .methods import *  # noqa: F403
from .notifications import *  # noqa: F403
from .server_requests import *  # noqa: F403
