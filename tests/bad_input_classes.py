"""The bad-input suite by class (issue 51): a pytest plugin that the root conftest loads.

A case of the suite carries ``@pytest.mark.bad_input(CLASS)`` (on its test function, its
parameter, or its module's ``pytestmark``), CLASS one of :data:`CLASSES`: what the case keeps
from coming back. After a run that collected any such case, the terminal summary says how many
cases of each class the collected files hold (each parametrised case counts once, slow ones and
those ``-m``/``-k`` leave out included), e.g.::

    bad-input suite: 1217 cases: silent 485, traceback 699, usage 6, tool 7, interrupted 14,
    full-disk 6

:func:`counts` computes the same table from collected items (``tests/rescorer/cli/
test_reliability.py`` checks that every class has cases).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import pytest

CLASSES = {
    "silent": "silent wrong answer (a wrong result, data loss or a bad input accepted, exit 0)",
    "traceback": "traceback or hang",
    "usage": "click usage block for a data or model error",
    "tool": "raw failure of an external tool (lmplz, build_binary)",
    "interrupted": "what a killed run leaves (temporaries, child processes, half-written sets)",
    "full-disk": "a full file system (one line, the previous output whole)",
}
"""Class name -> what a case of the class guards against."""

MARK = "bad_input"
_ITEMS = pytest.StashKey[list[pytest.Item]]()


def case_class(item: pytest.Item) -> str | None:
    """The class of ``item`` (its closest ``bad_input`` mark), None when it is no such case."""
    mark = item.get_closest_marker(MARK)
    if mark is None:
        return None
    (name,) = mark.args
    if name not in CLASSES:
        raise ValueError(f"{item.nodeid}: bad_input class {name!r} is not one of {list(CLASSES)}")
    return str(name)


def counts(items: Iterable[pytest.Item]) -> Counter[str]:
    """Cases per class among ``items`` (classes without a case are absent)."""
    return Counter(c for c in map(case_class, items) if c is not None)


def collected(config: pytest.Config) -> list[pytest.Item]:
    """Every item this session collected, before ``-m``/``-k`` deselected any."""
    return config.stash.get(_ITEMS, [])


def report(table: Counter[str]) -> str:
    """One line: the total and each class's count, in :data:`CLASSES` order."""
    parts = ", ".join(f"{name} {table.get(name, 0)}" for name in CLASSES)
    return f"bad-input suite: {sum(table.values())} cases: {parts}"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARK}(cls): a case of the bad-input suite, by the class of failure it guards "
        f"against: one of {', '.join(CLASSES)} (tests/bad_input_classes.py)",
    )


@pytest.hookimpl(tryfirst=True)  # before -m/-k deselect: what the suite holds
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    for item in items:
        case_class(item)  # an unknown class fails the collection, named
    config.stash[_ITEMS] = list(items)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    table = counts(collected(terminalreporter.config))
    if table:
        terminalreporter.write_sep("-", report(table))
