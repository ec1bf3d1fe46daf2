"""Scaled dot-product and multi-head attention in NumPy.

Shape legend, used in every docstring of this module (as PyTorch documents
``torch.nn.functional.scaled_dot_product_attention``):

- ``...``: any number of leading batch dimensions (``B``, ``B, H``, or none)
- ``B``: batch size
- ``H``: number of heads
- ``L``: target (query) sequence length
- ``S``: source (key/value) sequence length
- ``d_k``: query/key feature size; ``d_v``: value feature size
- ``d_model``: model width, ``H * d_k`` in multi-head attention

Mask convention (PyTorch's): a boolean mask in which ``True`` means the key
takes part in attention. Masked scores become ``-inf`` (never a magic -1e9).
A query whose keys are all masked attends to nothing: its weights are all
zero and its output row is zero, as in
``torch.nn.functional.scaled_dot_product_attention``.

Float32 and float64 inputs keep their dtype; integer inputs are computed in
float64 and float16 in float32. Every bad input raises ``ValueError`` with a
message that says what was expected and what was given.
"""

from __future__ import annotations

import math
import numbers
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

__all__ = [
    "DEFAULT_MEMORY_BUDGET",
    "attention_scores",
    "direct_attention_bytes",
    "merge_heads",
    "multi_head_attention",
    "scaled_dot_product_attention",
    "softmax",
    "split_heads",
]

#: Largest score matrix (bytes, all batch entries together) that the direct
#: path may allocate before attention switches to the blocked path.
DEFAULT_MEMORY_BUDGET = 512 * 2**20

# The direct path works on groups of (batch entry, query rows) whose score
# block stays near this size, so the elementwise softmax passes run in the
# 2 MiB L2 cache instead of streaming the whole L x S matrix through memory
# four times (that was 3-4x slower than torch at L >= 512).
_CACHE_BLOCK_BYTES = 1 * 2**20
# Key block of the blocked (online-softmax) path: the score tile is
# (query rows) x _KEY_BLOCK, and memory no longer grows with S.
_KEY_BLOCK = 512
# Below this much score data (bytes) threads cost more than they save.
_PARALLEL_MIN_BYTES = 4 * 2**20


# ----------------------------------------------------------------- helpers
def _as_float_array(x, name: str) -> np.ndarray:
    """Return ``x`` as a floating NumPy array or raise a ValueError."""
    if x is None:
        raise ValueError(f"{name}: expected a numeric array, got None")
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # a torch tensor
        x = x.detach().cpu().numpy()
    try:
        arr = np.asarray(x)
    except (ValueError, TypeError) as exc:  # ragged nested lists, ...
        raise ValueError(
            f"{name}: expected a numeric array, got {type(x).__name__} "
            f"that NumPy cannot turn into one ({exc})"
        ) from None
    kind = arr.dtype.kind
    if kind == "f":
        return arr.astype(np.float32) if arr.dtype == np.float16 else arr
    if kind in "iu":
        return arr.astype(np.float64)
    what = {"b": "booleans", "c": "complex numbers", "U": "strings",
            "S": "bytes", "O": "Python objects"}.get(kind, str(arr.dtype))
    raise ValueError(
        f"{name}: expected a real numeric array (float32 or float64), "
        f"got an array of {what} (dtype {arr.dtype})"
    )


def _check_ndim(arr: np.ndarray, name: str, legend: str) -> None:
    if arr.ndim < 2:
        raise ValueError(
            f"{name}: expected at least 2 dimensions {legend}, "
            f"got shape {tuple(arr.shape)}"
        )


def _batch_shape(name_shapes) -> tuple:
    """Broadcast the leading (batch) dims of several arrays."""
    try:
        return np.broadcast_shapes(*(s for _, s in name_shapes))
    except ValueError:
        desc = ", ".join(f"{n} {tuple(s)}" for n, s in name_shapes)
        raise ValueError(
            f"expected batch dimensions (...) that broadcast together, "
            f"got {desc}"
        ) from None


def _as_mask(mask, target_shape: tuple) -> np.ndarray:
    """Validate a boolean mask broadcastable to ``target_shape``."""
    if hasattr(mask, "detach") and hasattr(mask, "cpu"):
        mask = mask.detach().cpu().numpy()
    mask = np.asarray(mask)
    if mask.dtype != np.bool_:
        raise ValueError(
            "mask: expected a boolean array (True = the key takes part), "
            f"got dtype {mask.dtype}; for a 0/1 array use mask.astype(bool)"
        )
    try:
        # The mask may not grow the output: it must broadcast *to* target_shape.
        if np.broadcast_shapes(mask.shape, target_shape) != target_shape:
            raise ValueError
    except ValueError:
        raise ValueError(
            f"mask: expected a shape that broadcasts to (..., L, S) = "
            f"{target_shape}, got {tuple(mask.shape)}"
        ) from None
    return mask


# ----------------------------------------------------------------- softmax
def softmax(x, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax along ``axis``.

    The row maximum is subtracted before ``exp`` so logits of +-1e4 (or
    larger) never overflow. ``-inf`` entries get weight 0. A row that is
    entirely ``-inf`` (every key masked) returns all zeros rather than NaN:
    it attends to nothing, matching the fully-masked rows of
    ``torch.nn.functional.scaled_dot_product_attention``. (``torch.softmax``
    itself returns NaN there.) A row containing NaN or ``+inf`` yields NaN,
    because its softmax is undefined.

    Shape legend: ``x`` (...) with any shape; the result has the shape of
    ``x``, non-negative, and sums to 1 along ``axis`` except for rows that
    are entirely ``-inf``.

    Args:
        x: array-like of real numbers (float32/float64 kept, ints -> float64).
        axis: the axis to normalise over.

    Returns:
        np.ndarray of the same shape and (floating) dtype as ``x``.
    """
    arr = _as_float_array(x, "x")
    if not isinstance(axis, numbers.Integral) or isinstance(axis, bool):
        raise ValueError(f"axis: expected an integer, got {axis!r}")
    if arr.ndim == 0:
        raise ValueError("x: expected at least 1 dimension, got a scalar")
    if not -arr.ndim <= axis < arr.ndim:
        raise ValueError(
            f"axis: expected an axis in [{-arr.ndim}, {arr.ndim - 1}] for an "
            f"array of shape {tuple(arr.shape)}, got {axis}"
        )
    if arr.shape[axis] == 0:
        return arr.copy()
    out = np.array(arr, copy=True)
    _softmax_inplace(out, axis)
    return out


def _exp_shifted_inplace(s: np.ndarray, axis: int = -1) -> np.ndarray:
    """Write exp(s - rowmax) into ``s``; return the row sums (never 0).

    A fully -inf row has max -inf and -inf - -inf = NaN; shifting such rows
    by 0 instead gives exp(-inf) = 0 everywhere, hence zero weights. Their
    sum is reported as 1 so that dividing by it keeps them at 0.
    """
    m = s.max(axis=axis, keepdims=True)
    np.copyto(m, 0, where=np.isneginf(m))
    s -= m
    np.exp(s, out=s)
    total = s.sum(axis=axis, keepdims=True)
    np.copyto(total, 1, where=total == 0)
    return total


def _softmax_inplace(s: np.ndarray, axis: int = -1) -> None:
    """Softmax of ``s`` along ``axis``, written into ``s``."""
    s /= _exp_shifted_inplace(s, axis)


# ---------------------------------------------------------------- attention
def _check_qkv(q, k, v):
    q = _as_float_array(q, "q")
    k = _as_float_array(k, "k")
    v = _as_float_array(v, "v")
    _check_ndim(q, "q", "(..., L, d_k)")
    _check_ndim(k, "k", "(..., S, d_k)")
    _check_ndim(v, "v", "(..., S, d_v)")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"expected q and k to share d_k (their last dimension), got "
            f"q {tuple(q.shape)} and k {tuple(k.shape)}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"expected k and v to share S (their second-to-last dimension), "
            f"got k {tuple(k.shape)} and v {tuple(v.shape)}"
        )
    if k.shape[-1] == 0:
        raise ValueError(f"expected d_k >= 1, got k {tuple(k.shape)}")
    if k.shape[-2] == 0:
        raise ValueError(f"expected at least one key (S >= 1), got k {tuple(k.shape)}")
    batch = _batch_shape([("q", q.shape[:-2]), ("k", k.shape[:-2]),
                          ("v", v.shape[:-2])])
    dtype = np.result_type(q, k, v)
    return q.astype(dtype, copy=False), k.astype(dtype, copy=False), \
        v.astype(dtype, copy=False), batch


def direct_attention_bytes(q, k) -> int:
    """Bytes of the score matrix the direct path would allocate.

    That is ``prod(...) * L * S * itemsize``: the one (..., L, S) buffer the
    direct path fills with scores and turns into weights in place. Accepts
    arrays or anything with ``.shape`` and ``.dtype`` (torch tensors too).

    Shape legend: ``q`` (..., L, d_k), ``k`` (..., S, d_k).
    """
    q_shape, k_shape = tuple(q.shape), tuple(k.shape)
    if len(q_shape) < 2 or len(k_shape) < 2:
        raise ValueError(
            f"expected q (..., L, d_k) and k (..., S, d_k), got shapes "
            f"{q_shape} and {k_shape}"
        )
    batch = _batch_shape([("q", q_shape[:-2]), ("k", k_shape[:-2])])
    dtype = np.result_type(_np_dtype(q.dtype), _np_dtype(k.dtype))
    if dtype.kind != "f":
        dtype = np.dtype(np.float64)
    return int(math.prod(batch) * q_shape[-2] * k_shape[-2] * dtype.itemsize)


def _np_dtype(dtype) -> np.dtype:
    try:
        return np.dtype(dtype)
    except TypeError:  # a torch dtype such as torch.float32
        return np.dtype(str(dtype).removeprefix("torch."))


def attention_scores(q, k, mask=None) -> np.ndarray:
    """Scaled scores ``q @ k^T / sqrt(d_k)``, masked entries set to -inf.

    Shape legend: ``q`` (..., L, d_k), ``k`` (..., S, d_k), ``mask``
    boolean, broadcastable to (..., L, S) (True = takes part); returns
    (..., L, S).
    """
    q, k, _, batch = _check_qkv(q, k, k)
    scores = (q / np.sqrt(q.dtype.type(k.shape[-1]))) @ np.swapaxes(k, -1, -2)
    if mask is not None:
        target = batch + (q.shape[-2], k.shape[-2])
        mask = _as_mask(mask, target)
        scores = np.broadcast_to(scores, target).copy()
        np.copyto(scores, -np.inf, where=~mask)
    return scores


def scaled_dot_product_attention(q, k, v, mask=None, *, need_weights=True,
                                 memory_budget=DEFAULT_MEMORY_BUDGET):
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V.

    ``d_k`` is read from ``k``'s last dimension. Leading batch dimensions
    broadcast as in ``torch.nn.functional.scaled_dot_product_attention``.

    When the score matrix (see :func:`direct_attention_bytes`) would exceed
    ``memory_budget`` bytes, the output is computed in key blocks with an
    online softmax (running max and running sum), so peak memory grows with
    L * d instead of L * S; that path cannot return the (..., L, S) weights,
    so it needs ``need_weights=False``.

    Shape legend:
        q: (..., L, d_k); k: (..., S, d_k); v: (..., S, d_v);
        mask: boolean, broadcastable to (..., L, S), True = takes part;
        returns output (..., L, d_v) and weights (..., L, S) (or None when
        ``need_weights`` is False).

    Args:
        q, k, v: real arrays (NumPy, torch tensors or nested lists).
        mask: optional boolean mask, PyTorch's convention.
        need_weights: return the attention weights as well.
        memory_budget: largest score matrix, in bytes, the direct path may
            allocate.

    Returns:
        ``(output, weights)``; rows of ``weights`` sum to 1, except rows
        whose keys are all masked, which are 0 (and so is their output).
    """
    q, k, v, batch = _check_qkv(q, k, v)
    L, S = q.shape[-2], k.shape[-2]
    if mask is not None:
        mask = _as_mask(mask, batch + (L, S))
    if not isinstance(memory_budget, numbers.Real) or memory_budget <= 0:
        raise ValueError(
            f"memory_budget: expected a positive number of bytes, got "
            f"{memory_budget!r}"
        )
    needed = direct_attention_bytes(q, k)
    if needed > memory_budget:
        if need_weights:
            raise ValueError(
                f"the (..., L, S) = {batch + (L, S)} attention weights need "
                f"{needed / 2**20:.1f} MiB, more than memory_budget "
                f"({memory_budget / 2**20:.1f} MiB); pass need_weights=False "
                "to compute the output blockwise, or raise memory_budget"
            )
        return _blocked_attention(q, k, v, mask, batch), None
    out, weights = _direct_attention(q, k, v, mask, batch, need_weights)
    return out, (weights if need_weights else None)


def _direct_attention(q, k, v, mask, batch, need_weights=True):
    """Materialise the (..., L, S) scores once and softmax them in place."""
    L, S, d_k = q.shape[-2], k.shape[-2], k.shape[-1]
    dtype = q.dtype
    # Scaling q (L x d_k) instead of the scores (L x S) saves a full pass.
    q = q * dtype.type(1.0 / math.sqrt(d_k))
    qf = np.broadcast_to(q, batch + q.shape[-2:]).reshape(-1, L, d_k)
    kt = np.broadcast_to(np.swapaxes(k, -1, -2), batch + (d_k, S))
    kt = kt.reshape(-1, d_k, S)
    vf = np.broadcast_to(v, batch + v.shape[-2:]).reshape(-1, S, v.shape[-1])
    mf = None
    if mask is not None:
        mf = np.broadcast_to(mask, batch + (L, S)).reshape(-1, L, S)
    n = qf.shape[0]
    # Without need_weights each unit softmaxes a scratch block of its own,
    # so no (n, L, S) buffer exists.
    weights = np.empty((n, L, S), dtype=dtype) if need_weights else None
    out = np.empty((n, L, v.shape[-1]), dtype=dtype)
    # Work in units whose score block is about _CACHE_BLOCK_BYTES: several
    # small batch entries at once, or row blocks of one large entry. The
    # elementwise softmax passes then run in L2 instead of streaming the
    # whole (L, S) matrix through memory four times.
    entry = L * S * dtype.itemsize
    if entry <= _CACHE_BLOCK_BYTES:
        group = max(1, _CACHE_BLOCK_BYTES // max(1, entry))
        units = [(b, min(n, b + group), 0, L) for b in range(0, n, group)]
    else:
        rows = max(1, _CACHE_BLOCK_BYTES // (S * dtype.itemsize))
        units = [(b, b + 1, r, min(L, r + rows))
                 for b in range(n) for r in range(0, L, rows)]

    def run(unit):
        b0, b1, r0, r1 = unit
        if need_weights:
            s = weights[b0:b1, r0:r1]  # (g, rows, S)
        else:
            s = np.empty((b1 - b0, r1 - r0, S), dtype=dtype)
        np.matmul(qf[b0:b1, r0:r1], kt[b0:b1], out=s)
        if mf is not None:
            np.copyto(s, -np.inf, where=~mf[b0:b1, r0:r1])
        o = out[b0:b1, r0:r1]  # (g, rows, d_v)
        if need_weights:
            _softmax_inplace(s)
            np.matmul(s, vf[b0:b1], out=o)
        else:
            # Normalise the (rows, d_v) output, not the (rows, S) weights:
            # one pass over the score block fewer.
            total = _exp_shifted_inplace(s)
            np.matmul(s, vf[b0:b1], out=o)
            o /= total

    _map_units(run, units, n * entry)
    out = out.reshape(batch + (L, v.shape[-1]))
    return out, (weights.reshape(batch + (L, S)) if need_weights else None)


def _blocked_attention(q, k, v, mask, batch):
    """Online-softmax attention over key blocks (no (L, S) matrix).

    For each key block: m_new = max(m, rowmax(s)); c = exp(m - m_new);
    p = exp(s - m_new); l = c * l + rowsum(p); acc = c * acc + p @ v.
    Finally out = acc / l, with out = 0 for rows whose keys were all masked.
    """
    L, S, d_k, d_v = q.shape[-2], k.shape[-2], k.shape[-1], v.shape[-1]
    dtype = q.dtype
    q = q * dtype.type(1.0 / math.sqrt(d_k))
    qf = np.broadcast_to(q, batch + (L, d_k)).reshape(-1, L, d_k)
    kf = np.broadcast_to(k, batch + (S, d_k)).reshape(-1, S, d_k)
    vf = np.broadcast_to(v, batch + (S, d_v)).reshape(-1, S, d_v)
    mf = None
    if mask is not None:
        mf = np.broadcast_to(mask, batch + (L, S)).reshape(-1, L, S)
    n = qf.shape[0]
    out = np.empty((n, L, d_v), dtype=dtype)
    s = np.empty((L, min(S, _KEY_BLOCK)), dtype=dtype)
    for b in range(n):
        m = np.full((L, 1), -np.inf, dtype=dtype)
        total = np.zeros((L, 1), dtype=dtype)
        acc = np.zeros((L, d_v), dtype=dtype)
        for c0 in range(0, S, _KEY_BLOCK):
            c1 = min(S, c0 + _KEY_BLOCK)
            sb = s[:, : c1 - c0]
            np.matmul(qf[b], kf[b, c0:c1].T, out=sb)
            if mf is not None:
                np.copyto(sb, -np.inf, where=~mf[b, :, c0:c1])
            m_new = np.maximum(m, sb.max(axis=-1, keepdims=True))
            # Rows with every key so far masked keep m = -inf; shift them by
            # 0 so that exp(-inf - shift) = 0 instead of NaN.
            shift = np.where(np.isneginf(m_new), 0, m_new).astype(dtype)
            corr = np.exp(m - shift)
            sb -= shift
            np.exp(sb, out=sb)
            total *= corr
            total += sb.sum(axis=-1, keepdims=True)
            acc *= corr
            acc += sb @ vf[b, c0:c1]
            m = m_new
        np.copyto(total, 1, where=total == 0)
        np.divide(acc, total, out=out[b])
    return out.reshape(batch + (L, d_v))


_POOL = None
_BLAS = None


def _map_units(fn, units, work_bytes):
    """Run ``fn`` on every unit, on all cores when the work is large.

    NumPy releases the GIL in ufunc loops and matmul, so threads give real
    parallelism for the elementwise softmax passes, which NumPy runs on one
    core (torch runs them on all). Inside the pool BLAS is held to one
    thread: two threaded OpenBLAS calls at once oversubscribe the cores and
    ran 3x slower here. While a call runs, that limit is process-wide.
    Small problems stay on the calling thread: a hand-off costs ~50 us.
    """
    global _POOL, _BLAS
    cores = os.cpu_count() or 1
    if cores < 2 or len(units) < 2 or work_bytes < _PARALLEL_MIN_BYTES:
        for unit in units:
            fn(unit)
        return
    if _POOL is None:
        from threadpoolctl import ThreadpoolController

        _BLAS = ThreadpoolController()
        _POOL = ThreadPoolExecutor(max_workers=cores,
                                   thread_name_prefix="attention")
    with _BLAS.limit(limits=1, user_api="blas"):
        for _ in _POOL.map(fn, units):
            pass


# -------------------------------------------------------------- multi-head
def _check_heads(num_heads, d_model, where):
    if not isinstance(num_heads, numbers.Integral) or isinstance(num_heads, bool) \
            or num_heads < 1:
        raise ValueError(f"num_heads: expected a positive integer, got {num_heads!r}")
    if d_model % num_heads:
        raise ValueError(
            f"expected d_model divisible by num_heads, got d_model={d_model} "
            f"({where}) and num_heads={num_heads}"
        )


def split_heads(x, num_heads: int) -> np.ndarray:
    """Split the model dimension into heads.

    Shape legend: ``x`` (..., L, d_model) -> (..., H, L, d_model / H), with
    H = ``num_heads``; head h holds features ``h*d_k:(h+1)*d_k``, as in
    ``torch.nn.MultiheadAttention``. Inverse of :func:`merge_heads`.
    """
    x = _as_float_array(x, "x")
    _check_ndim(x, "x", "(..., L, d_model)")
    _check_heads(num_heads, x.shape[-1], f"x {tuple(x.shape)}")
    *lead, L, d_model = x.shape
    x = x.reshape(*lead, L, num_heads, d_model // num_heads)  # (..., L, H, d_k)
    return np.swapaxes(x, -3, -2)  # (..., H, L, d_k)


def merge_heads(x) -> np.ndarray:
    """Concatenate heads back into the model dimension.

    Shape legend: ``x`` (..., H, L, d_k) -> (..., L, H * d_k). Inverse of
    :func:`split_heads`.
    """
    x = _as_float_array(x, "x")
    if x.ndim < 3:
        raise ValueError(
            f"x: expected at least 3 dimensions (..., H, L, d_k), got shape "
            f"{tuple(x.shape)}"
        )
    *lead, H, L, d_k = x.shape
    x = np.swapaxes(x, -3, -2)  # (..., L, H, d_k)
    return x.reshape(*lead, L, H * d_k)


def _linear(x, w, b, name):
    """``x @ w.T + b``, as torch.nn.Linear applies its weight and bias."""
    d_model = x.shape[-1]
    w = _as_float_array(w, f"w_{name}")
    if w.shape != (d_model, d_model):
        raise ValueError(
            f"w_{name}: expected shape (d_model, d_model) = ({d_model}, "
            f"{d_model}), got {tuple(w.shape)}"
        )
    y = x @ w.T.astype(x.dtype, copy=False)
    if b is not None:
        b = _as_float_array(b, f"b_{name}")
        if b.shape != (d_model,):
            raise ValueError(
                f"b_{name}: expected shape (d_model,) = ({d_model},), got "
                f"{tuple(b.shape)}"
            )
        y += b.astype(x.dtype, copy=False)
    return y


def multi_head_attention(query, key, value, num_heads, w_q, w_k, w_v, w_o,
                         b_q=None, b_k=None, b_v=None, b_o=None, mask=None,
                         *, need_weights=True,
                         memory_budget=DEFAULT_MEMORY_BUDGET):
    """Multi-head attention, as ``torch.nn.MultiheadAttention`` computes it.

    Each head h attends with its slice of the projected queries, keys and
    values; heads are concatenated and mixed by the output projection:
    ``MHA(x) = concat(head_1, ..., head_H) W_o^T + b_o`` with
    ``head_h = Attention(x_q W_q^T + b_q, x_k W_k^T + b_k, x_v W_v^T + b_v)``
    restricted to the features of head h.

    Shape legend:
        query: (..., L, d_model); key, value: (..., S, d_model);
        w_q, w_k, w_v, w_o: (d_model, d_model), applied like
        torch.nn.Linear (``x @ W.T + b``); b_*: (d_model,) or None;
        mask: boolean, broadcastable to (..., L, S), True = takes part,
        the same for every head;
        returns output (..., L, d_model) and weights (..., H, L, S), one
        matrix per head (``average_attn_weights=False`` in PyTorch), or
        None when ``need_weights`` is False.

    ``need_weights`` and ``memory_budget`` are passed to
    :func:`scaled_dot_product_attention`.
    """
    query = _as_float_array(query, "query")
    key = _as_float_array(key, "key")
    value = _as_float_array(value, "value")
    _check_ndim(query, "query", "(..., L, d_model)")
    _check_ndim(key, "key", "(..., S, d_model)")
    _check_ndim(value, "value", "(..., S, d_model)")
    d_model = query.shape[-1]
    for name, arr in (("key", key), ("value", value)):
        if arr.shape[-1] != d_model:
            raise ValueError(
                f"expected query and {name} to share d_model (their last "
                f"dimension), got query {tuple(query.shape)} and {name} "
                f"{tuple(arr.shape)}"
            )
    _check_heads(num_heads, d_model, f"query {tuple(query.shape)}")
    dtype = np.result_type(query, key, value)
    query, key, value = (a.astype(dtype, copy=False) for a in (query, key, value))
    if mask is not None:
        batch = _batch_shape([("query", query.shape[:-2]), ("key", key.shape[:-2]),
                              ("value", value.shape[:-2])])
        mask = _as_mask(mask, batch + (query.shape[-2], key.shape[-2]))
        if mask.ndim > 2:  # (..., L, S) -> (..., 1, L, S): same for each head
            mask = np.expand_dims(mask, -3)
    q = split_heads(_linear(query, w_q, b_q, "q"), num_heads)  # (..., H, L, d_k)
    k = split_heads(_linear(key, w_k, b_k, "k"), num_heads)  # (..., H, S, d_k)
    v = split_heads(_linear(value, w_v, b_v, "v"), num_heads)  # (..., H, S, d_k)
    heads, weights = scaled_dot_product_attention(
        q, k, v, mask, need_weights=need_weights, memory_budget=memory_budget)
    out = _linear(merge_heads(heads), w_o, b_o, "o")  # (..., L, d_model)
    return out, weights
