"""Shared test set-up: a headless matplotlib backend, deterministic RNGs."""

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
