"""Headless Debian chromium through chromium-driver (selenium), for the console tests.

Never skips: without the browser or its driver a test fails naming the fix
(`make install` installs both as root). Every page's console messages are
collected (goog:loggingPrefs) so a test can fail on any SEVERE one.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.integration.procs import wait_until

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]
# `make test` must leave the checkout as it was: the screenshots go to a temporary
# folder unless KRAFT_SCREENSHOTS names one (`make screenshots` refreshes
# docs/img/, which README links).
IMG_DIR = Path(
    os.environ.get("KRAFT_SCREENSHOTS") or Path(tempfile.gettempdir()) / "kraft-screenshots"
)
LAPTOP = (1280, 800)
PHONE = (390, 844)

# selenium must not look for (or download) a browser of its own
os.environ.setdefault("SE_OFFLINE", "true")


def find_browser() -> tuple[str, str]:
    """(chromium, chromedriver) paths, or the test fails saying how to install them."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        missing = " and ".join(
            n for n, p in (("chromium", browser), ("chromedriver", driver)) if p is None
        )
        pytest.fail(
            f"the browser tests need Debian's chromium and chromium-driver: {missing} not "
            "found on PATH; run `make install` as root (it installs them with apt-get)",
            pytrace=False,
        )
    return browser, driver


class Browser:
    """One headless chromium; `severe()` returns the SEVERE console entries so far."""

    def __init__(self, size: tuple[int, int] = LAPTOP) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        binary, driver = find_browser()
        opts = webdriver.ChromeOptions()
        opts.binary_location = binary
        for arg in (
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            f"--window-size={size[0]},{size[1]}",
        ):
            opts.add_argument(arg)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        # chromium leaves a SingletonSocket folder in TMPDIR after it quits; each
        # browser gets a TMPDIR of its own, removed by quit(), so runs leave nothing
        self._tmp = tempfile.TemporaryDirectory(prefix="kraft-chromium-")
        env = dict(os.environ, TMPDIR=self._tmp.name)
        self.driver = webdriver.Chrome(options=opts, service=Service(driver, env=env))
        self.driver.set_page_load_timeout(20)
        self.driver.set_script_timeout(10)
        self.log: list[dict[str, Any]] = []

    def set_headers(self, headers: dict[str, str]) -> None:
        """Extra headers on every request of the page (a credential, as a browser
        that answered the console's Basic challenge sends)."""
        self.driver.execute_cdp_cmd("Network.enable", {})
        self.driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": headers})

    def console(self) -> list[dict[str, Any]]:
        self.log.extend(self.driver.get_log("browser"))
        return self.log

    def severe(self) -> list[dict[str, Any]]:
        return [e for e in self.console() if e.get("level") == "SEVERE"]

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def text(self, css: str) -> str:
        return str(
            self.js(
                "const e = document.querySelector(arguments[0]); return e ? e.textContent : ''", css
            )
        )

    def screenshot(self, name: str, size: tuple[int, int], full_page: bool = False) -> Path:
        """IMG_DIR/NAME-WxH.png at that viewport width (full_page: the whole height)."""
        self.driver.set_window_size(*size)
        time.sleep(0.3)  # the layout and charts follow the resize event
        height = size[1]
        if full_page:
            height = min(int(self.js("return document.documentElement.scrollHeight")), 8000)
            self.driver.set_window_size(size[0], height)
            time.sleep(0.3)
        IMG_DIR.mkdir(parents=True, exist_ok=True)
        path = IMG_DIR / f"{name}-{size[0]}x{size[1]}.png"
        assert self.driver.save_screenshot(str(path)), f"screenshot {path} failed"
        self.driver.set_window_size(*size)
        return path

    def quit(self) -> None:
        try:
            self.driver.quit()
        finally:
            self._tmp.cleanup()


def wait(fn: Callable[[], T | None], timeout: float, what: str, interval: float = 0.1) -> T:
    """procs.wait_until with the browser tests' argument order and a slower poll."""
    return wait_until(fn, timeout, interval=interval, what=what)
