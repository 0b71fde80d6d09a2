# Fixtures of the docs tests (tests/docs/): kvtierd with its default flags.
import pytest

from docs_util import DefaultDaemon


@pytest.fixture
def default_daemon():
    daemons = []

    def start(flags=()):
        daemons.append(DefaultDaemon(flags))
        return daemons[-1]

    yield start
    for d in daemons:
        d.close()
