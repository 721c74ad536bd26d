"""A browser test leaves nothing behind in the machine's temporary folder.

chromium keeps a SingletonSocket folder (org.chromium.Chromium.*) in TMPDIR after
it quits; CI machines that run the suite again and again would collect one per run.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from tests.browser.browser import Browser


def chromium_leftovers() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("*org.chromium.Chromium*"))


def test_a_browser_leaves_no_folder_in_tmp() -> None:
    before = chromium_leftovers()
    b = Browser()
    try:
        b.driver.get("about:blank")
        own_tmp = Path(b._tmp.name)
        assert any(own_tmp.iterdir()), "chromium wrote nothing to its own TMPDIR"
    finally:
        b.quit()
    assert not own_tmp.exists()
    assert chromium_leftovers() - before == set()
