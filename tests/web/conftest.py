"""The console most API tests share: one per test module, without a token, and a client of it.
A module that needs another console (a token, an owner) defines its own ``served`` and
``api``."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.web_helpers import Served, served_console


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Served]:
    """A console of the module's own, on its own data folder, Redis and MQTT."""
    with served_console(
        tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
    ) as served:
        yield served


@pytest.fixture
def api(served: Served) -> Iterator[httpx.Client]:
    """A client of ``served``."""
    with httpx.Client(base_url=served.base, timeout=20) as client:
        yield client
