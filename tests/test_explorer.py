"""The explorer's logic (the browser test moves its slider for real)."""

import math

import numpy as np
import pytest
import torch

from src.attention import scaled_dot_product_attention
from src.data import load_arrays
from src.explorer import RANDOM, AttentionExplorer, explore_state

TOKENS = ["The", "cat", "sat", "on", "the", "mat"]


@pytest.fixture
def qk():
    a = load_arrays()
    x = a["x"][0].astype(np.float64)
    return x @ a["w_q"].T + a["b_q"], x @ a["w_k"].T + a["b_k"]


def test_sqrt_mode_is_the_lessons_attention(qk):
    q, k = qk
    st = explore_state(q @ k.T, 64, "sqrt", query_index=1, tokens=TOKENS)
    _, ref = scaled_dot_product_attention(q, k, k)
    np.testing.assert_allclose(st.weights, ref, rtol=1e-12)
    np.testing.assert_array_equal(st.row, st.weights[1])
    assert st.divisor == 8.0
    assert "cat  ->  sat  0.233" in st.readout


def test_modes_are_temperatures(qk):
    q, k = qk
    raw = q @ k.T
    none = explore_state(raw, 64, "none")
    np.testing.assert_allclose(none.weights, explore_state(raw, 64, "temperature", 1.0).weights)
    np.testing.assert_allclose(explore_state(raw, 64, "temperature", 8.0).weights,
                               explore_state(raw, 64, "sqrt").weights)
    # unscaled scores are sharper; a high temperature flattens towards uniform
    assert none.weights.max() > explore_state(raw, 64, "sqrt").weights.max()
    hot = explore_state(raw, 64, "temperature", 1e6).weights
    np.testing.assert_allclose(hot, 1 / 6, atol=1e-5)


@pytest.mark.parametrize("kwargs, match", [
    (dict(mode="cube"), "mode: expected one of"),
    (dict(mode="temperature", temperature=0.0), "positive"),
    (dict(query_index=6), r"query_index: expected 0\.\.5"),
])
def test_explore_state_errors(qk, kwargs, match):
    q, k = qk
    with pytest.raises(ValueError, match=match):
        explore_state(q @ k.T, 64, **kwargs)


def heatmap_data(explorer):
    return np.asarray(explorer.figure.axes[0].images[0].get_array())


def test_widget_defaults_to_the_reference_and_reacts_to_its_controls():
    ex = AttentionExplorer()
    assert ex.source == "the reference query and key" and ex.tokens == TOKENS
    assert ex.temperature.disabled
    before = heatmap_data(ex)
    ex.scale.value = "temperature"
    assert not ex.temperature.disabled
    np.testing.assert_allclose(heatmap_data(ex), before)  # T starts at sqrt(d_k) = 8
    ex.temperature.value = 1.0
    after = heatmap_data(ex)
    assert not np.allclose(after, before) and after.max() > before.max()
    assert "scores = Q·Kᵀ / 1" in ex.readout.value
    ex.query.value = 3
    bars = ex.figure.axes[1].patches
    assert ex.figure.axes[1].get_title() == "query 'on' attends to"
    assert len(bars) == 6
    marked = list(ex.figure.axes[0].patches)
    assert marked and marked[0].get_y() == pytest.approx(2.5)  # the row of query 3


def test_widget_uses_the_students_tensors_and_falls_back_when_unusable(qk):
    q, k = qk
    mine = AttentionExplorer(torch.tensor(q[None] * 2, requires_grad=True),
                             torch.tensor(k[None]), TOKENS)
    assert mine.source == "your query and key"
    np.testing.assert_allclose(mine.raw, 2 * q @ k.T)
    for bad in (None, torch.full((1, 6, 64), float("nan")), "query", torch.zeros(6)):
        assert AttentionExplorer(bad, k, TOKENS).source == "the reference query and key"


def test_repr_is_short_text_plus_the_widget_view():
    data = AttentionExplorer()._repr_mimebundle_()
    assert data["text/plain"].startswith("AttentionExplorer(the reference query and key, d_k=64)")
    assert "application/vnd.jupyter.widget-view+json" in data
    assert math.isclose(AttentionExplorer().state().divisor, 8.0)


# ------------------------------------------------------------- the trained model's heads
def test_a_causal_mask_gives_later_keys_no_weight(qk):
    q, k = qk
    causal = np.tril(np.ones((6, 6), dtype=bool))
    st = explore_state(q @ k.T, 64, "sqrt", tokens=TOKENS, mask=causal)
    assert np.all(st.weights[~causal] == 0)
    np.testing.assert_allclose(st.weights.sum(axis=-1), 1.0)
    _, ref = scaled_dot_product_attention(q, k, k, mask=causal)
    np.testing.assert_allclose(st.weights, ref, rtol=1e-12)
    assert st.weights[0, 0] == 1.0


@pytest.mark.parametrize("mask, match", [
    (np.ones((6, 6)), r"mask: expected a boolean array of shape \(6, 6\).*got float64"),
    (np.ones((6, 5), dtype=bool), r"got bool of shape \(6, 5\)"),
])
def test_a_bad_mask_is_named(qk, mask, match):
    q, k = qk
    with pytest.raises(ValueError, match=match):
        explore_state(q @ k.T, 64, mask=mask)


def test_the_weights_menu_switches_to_each_trained_head_and_back():
    from src.train import load_model, sentence_weights

    trained = sentence_weights(load_model(), TOKENS).numpy()  # (H, L, L)
    ex = AttentionExplorer()
    assert ex.trained_error is None
    assert [v for _, v in ex.weights.options] == [RANDOM, 0, 1, 2, 3]
    before = heatmap_data(ex)
    for h in range(4):
        ex.weights.value = h
        assert ex.d_k == 16 and ex.tokens == TOKENS
        assert f"trained model, head {h}, causal mask, d_k = 16" in ex.title.value
        # the model's own weights: its scaling is 1/sqrt(d_k), under the causal mask
        np.testing.assert_allclose(heatmap_data(ex), trained[h], atol=1e-5)
        np.testing.assert_allclose(ex.state().weights, trained[h], atol=1e-5)
    assert "scores = Q·Kᵀ / 4" in ex.readout.value
    ex.scale.value = "temperature"
    ex.temperature.value = 32.0  # hot: each row flattens over the keys it may see
    hot = heatmap_data(ex)
    assert np.all(np.triu(hot, 1) == 0) and hot[5].max() < trained[3][5].max()
    ex.scale.value = "sqrt"
    ex.weights.value = RANDOM
    np.testing.assert_allclose(heatmap_data(ex), before)
    assert ex.mask is None and ex.d_k == 64
    assert "the reference query and key, d_k = 64" in ex.title.value
    assert ex._repr_mimebundle_()["text/plain"].startswith(
        "AttentionExplorer(the reference query and key, d_k=64)")


def test_switching_to_a_sentence_of_another_length_resets_the_query_menu(qk):
    q, k = qk
    ex = AttentionExplorer(q[:4], k[:4], TOKENS[:4])
    assert len(ex.query.options) == 4
    ex.query.value = 3
    ex.weights.value = 2
    assert len(ex.query.options) == 6 and ex.query.value == 0
    assert ex.figure.axes[1].get_title() == "query 'The' attends to"
    ex.weights.value = RANDOM
    assert len(ex.query.options) == 4 and heatmap_data(ex).shape == (4, 4)


def test_without_the_trained_weights_the_menu_says_why(monkeypatch):
    import src.train

    def missing(*_args, **_kwargs):
        raise FileNotFoundError("data/trained_heads.npz: expected the trained weights "
                                "there; run `make train` to make them")

    monkeypatch.setattr(src.train, "load_model", missing)
    ex = AttentionExplorer()
    assert [v for _, v in ex.weights.options] == [RANDOM]
    assert "run `make train`" in ex.title.value and ex.trained_error
    assert ex.source == "the reference query and key"
