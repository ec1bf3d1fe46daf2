"""Property tests (hypothesis) of src/attention.py."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from src import attention as A

finite = st.floats(-1e4, 1e4, allow_nan=False, width=64)
dims = st.integers(1, 7)


@st.composite
def qkv(draw):
    batch = draw(st.lists(st.integers(1, 3), max_size=2)).copy()
    L, S, d_k, d_v = draw(dims), draw(dims), draw(dims), draw(dims)
    small = st.floats(-10, 10, allow_nan=False, width=64)
    q = draw(arrays(np.float64, (*batch, L, d_k), elements=small))
    k = draw(arrays(np.float64, (*batch, S, d_k), elements=small))
    v = draw(arrays(np.float64, (*batch, S, d_v), elements=small))
    return q, k, v


@settings(max_examples=60, deadline=None)
@given(arrays(np.float64, st.tuples(dims, dims), elements=finite))
def test_softmax_rows_sum_to_one_and_finite(x):
    out = A.softmax(x)
    assert np.isfinite(out).all() and (out >= 0).all()
    np.testing.assert_allclose(out.sum(-1), 1.0, rtol=1e-12)


@settings(max_examples=60, deadline=None)
@given(qkv())
def test_weight_rows_sum_to_one(args):
    _, w = A.scaled_dot_product_attention(*args)
    np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-12)


@settings(max_examples=40, deadline=None)
@given(qkv(), st.randoms(use_true_random=False))
def test_permutation_equivariance(args, random):
    """Permuting queries permutes outputs; permuting key/value pairs changes nothing."""
    q, k, v = args
    out, w = A.scaled_dot_product_attention(q, k, v)
    p_q = np.array(random.sample(range(q.shape[-2]), q.shape[-2]))
    p_k = np.array(random.sample(range(k.shape[-2]), k.shape[-2]))
    out2, w2 = A.scaled_dot_product_attention(q[..., p_q, :], k[..., p_k, :], v[..., p_k, :])
    np.testing.assert_allclose(out2, out[..., p_q, :], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(w2, w[..., p_q, :][..., p_k], rtol=1e-9, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 5),
       st.lists(st.integers(1, 3), max_size=2))
def test_split_merge_round_trip(num_heads, d_k, L, batch):
    x = np.random.default_rng(0).standard_normal((*batch, L, num_heads * d_k))
    heads = A.split_heads(x, num_heads)
    assert heads.shape == (*batch, num_heads, L, d_k)
    np.testing.assert_array_equal(A.merge_heads(heads), x)


@settings(max_examples=40, deadline=None)
@given(qkv(), st.integers(1, 4), st.data())
def test_blocked_equals_direct_with_masks(args, key_block, data):
    q, k, v = args
    L, S = q.shape[-2], k.shape[-2]
    mask = data.draw(arrays(np.bool_, (L, S)))
    out, _ = A.scaled_dot_product_attention(q, k, v, mask)
    old = A._KEY_BLOCK
    A._KEY_BLOCK = key_block
    try:
        blocked, _ = A.scaled_dot_product_attention(q, k, v, mask, need_weights=False,
                                                    memory_budget=1)
    finally:
        A._KEY_BLOCK = old
    np.testing.assert_allclose(blocked, out, rtol=1e-9, atol=1e-9)
