"""Where threadline keeps its state: $THREADLINE_HOME if set and non-empty, else platformdirs'
user data dir. Free of trio and of the store, so the handshake can report it (as
`codexHome`) before the engine is loaded."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["APP_NAME", "ENV_HOME", "default_root"]

APP_NAME = "threadline"
ENV_HOME = "THREADLINE_HOME"


def default_root(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    home = env.get(ENV_HOME, "")
    if home:
        # Absolute, so a later chdir of the server cannot move the store.
        return Path(home).expanduser().absolute()
    import platformdirs  # only here: it costs more than the rest of the handshake

    # appauthor=False: otherwise Windows nests the name twice.
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))
