"""Shared test set-up: a headless matplotlib backend, deterministic RNGs, figures."""

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def pytest_terminal_summary(terminalreporter):
    """Print the figures tests record (``record_property("... figure", text)``)."""
    for report in terminalreporter.stats.get("passed", []) + terminalreporter.stats.get(
            "failed", []):
        for name, value in getattr(report, "user_properties", []):
            if name.endswith("figure") and report.when == "call":
                terminalreporter.write_line(f"{name}: {value}")
