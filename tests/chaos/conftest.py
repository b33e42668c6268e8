"""The chaos soak runs on the integration stack, with its fixtures."""

from __future__ import annotations

import pytest

from tests.integration.conftest import (  # noqa: F401 (fixtures)
    applied_topics,
    schema,
    sink,
    stack_is_up,
    worker_factory,
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/chaos" in str(item.fspath):
            item.add_marker(pytest.mark.chaos)
