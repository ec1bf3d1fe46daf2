"""Figures checked by content: labels, image data, annotations."""

import numpy as np
import pytest
import torch

from src.visualizations import (
    attention_table,
    plot_attention,
    plot_heads,
    plot_scaling_effect,
    top_keys,
)

TOKENS = ["The", "cat", "sat", "on", "the", "mat"]


def weights(rng):
    return rng.dirichlet(np.ones(6), size=6)  # (6, 6), rows sum to 1


def labels(ticks):
    return [t.get_text() for t in ticks]


@pytest.mark.parametrize("wrap", [
    lambda w: w, lambda w: w[None], lambda w: torch.from_numpy(w)[None].requires_grad_(),
])
def test_plot_attention_content(rng, wrap):
    w = weights(rng)
    fig = plot_attention(wrap(w), TOKENS)
    ax = fig.axes[0]
    assert labels(ax.get_xticklabels()) == TOKENS
    assert labels(ax.get_yticklabels()) == TOKENS
    np.testing.assert_allclose(ax.images[0].get_array(), w)
    texts = [t.get_text() for t in ax.texts]
    assert texts == [f"{x:.2f}" for x in w.ravel()]
    assert ax.images[0].get_cmap().name == "cividis"
    assert len(fig.axes) == 2 and fig.axes[1].get_ylabel() == "attention weight"
    assert "query" in ax.get_title() and ax.get_ylabel().startswith("query")


def test_annotation_colour_contrasts_with_cell(rng):
    w = np.eye(6) * 0.9 + 0.02
    ax = plot_attention(w, TOKENS).axes[0]
    colours = {t.get_text(): t.get_color() for t in ax.texts}
    assert colours["0.92"] != colours["0.02"]  # light cell vs dark cell


def test_plot_attention_errors():
    with pytest.raises(ValueError, match=r"expected 6 labels.*got 5"):
        plot_attention(np.ones((6, 6)), TOKENS[:5])
    wanted = r"expected shape \[L, S\] or \[1, L, S\], got \[2, 6, 6\]"
    with pytest.raises(ValueError, match=wanted):
        plot_attention(np.ones((2, 6, 6)), TOKENS)
    with pytest.raises(ValueError, match="got None"):
        plot_attention(None, TOKENS)


def test_plot_heads_grid(rng):
    w = np.stack([weights(rng) for _ in range(5)])[None]  # (1, 5, 6, 6)
    fig = plot_heads(w, TOKENS)
    heatmaps = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in heatmaps] == [f"head {h}" for h in range(5)]
    for h, ax in enumerate(heatmaps):
        np.testing.assert_allclose(ax.images[0].get_array(), w[0, h])
    lims = {ax.images[0].get_clim() for ax in heatmaps}
    assert len(lims) == 1  # one shared colour scale


def test_plot_scaling_effect_shows_the_variance_argument():
    fig = plot_scaling_effect(d_k=64)
    left, right = fig.axes[:2]
    legend = [t.get_text() for t in left.get_legend().get_texts()]
    assert "std 0.9" in legend[1] or "std 1.0" in legend[1]
    raw_std = float(legend[0].split("std ")[1].split()[0])
    assert 7.0 < raw_std < 9.0  # sqrt(64) = 8
    unscaled, scaled = right.lines[0].get_ydata(), right.lines[1].get_ydata()
    assert unscaled[-1] > 0.9 and scaled[-1] < 0.6  # saturation vs none
    assert np.all(np.diff(unscaled) > 0)


def test_attention_table_names_top_key_and_ties():
    w = np.full((6, 6), 0.1)
    w[1, 5] = 0.5  # cat -> mat
    w[5, [0, 4]] = 0.3  # mat -> The / the (tie)
    table = attention_table(w, TOKENS)
    lines = table.splitlines()
    assert len(lines) == 7
    assert lines[2].split() == ["cat", "->", "mat", "0.500"]
    assert lines[6].split() == ["mat", "->", "The", "/", "the", "0.300", "each"]
    assert top_keys(w, TOKENS)[1] == ("cat", ["mat"], 0.5)
