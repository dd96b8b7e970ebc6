"""Fixtures of the Python tests: one peer process and one local engine per provider for the whole
session, fresh imm values per test, and a flag for the array backend (see arrays.py)."""

from __future__ import annotations

import itertools
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # arrays, peer (also for spawned peers)

import arrays  # noqa: E402
import fabric_lib as fl  # noqa: E402
from peer import Peer, engine_options  # noqa: E402

PROVIDERS = ["tcp", "shm", "ipc"]

_imm_values = itertools.count(1000 + os.getpid() % 1000 * 1000)


def pytest_report_header(config):
    return f"fabric_lib {fl.__version__} from {os.path.dirname(fl.__file__)}; arrays: {arrays.BACKEND}"


@pytest.fixture(scope="session", params=PROVIDERS)
def provider(request) -> str:
    return request.param


@pytest.fixture(scope="session")
def peer(provider):
    p = Peer(provider)
    yield p
    p.close()


@pytest.fixture(scope="session")
def engine(provider):
    """The test process's engine on `provider` (shared; tests must not stop it)."""
    e = fl.TransferEngine(**engine_options(provider))
    yield e
    e.stop()


@pytest.fixture()
def fresh_engine():
    """A private tcp engine a test may stop."""
    e = fl.TransferEngine(**engine_options("tcp"))
    yield e
    e.stop()


@pytest.fixture()
def imm() -> int:
    """An imm value no other test uses."""
    return next(_imm_values)


@pytest.fixture()
def imms():
    """A source of imm values no other test uses."""
    return lambda: next(_imm_values)
