"""A pytest plugin: a test may skip only for a reason on the allow-list.

A skip for any other reason (a missing tool, a missing package) fails the run after
its summary, naming each such test: a green suite must mean that every test ran.
"""

from __future__ import annotations

import pytest

# reason -> why skipping there is by design
ALLOWED_SKIP_REASONS = {
    "checks the CLI job's own outputs": "test_golden's CLI-only checks in its [source] mode",
    "replaying one seed": "SIM_SEED=N replays one simulator seed and skips the seed sweeps",
}


def skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        text = str(longrepr[2])
        return text.removeprefix("Skipped: ")
    return str(longrepr)


class SkipGuard:
    def __init__(self) -> None:
        self.unexpected: list[tuple[str, str]] = []

    def _note(self, report: pytest.TestReport | pytest.CollectReport) -> None:
        if report.skipped and not hasattr(report, "wasxfail"):
            reason = skip_reason(report)
            if reason not in ALLOWED_SKIP_REASONS:
                self.unexpected.append((report.nodeid, reason))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._note(report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self._note(report)  # a module-level skip leaves out a whole file

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.unexpected and session.exitstatus in (
            pytest.ExitCode.OK,
            pytest.ExitCode.NO_TESTS_COLLECTED,
        ):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:  # noqa: ANN001 - pytest's type is private
        if not self.unexpected:
            return
        terminalreporter.section("skipped without an allowed reason (the run fails)", red=True)
        for nodeid, reason in self.unexpected:
            terminalreporter.line(f"{nodeid}: {reason}")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(SkipGuard(), "kraft-skip-guard")
