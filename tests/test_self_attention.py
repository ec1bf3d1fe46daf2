"""SelfAttention's own contract (its equality with torch is in test_against_torch)."""

import subprocess
import sys

import pytest
import torch

from src.self_attention import SelfAttention


def test_shapes_and_rows_sum_to_one():
    torch.manual_seed(0)
    out, w = SelfAttention(64, 8)(torch.randn(3, 6, 64))
    assert out.shape == (3, 6, 64) and w.shape == (3, 8, 6, 6)
    torch.testing.assert_close(w.sum(-1), torch.ones(3, 8, 6))


def test_fully_masked_row_is_zero_and_nan_input_is_not_hidden():
    sa = SelfAttention(8, 2)
    mask = torch.ones(4, 4, dtype=torch.bool)
    mask[1] = False
    _, w = sa(torch.randn(1, 4, 8), mask)
    assert (w[0, :, 1] == 0).all() and torch.isfinite(w).all()
    x = torch.randn(1, 4, 8)
    x[0, 2, 0] = float("nan")
    _, w = sa(x)
    assert torch.isnan(w).any()


def test_gradients_flow():
    sa = SelfAttention(16, 4)
    out, _ = sa(torch.randn(2, 5, 16))
    out.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in sa.parameters())


@pytest.mark.parametrize("args, match", [
    ((10, 4), "divisible by n_heads"),
    ((0, 1), "d_model: expected a positive integer"),
    ((8, 2.0), "n_heads: expected a positive integer"),
])
def test_constructor_errors(args, match):
    with pytest.raises(ValueError, match=match):
        SelfAttention(*args)


@pytest.mark.parametrize("x, mask, match", [
    (torch.zeros(6, 8), None, r"expected a tensor of shape \(B, L, d_model=8\), got \(6, 8\)"),
    ([[0.0] * 8], None, "got list"),
    (torch.zeros(1, 6, 8), torch.ones(6, 6), "boolean"),
    (torch.zeros(1, 6, 8), torch.ones(5, 6, dtype=torch.bool), "broadcasts to"),
])
def test_forward_errors(x, mask, match):
    with pytest.raises(ValueError, match=match):
        SelfAttention(8, 2)(x, mask)


def test_cli_saves_labelled_png(tmp_path):
    out = tmp_path / "attention_weights.png"
    res = subprocess.run([sys.executable, "-m", "src.self_attention", "--out", str(out)],
                         capture_output=True, text=True, timeout=120,
                         env={"MPLBACKEND": "Agg", "PATH": ""})
    assert res.returncode == 0, res.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "mat  ->  The / the" in res.stdout  # the text table names the tie
