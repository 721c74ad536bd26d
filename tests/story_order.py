"""Story modules keep their file order when the suite runs in a random order.

A story module (``pytestmark`` includes ``pytest.mark.story``) is one scenario on
one expensive cluster, told in steps: each step starts from the state the step
before it left (a broker fenced, a topic moved). Starting a cluster per step
would cost minutes of the suite's budget, so the steps share one and run in the
order they are written. Every other test must not depend on order, and
``make test-random`` proves it: pytest-randomly shuffles the modules (story
modules among them) and the tests inside every other module.

pytest-randomly reorders inside its hook wrapper before any plain
implementation runs, and plugins that regroup on top of its order are how it is
meant to be combined (its own comment says so), so this hook only stable-sorts
each story module's items back into definition order, in the places they hold.
Parametrized cases of one step keep their shuffled order among themselves.
"""

from __future__ import annotations

import pytest


def is_story(item: pytest.Item) -> bool:
    return item.get_closest_marker("story") is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    slots: dict[str, list[int]] = {}  # module path -> positions of its story items
    for i, item in enumerate(items):
        if is_story(item):
            slots.setdefault(item.location[0], []).append(i)
    for positions in slots.values():
        ordered = sorted((items[i] for i in positions), key=lambda it: it.location[1])
        for i, item in zip(positions, ordered, strict=True):
            items[i] = item
