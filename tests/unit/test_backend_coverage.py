"""Every backend with a CLI of its own is driven by the tests: an e2e environment
(tests/e2e/<id>_env.py, a `CliEnv`) and a fault-matrix `Harness` (tests/matrix/harness.py)."""

from __future__ import annotations

from tests.matrix.harness import HARNESSES
from tests.support.cli_env import env_classes
from threadline.backends.registry import SPECS

CLI_BACKENDS = {spec.id for spec in SPECS.values() if spec.cli}


def test_every_cli_backend_has_an_e2e_env_and_a_matrix_harness() -> None:
    assert set(env_classes()) == CLI_BACKENDS
    assert set(HARNESSES) >= CLI_BACKENDS, CLI_BACKENDS - set(HARNESSES)
