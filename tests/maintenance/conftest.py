"""The maintenance tests' fixtures."""

from __future__ import annotations

import pytest

from awa_fast.maintenance.leader import Leader
from tests.helpers import run
from tests.maintenance.support import leader, until_up


@pytest.fixture
def up_leader(dsn: str) -> Leader:
    """A leader (its term released again) that has reached the database for the tests'
    staleness (support.STALENESS): made before a test's rows, it finds them as old as
    they are."""
    made = leader(dsn)

    async def up() -> None:
        assert await made.check()
        await until_up(made)
        await made.close()

    run(up())
    return made
