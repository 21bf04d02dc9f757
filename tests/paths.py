"""Paths the tests share: the repository, the tests folder, the fixtures."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
NBEST_FIXTURES = FIXTURES / "nbest"
