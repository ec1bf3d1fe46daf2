"""src/attention.py on cases whose answers are known without a reference."""

import math

import numpy as np
import pytest

from src import attention as A


def qkv(rng, shape_q, shape_k, d_v=None, dtype=np.float64):
    *batch_k, S, d_k = shape_k
    q = rng.standard_normal(shape_q).astype(dtype)
    k = rng.standard_normal(shape_k).astype(dtype)
    v = rng.standard_normal((*batch_k, S, d_v or d_k)).astype(dtype)
    return q, k, v


# ------------------------------------------------------------------ softmax
def test_softmax_matches_definition(rng):
    x = rng.standard_normal((3, 5))
    e = np.exp(x)
    np.testing.assert_allclose(A.softmax(x), e / e.sum(-1, keepdims=True), rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_finite_at_huge_logits(dtype):
    x = np.array([[1e4, -1e4, 0.0], [1e4, 1e4, -1e4], [-1e4, -1e4, -1e4]], dtype=dtype)
    out = A.softmax(x)
    assert out.dtype == dtype
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, [[1, 0, 0], [0.5, 0.5, 0], [1 / 3] * 3], atol=1e-6)


def test_softmax_neg_inf_entries_get_zero_weight():
    out = A.softmax(np.array([0.0, -np.inf, math.log(3.0)]))
    np.testing.assert_allclose(out, [0.25, 0.0, 0.75])


def test_softmax_fully_neg_inf_row_is_zeros_not_nan():
    out = A.softmax(np.array([[-np.inf, -np.inf], [0.0, 0.0]]))
    np.testing.assert_array_equal(out, [[0.0, 0.0], [0.5, 0.5]])


def test_softmax_axis_and_no_mutation(rng):
    x = rng.standard_normal((4, 3))
    before = x.copy()
    out = A.softmax(x, axis=0)
    np.testing.assert_allclose(out.sum(axis=0), 1.0)
    np.testing.assert_array_equal(x, before)


def test_softmax_ints_become_float64():
    assert A.softmax([1, 2, 3]).dtype == np.float64


@pytest.mark.parametrize("bad, match", [
    (None, "got None"),
    ("abc", "strings"),
    ([True, False], "booleans"),
    (np.array([1 + 1j]), "complex"),
    ([[1, 2], [3]], "cannot turn"),
    (np.float64(3.0), "scalar"),
])
def test_softmax_rejects_bad_input(bad, match):
    with pytest.raises(ValueError, match=match):
        A.softmax(bad)


def test_softmax_rejects_bad_axis():
    with pytest.raises(ValueError, match=r"axis in \[-2, 1\].*got 2"):
        A.softmax(np.zeros((2, 2)), axis=2)


# -------------------------------------------------------- scaled dot product
def test_hand_computed_2x2():
    # d_k = 4, so the scale is 1/2. scores = [[2, 0], [0, 2]] / 2 = I.
    q = np.array([[2.0, 0, 0, 0], [0, 2.0, 0, 0]])
    k = np.array([[1.0, 0, 0, 0], [0, 1.0, 0, 0]])
    v = np.array([[1.0, 2.0], [3.0, 4.0]])
    out, w = A.scaled_dot_product_attention(q, k, v)
    e = math.e
    np.testing.assert_allclose(w, [[e / (e + 1), 1 / (e + 1)], [1 / (e + 1), e / (e + 1)]])
    np.testing.assert_allclose(out[0], [(e + 3) / (e + 1), (2 * e + 4) / (e + 1)])
    np.testing.assert_allclose(out[1], [(1 + 3 * e) / (e + 1), (2 + 4 * e) / (e + 1)])


@pytest.mark.parametrize("d_k", [1, 2, 3, 7, 64])
def test_scores_divided_by_exactly_sqrt_dk(rng, d_k):
    q, k, _ = qkv(rng, (5, d_k), (4, d_k))
    np.testing.assert_allclose(A.attention_scores(q, k), q @ k.T / math.sqrt(d_k),
                               rtol=1e-13, atol=1e-13)
    # and the softmax sees those scores: log-weight differences equal score differences
    _, w = A.scaled_dot_product_attention(q, k, k)
    s = q @ k.T / math.sqrt(d_k)
    np.testing.assert_allclose(np.log(w) - np.log(w[:, :1]), s - s[:, :1], atol=1e-10)


def test_zero_queries_give_uniform_weights_and_mean_values(rng):
    _, k, v = qkv(rng, (3, 8), (5, 8))
    out, w = A.scaled_dot_product_attention(np.zeros((3, 8)), k, v)
    np.testing.assert_allclose(w, np.full((3, 5), 0.2))
    np.testing.assert_allclose(out, np.broadcast_to(v.mean(0), (3, 8)))


def test_one_token(rng):
    q, k, v = qkv(rng, (1, 4), (1, 4))
    out, w = A.scaled_dot_product_attention(q, k, v)
    np.testing.assert_array_equal(w, [[1.0]])
    np.testing.assert_allclose(out, v)


def test_shapes_with_batch_and_s_ne_l(rng):
    q, k, v = qkv(rng, (2, 3, 5, 8), (2, 3, 7, 8), d_v=6)
    out, w = A.scaled_dot_product_attention(q, k, v)
    assert out.shape == (2, 3, 5, 6) and w.shape == (2, 3, 5, 7)
    np.testing.assert_allclose(w.sum(-1), 1.0)


def test_batch_dims_broadcast(rng):
    q = rng.standard_normal((2, 1, 5, 8))
    k = rng.standard_normal((3, 7, 8))
    v = rng.standard_normal((3, 7, 4))
    out, w = A.scaled_dot_product_attention(q, k, v)
    assert out.shape == (2, 3, 5, 4)
    ref_out, _ = A.scaled_dot_product_attention(q[1, 0], k[2], v[2])
    np.testing.assert_allclose(out[1, 2], ref_out)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_kept(rng, dtype):
    q, k, v = qkv(rng, (4, 8), (4, 8), dtype=dtype)
    out, w = A.scaled_dot_product_attention(q, k, v)
    assert out.dtype == dtype and w.dtype == dtype


def test_stable_at_large_logits():
    q = np.full((2, 4), 1e3, dtype=np.float32)
    k = np.array([[1e3] * 4, [-1e3] * 4], dtype=np.float32)
    v = np.eye(2, 4, dtype=np.float32)
    out, w = A.scaled_dot_product_attention(q, k, v)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(w, [[1, 0], [1, 0]])


def test_mask_and_fully_masked_row(rng):
    q, k, v = qkv(rng, (3, 4), (4, 4))
    mask = np.array([[True, False, True, False], [False] * 4, [True] * 4])
    out, w = A.scaled_dot_product_attention(q, k, v, mask)
    assert (w[0, [1, 3]] == 0).all()
    np.testing.assert_allclose(w[0].sum(), 1.0)
    np.testing.assert_array_equal(w[1], 0.0)
    np.testing.assert_array_equal(out[1], 0.0)
    _, w_free = A.scaled_dot_product_attention(q, k, v)
    np.testing.assert_allclose(w[2], w_free[2])


def test_need_weights_false_same_output(rng):
    q, k, v = qkv(rng, (2, 6, 8), (2, 9, 8))
    mask = rng.random((6, 9)) > 0.3
    out, w = A.scaled_dot_product_attention(q, k, v, mask)
    out2, none = A.scaled_dot_product_attention(q, k, v, mask, need_weights=False)
    assert none is None
    np.testing.assert_allclose(out2, out, rtol=1e-12, atol=1e-12)


def test_accepts_torch_tensors_and_lists():
    import torch

    q = torch.ones(2, 3, requires_grad=True)
    out, w = A.scaled_dot_product_attention(q, [[1.0, 0, 0], [0, 1.0, 0]], [[1.0], [2.0]])
    np.testing.assert_allclose(w, 0.5)
    np.testing.assert_allclose(out, [[1.5], [1.5]])


@pytest.mark.parametrize("q, k, v, match", [
    (np.zeros(4), np.zeros((2, 4)), np.zeros((2, 4)), r"q: expected at least 2 dimensions"),
    (np.zeros((3, 4)), np.zeros((2, 5)), np.zeros((2, 4)), "share d_k"),
    (np.zeros((3, 4)), np.zeros((2, 4)), np.zeros((5, 4)), "share S"),
    (np.zeros((2, 3, 4)), np.zeros((3, 2, 4)), np.zeros((3, 2, 4)), "broadcast together"),
    (np.zeros((3, 4)), np.array([["a"] * 4] * 2), np.zeros((2, 4)), "k: expected a real"),
    (np.zeros((3, 0)), np.zeros((2, 0)), np.zeros((2, 4)), "d_k >= 1"),
    (np.zeros((3, 4)), np.zeros((0, 4)), np.zeros((0, 4)), "S >= 1"),
])
def test_sdpa_rejects_bad_input(q, k, v, match):
    with pytest.raises(ValueError, match=match):
        A.scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize("mask, match", [
    (np.ones((3, 5), dtype=bool), r"broadcasts to \(\.\.\., L, S\) = \(3, 4\), got \(3, 5\)"),
    (np.ones((2, 3, 4), dtype=bool), "broadcasts to"),  # would grow the output
    (np.ones((3, 4)), "boolean"),
])
def test_sdpa_rejects_bad_mask(rng, mask, match):
    q, k, v = qkv(rng, (3, 8), (4, 8))
    with pytest.raises(ValueError, match=match):
        A.scaled_dot_product_attention(q, k, v, mask)


def test_memory_budget_errors(rng):
    q, k, v = qkv(rng, (8, 4), (8, 4))
    with pytest.raises(ValueError, match="need_weights=False"):
        A.scaled_dot_product_attention(q, k, v, memory_budget=100)
    with pytest.raises(ValueError, match="positive number of bytes"):
        A.scaled_dot_product_attention(q, k, v, memory_budget=0)


def test_direct_attention_bytes():
    q = np.zeros((2, 3, 10, 8), dtype=np.float32)
    k = np.zeros((3, 20, 8), dtype=np.float32)
    assert A.direct_attention_bytes(q, k) == 2 * 3 * 10 * 20 * 4
    assert A.direct_attention_bytes(q.astype(np.float64), k) == 2 * 3 * 10 * 20 * 8


def test_direct_attention_bytes_of_torch_tensors():
    import torch

    assert A.direct_attention_bytes(torch.zeros(8192, 64), torch.zeros(8192, 64)) == 8192**2 * 4


# ------------------------------------------------------------- blocked path
@pytest.mark.parametrize("dtype, tol", [(np.float32, 1e-6), (np.float64, 1e-12)])
@pytest.mark.parametrize("with_mask", [False, True])
def test_blocked_equals_direct(rng, monkeypatch, dtype, tol, with_mask):
    monkeypatch.setattr(A, "_KEY_BLOCK", 7)  # many blocks, a ragged last one
    q, k, v = qkv(rng, (2, 33, 16), (2, 40, 16), d_v=5, dtype=dtype)
    mask = None
    if with_mask:
        mask = rng.random((2, 33, 40)) > 0.5
        mask[0, 3] = False  # a fully masked row
        mask[1, 4, :14] = False  # masked for the first two blocks only
    out, _ = A.scaled_dot_product_attention(q, k, v, mask)
    blocked, none = A.scaled_dot_product_attention(q, k, v, mask, need_weights=False,
                                                   memory_budget=1)
    assert none is None and blocked.dtype == dtype
    np.testing.assert_allclose(blocked, out, rtol=tol, atol=tol)
    if with_mask:
        np.testing.assert_array_equal(blocked[0, 3], 0.0)


def test_blocked_is_used_over_budget(rng, monkeypatch):
    calls = []
    real = A._blocked_attention
    monkeypatch.setattr(A, "_blocked_attention", lambda *a: calls.append(1) or real(*a))
    q, k, v = qkv(rng, (8, 4), (8, 4))
    A.scaled_dot_product_attention(q, k, v, need_weights=False, memory_budget=8 * 8 * 8)
    assert not calls
    A.scaled_dot_product_attention(q, k, v, need_weights=False, memory_budget=8 * 8 * 8 - 1)
    assert calls


def test_parallel_path_equals_serial(rng, monkeypatch):
    q, k, v = qkv(rng, (4, 300, 32), (4, 300, 32), dtype=np.float32)
    mask = rng.random((300, 300)) > 0.2
    monkeypatch.setattr(A, "_PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(A, "_CACHE_BLOCK_BYTES", 64 * 300 * 4)  # row blocks of 64
    out_p, w_p = A.scaled_dot_product_attention(q, k, v, mask)
    monkeypatch.setattr(A, "_PARALLEL_MIN_BYTES", 2**62)
    out_s, w_s = A.scaled_dot_product_attention(q, k, v, mask)
    # BLAS held to one thread sums in another order: equal to float32 rounding.
    np.testing.assert_allclose(out_p, out_s, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w_p, w_s, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------- multi-head
def test_split_merge_shapes_and_layout():
    x = np.arange(2 * 3 * 8, dtype=np.float64).reshape(2, 3, 8)
    h = A.split_heads(x, 4)
    assert h.shape == (2, 4, 3, 2)
    np.testing.assert_array_equal(h[1, 2, 0], x[1, 0, 4:6])  # head 2 = features 4:6
    np.testing.assert_array_equal(A.merge_heads(h), x)


@pytest.mark.parametrize("call, match", [
    (lambda: A.split_heads(np.zeros((3, 10)), 4), "divisible by num_heads.*d_model=10"),
    (lambda: A.split_heads(np.zeros((3, 8)), 0), "positive integer"),
    (lambda: A.split_heads(np.zeros(8), 2), "at least 2 dimensions"),
    (lambda: A.merge_heads(np.zeros((3, 8))), "at least 3 dimensions"),
])
def test_split_merge_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_mha_one_head_identity_weights_is_sdpa(rng):
    x = rng.standard_normal((2, 5, 8))
    eye = np.eye(8)
    out, w = A.multi_head_attention(x, x, x, 1, eye, eye, eye, eye)
    ref_out, ref_w = A.scaled_dot_product_attention(x, x, x)
    np.testing.assert_allclose(out, ref_out)
    np.testing.assert_allclose(w[:, 0], ref_w)


@pytest.mark.parametrize("kwargs, match", [
    (dict(w_q=np.eye(4)), r"w_q: expected shape \(d_model, d_model\) = \(8, 8\)"),
    (dict(b_o=np.zeros(3)), r"b_o: expected shape \(d_model,\) = \(8,\)"),
    (dict(num_heads=3), "divisible"),
    (dict(key=np.zeros((4, 6))), "share d_model"),
    (dict(mask=np.ones((5, 4), dtype=bool)), "broadcasts to"),
])
def test_mha_errors(rng, kwargs, match):
    x = rng.standard_normal((5, 8))
    args = dict(query=x, key=x, value=x, num_heads=2, w_q=np.eye(8), w_k=np.eye(8),
                w_v=np.eye(8), w_o=np.eye(8))
    args.update(kwargs)
    if "key" in kwargs:
        args["value"] = kwargs["key"]
    with pytest.raises(ValueError, match=match):
        A.multi_head_attention(**args)
