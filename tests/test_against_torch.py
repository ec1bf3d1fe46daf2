"""The library against references nobody here wrote, on the same inputs.

Tolerances: float32 rtol 1e-5 / atol 1e-6 (atol 1e-5 where a 64x64 projection
adds rounding), float64 rtol 1e-10 / atol 1e-12.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from src import attention as A
from src.data import load_arrays, load_example
from src.self_attention import SelfAttention

TOL = {np.float32: dict(rtol=1e-5, atol=1e-6), np.float64: dict(rtol=1e-10, atol=1e-12)}
TORCH = {np.float32: torch.float32, np.float64: torch.float64}


def close(actual, expected, **tol):
    torch.testing.assert_close(torch.as_tensor(np.asarray(actual)), expected, **tol)


def torch_weights(q, k, mask=None):
    """softmax(q k^T / sqrt(d_k)) with torch ops, fully masked rows -> 0."""
    s = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = torch.softmax(s, -1)
    return w if mask is None else w.masked_fill(~mask.any(-1, keepdim=True), 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape_q, shape_k", [
    ((6, 64), (6, 64)), ((2, 4, 10, 16), (2, 4, 7, 16)), ((3, 1, 5), (3, 9, 5)),
])
def test_sdpa_vs_torch_no_mask(rng, dtype, shape_q, shape_k):
    q = rng.standard_normal(shape_q).astype(dtype)
    k = rng.standard_normal(shape_k).astype(dtype)
    v = rng.standard_normal(shape_k[:-1] + (11,)).astype(dtype)
    out, w = A.scaled_dot_product_attention(q, k, v)
    tq, tk, tv = map(torch.from_numpy, (q, k, v))
    close(out, F.scaled_dot_product_attention(tq, tk, tv), **TOL[dtype])
    close(w, torch_weights(tq, tk), **TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mask_shape", [(10, 7), (2, 1, 10, 7), (1, 7)])
def test_sdpa_vs_torch_boolean_mask(rng, dtype, mask_shape):
    q = rng.standard_normal((2, 3, 10, 16)).astype(dtype)
    k = rng.standard_normal((2, 3, 7, 16)).astype(dtype)
    v = rng.standard_normal((2, 3, 7, 8)).astype(dtype)
    mask = rng.random(mask_shape) > 0.4
    mask[..., 0] = True  # torch's fused kernels differ on all-masked rows; tested below
    out, w = A.scaled_dot_product_attention(q, k, v, mask)
    tq, tk, tv, tm = map(torch.from_numpy, (q, k, v, mask))
    close(out, F.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm), **TOL[dtype])
    close(w, torch_weights(tq, tk, tm), **TOL[dtype])


def test_sdpa_vs_torch_fully_masked_rows(rng):
    q, k, v = (torch.from_numpy(rng.standard_normal((1, 4, 8))) for _ in range(3))
    mask = torch.ones(4, 4, dtype=torch.bool)
    mask[2] = False
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert (expected[0, 2] == 0).all()  # torch's own definition, which we follow
    out, w = A.scaled_dot_product_attention(q, k, v, mask)
    close(out, expected, **TOL[np.float64])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sdpa_vs_torch_causal(rng, dtype):
    q, k, v = (rng.standard_normal((2, 4, 12, 16)).astype(dtype) for _ in range(3))
    causal = np.tril(np.ones((12, 12), dtype=bool))
    out, w = A.scaled_dot_product_attention(q, k, v, causal)
    tq, tk, tv = map(torch.from_numpy, (q, k, v))
    close(out, F.scaled_dot_product_attention(tq, tk, tv, is_causal=True), **TOL[dtype])
    assert np.triu(w[0, 0], 1).max() == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_blocked_path_vs_torch(rng, dtype, monkeypatch):
    monkeypatch.setattr(A, "_KEY_BLOCK", 16)
    q, k, v = (rng.standard_normal((2, 50, 8)).astype(dtype) for _ in range(3))
    out, _ = A.scaled_dot_product_attention(q, k, v, np.tril(np.ones((50, 50), bool)),
                                            need_weights=False, memory_budget=1)
    tq, tk, tv = map(torch.from_numpy, (q, k, v))
    close(out, F.scaled_dot_product_attention(tq, tk, tv, is_causal=True), **TOL[dtype])


def mha_from_torch(mha):
    """Our weights from a torch.nn.MultiheadAttention (packed in_proj)."""
    w_q, w_k, w_v = mha.in_proj_weight.detach().numpy().reshape(3, mha.embed_dim, -1)
    b_q, b_k, b_v = mha.in_proj_bias.detach().numpy().reshape(3, -1)
    return dict(w_q=w_q, w_k=w_k, w_v=w_v, w_o=mha.out_proj.weight.detach().numpy(),
                b_q=b_q, b_k=b_k, b_v=b_v, b_o=mha.out_proj.bias.detach().numpy())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("num_heads", [1, 4, 8])
@pytest.mark.parametrize("with_mask", [False, True])
def test_mha_vs_torch_multihead_attention(rng, dtype, num_heads, with_mask):
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(32, num_heads, batch_first=True).to(TORCH[dtype])
    with torch.no_grad():  # non-zero biases so that they are checked too
        mha.in_proj_bias.uniform_(-0.5, 0.5)
        mha.out_proj.bias.uniform_(-0.5, 0.5)
    x = rng.standard_normal((3, 6, 32)).astype(dtype)
    y = rng.standard_normal((3, 9, 32)).astype(dtype)
    mask = np.tril(np.ones((6, 9), dtype=bool), 3) if with_mask else None
    out, w = A.multi_head_attention(x, y, y, num_heads, **mha_from_torch(mha), mask=mask)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    # torch's attn_mask uses the opposite convention: True = NOT allowed.
    t_mask = None if mask is None else ~torch.from_numpy(mask)
    t_out, t_w = mha(tx, ty, ty, attn_mask=t_mask, average_attn_weights=False)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else TOL[dtype]
    close(out, t_out.detach(), **tol)
    close(w, t_w.detach(), **tol)


def self_attention_with(mha):
    sa = SelfAttention(mha.embed_dim, mha.num_heads).to(mha.in_proj_weight.dtype)
    p = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in mha_from_torch(mha).items()}
    with torch.no_grad():
        for name, layer in (("q", sa.query), ("k", sa.key), ("v", sa.value), ("o", sa.output)):
            layer.weight.copy_(p[f"w_{name}"])
            layer.bias.copy_(p[f"b_{name}"])
    return sa


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_self_attention_vs_torch_and_numpy(dtype):
    torch.manual_seed(1)
    mha = torch.nn.MultiheadAttention(64, 8, batch_first=True).to(dtype)
    sa = self_attention_with(mha)
    x = torch.randn(2, 6, 64, dtype=dtype)
    causal = torch.tril(torch.ones(6, 6, dtype=torch.bool))
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-12)
    for mask in (None, causal):
        out, w = sa(x, mask)
        assert out.shape == (2, 6, 64) and w.shape == (2, 8, 6, 6)
        t_out, t_w = mha(x, x, x, attn_mask=None if mask is None else ~mask,
                         average_attn_weights=False)
        torch.testing.assert_close(out, t_out, **tol)
        torch.testing.assert_close(w, t_w, **tol)
        n_out, n_w = A.multi_head_attention(x.numpy(), x.numpy(), x.numpy(), 8,
                                            **mha_from_torch(mha),
                                            mask=None if mask is None else mask.numpy())
        close(n_out, out.detach(), **tol)
        close(n_w, w.detach(), **tol)


def test_numpy_vs_torch_on_the_cat_example():
    ex, arrays = load_example(), load_arrays()
    with torch.no_grad():
        q, k, v = ex.q_proj(ex.x), ex.k_proj(ex.x), ex.v_proj(ex.x)  # (1, 6, 64)
        t_out = F.scaled_dot_product_attention(q, k, v)
        t_w = torch.softmax(q @ k.transpose(-2, -1) / 8.0, dim=-1)
    x = arrays["x"]
    nq, nk, nv = (x @ arrays[f"w_{n}"].T + arrays[f"b_{n}"] for n in "qkv")
    out, w = A.scaled_dot_product_attention(nq, nk, nv)
    assert w.shape == (1, 6, 6)
    close(out, t_out, **TOL[np.float32])
    close(w, t_w, **TOL[np.float32])
    # and the torch module with one head and an identity output layer
    sa = SelfAttention(64, 1)
    with torch.no_grad():
        for mine, shipped in ((sa.query, ex.q_proj), (sa.key, ex.k_proj), (sa.value, ex.v_proj)):
            mine.load_state_dict(shipped.state_dict())
        sa.output.weight.copy_(torch.eye(64))
        sa.output.bias.zero_()
        s_out, s_w = sa(ex.x)
    close(w, s_w[:, 0], **TOL[np.float32])
    close(out, s_out, rtol=1e-5, atol=1e-5)
