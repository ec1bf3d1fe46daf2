"""Attention plots and their text alternative.

Every function returns a matplotlib Figure (or a string) and never calls
plt.show(): a notebook displays the returned figure, a script saves it.
Colours use "cividis", designed to read the same with the common forms of
colour blindness and in greyscale; every heatmap also writes its values in
the cells, so no reading depends on colour alone.

Shape legend: H heads, L queries (rows), S keys (columns).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "attention_table",
    "check_figures",
    "figure_png",
    "new_figure",
    "plot_attention",
    "plot_heads",
    "plot_scaling_effect",
    "png_bytes",
    "show_attention",
    "show_figure",
    "top_keys",
]

CMAP = "cividis"


def new_figure(**kwargs) -> Figure:
    """A matplotlib Figure (``kwargs`` as Figure's). matplotlib.figure is imported on first
    use: 0.3 s that every set-up cell, replay server and ``verify.py`` run paid on import,
    when most of them draw nothing."""
    from matplotlib.figure import Figure

    return Figure(**kwargs)


def _to_matrix(weights, name="weights", ndim=2) -> np.ndarray:
    """numpy/torch/list -> float64 array with ``ndim`` dims (leading 1s dropped)."""
    if weights is None:
        raise ValueError(f"{name}: expected an array of attention weights, got None")
    if hasattr(weights, "detach"):
        weights = weights.detach().cpu().numpy()
    try:
        arr = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(
            f"{name}: expected a numeric array, got {type(weights).__name__}"
        ) from None
    while arr.ndim > ndim and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != ndim:
        want = "[L, S] or [1, L, S]" if ndim == 2 else "[H, L, S] or [1, H, L, S]"
        raise ValueError(f"{name}: expected shape {want}, got {list(np.shape(weights))}")
    return arr


def _labels(tokens, n, axis):
    if tokens is None:
        return [str(i) for i in range(n)]
    tokens = [str(t) for t in tokens]
    if len(tokens) != n:
        raise ValueError(
            f"tokens: expected {n} labels for the {axis} of the matrix, got {len(tokens)}"
        )
    return tokens


def _heatmap(ax, mat, rows, cols, vmin, vmax, annotate, cmap, fontsize=8):
    import matplotlib as mpl

    im = ax.imshow(mat, cmap=cmap, vmin=vmin, vmax=vmax, aspect="equal")
    ax.set_xticks(range(len(cols)), labels=cols, rotation=45, ha="right")
    ax.set_yticks(range(len(rows)), labels=rows)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    if annotate:
        colormap = mpl.colormaps[cmap]
        span = (vmax - vmin) or 1.0
        for i in range(mat.shape[0]):
            for j in range(mat.shape[1]):
                r, g, b, _ = colormap((mat[i, j] - vmin) / span)
                # Dark text on light cells, light text on dark cells.
                light_cell = 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.5
                # (a masked entry, -inf, is left blank by imshow and said in words)
                said = "−∞" if np.isneginf(mat[i, j]) else f"{mat[i, j]:.2f}"
                ax.text(j, i, said, ha="center", va="center", fontsize=fontsize,
                        color="black" if light_cell or not np.isfinite(mat[i, j]) else "white")
    return im


def plot_attention(weights, tokens=None, *, key_tokens=None, title=None,
                   annotate=True, cmap=CMAP, vmin=None, vmax=None,
                   value_label="attention weight") -> Figure:
    """Heatmap of one attention matrix: rows are queries, columns keys.

    Accepts numpy arrays or torch tensors of shape [L, S] or [1, L, S]
    (e.g. the lesson's [1, 6, 6] ``attention_weights``); scores work too
    (set ``value_label``). ``tokens`` label the queries and, unless
    ``key_tokens`` is given, the keys. The colour scale runs from
    min(0, data) to the data's maximum unless ``vmin``/``vmax`` are given.

    Returns:
        A matplotlib Figure with one heatmap, values written in the cells,
        a colour bar and a title.
    """
    mat = _to_matrix(weights)
    rows = _labels(tokens, mat.shape[0], "rows (queries)")
    cols = _labels(key_tokens if key_tokens is not None else tokens,
                   mat.shape[1], "columns (keys)")
    finite = mat[np.isfinite(mat)]
    lo = vmin if vmin is not None else min(0.0, finite.min(initial=0.0))
    top = finite.max() if finite.size else 1.0
    hi = vmax if vmax is not None else max(top, lo + 1e-12)
    size = max(4.0, 0.5 * max(mat.shape) + 1.8)
    # Fixed margins: a layout engine (tight or constrained) measures the text in
    # an extra draw, which doubled the render time (150 vs 75 ms) in the lesson.
    fig = new_figure(figsize=(size + 1.2, size))
    fig.subplots_adjust(left=0.15, right=0.98, bottom=0.17, top=0.92)
    ax = fig.add_subplot()
    im = _heatmap(ax, mat, rows, cols, lo, hi, annotate, cmap)
    fig.colorbar(im, ax=ax, label=value_label)
    ax.set_title(title or "Attention weights (row = query, column = key)")
    return fig


def plot_heads(weights, tokens=None, *, title=None, annotate=True,
               cmap=CMAP, ncols=None, value_label="attention weight") -> Figure:
    """One heatmap per head, on a shared colour scale.

    Accepts [H, L, S] or [1, H, L, S] (numpy or torch), e.g. the
    ``(B, H, L, L)`` weights of ``SelfAttention`` for one sentence; -inf entries (masked)
    are left blank. When S is not L (a head's [L, d_k] vectors), the columns are numbered.
    """
    heads = _to_matrix(weights, ndim=3)
    n_heads, L, S = heads.shape
    rows = _labels(tokens, L, "rows (queries)")
    cols = _labels(tokens if S == L else [str(j) for j in range(S)], S, "columns (keys)")
    ncols = ncols or min(n_heads, 4)
    nrows = math.ceil(n_heads / ncols)
    cell = max(2.2, 0.32 * max(L, S) + 0.6)  # inches per heatmap
    # Fixed margins and the token labels on the outer heatmaps only: a layout engine
    # (constrained) and 8 sets of axis labels made one figure of 8 heads take 3 s to draw.
    fig = new_figure(figsize=(cell * ncols + 1.6, cell * nrows + 1.0))
    fig.subplots_adjust(left=0.8 / (cell * ncols + 1.6), right=1 - 1.3 / (cell * ncols + 1.6),
                        bottom=0.75 / (cell * nrows + 1.0), top=1 - 0.55 / (cell * nrows + 1.0),
                        wspace=0.08, hspace=0.22)
    axes = fig.subplots(nrows, ncols, squeeze=False, sharex=True, sharey=True)
    finite = heads[np.isfinite(heads)]
    lo = min(0.0, finite.min(initial=0.0))
    hi = max(finite.max() if finite.size else 1.0, lo + 1e-12)
    im = None
    for h, ax in enumerate(axes.flat):
        if h >= n_heads:
            ax.set_axis_off()
            continue
        im = _heatmap(ax, heads[h], rows, cols, lo, hi, annotate, cmap, fontsize=6)
        ax.set_title(f"head {h}", fontsize=9, pad=3)
        ax.tick_params(labelsize=7, length=2)
        ax.set_xlabel("")
        ax.set_ylabel("")
    across = "feature of the head" if S != L else "key (attended to)"
    fig.supxlabel(across, fontsize=9)
    fig.supylabel("token" if S != L else "query (attending)", fontsize=9)
    fig.colorbar(im, ax=axes.ravel().tolist(), label=value_label, fraction=0.03, pad=0.02)
    fig.suptitle(title or f"Attention weights of {n_heads} heads", fontsize=10)
    return fig


def plot_scaling_effect(d_k: int = 64, n_keys: int = 6, n_samples: int = 1000,
                        seed: int = 0) -> Figure:
    """Why scores are divided by sqrt(d_k).

    Left: the spread of q . k for random unit-variance q, k of size d_k,
    raw (variance d_k) and scaled by 1/sqrt(d_k) (variance 1). Right: the
    mean largest softmax weight of a row of ``n_keys`` scores as d_k grows:
    unscaled rows saturate towards one-hot (vanishing gradients), scaled
    rows do not. Deterministic for a given ``seed``.
    """
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((n_samples, d_k))
    k = rng.standard_normal((n_samples, d_k))
    raw = np.einsum("nd,nd->n", q, k)  # (n_samples,)
    scaled = raw / math.sqrt(d_k)

    dims = np.array([1, 4, 16, 64, 256, 1024])  # (n_samples // 4) rows each
    max_raw, max_scaled = [], []
    for d in dims:
        s = (rng.standard_normal((n_samples // 4, 1, d))
             @ rng.standard_normal((n_samples // 4, d, n_keys)))[:, 0]  # (n, S)
        for out, vals in ((max_raw, s), (max_scaled, s / math.sqrt(d))):
            e = np.exp(vals - vals.max(axis=1, keepdims=True))
            out.append((e / e.sum(axis=1, keepdims=True)).max(axis=1).mean())

    fig = new_figure(figsize=(10, 3.6))  # fixed margins, as in plot_attention
    fig.subplots_adjust(left=0.065, right=0.98, bottom=0.14, top=0.9, wspace=0.22)
    left, right = fig.subplots(1, 2)
    bins = np.linspace(raw.min(), raw.max(), 60)
    left.hist(raw, bins=bins, alpha=0.6, color="#b2182b",
              label=f"q·k (std {raw.std():.1f} ≈ √{d_k})")
    left.hist(scaled, bins=bins, alpha=0.8, color="#2166ac",
              label=f"q·k / √{d_k} (std {scaled.std():.2f})")
    left.set_xlabel("score")
    left.set_ylabel("count")
    left.set_title(f"Spread of dot-product scores, d_k = {d_k}")
    left.legend()
    right.plot(dims, max_raw, "o-", color="#b2182b", label="softmax(q·k)")
    right.plot(dims, max_scaled, "s--", color="#2166ac", label="softmax(q·k / √d_k)")
    right.axhline(1 / n_keys, color="grey", lw=0.8, ls=":", label="uniform")
    right.set_xscale("log", base=2)
    right.set_ylim(0, 1.05)
    right.set_xlabel("d_k")
    right.set_ylabel(f"mean largest weight in a row of {n_keys}")
    right.set_title("Unscaled softmax saturates as d_k grows")
    right.legend()
    return fig


def top_keys(weights, tokens=None, cols=None, atol=1e-6):
    """For each query: (query token, [keys with the largest weight], weight).

    Keys within ``atol`` of the row maximum are all named: in the cat
    sentence the two "the" tokens have identical keys and always tie.
    """
    mat = _to_matrix(weights)
    rows = _labels(tokens, mat.shape[0], "rows (queries)")
    cols = _labels(cols if cols is not None else tokens, mat.shape[1], "columns (keys)")
    result = []
    for i, row in enumerate(mat):
        best = np.nanmax(row) if np.isfinite(row).any() else np.nan
        keys = [cols[j] for j in np.flatnonzero(np.abs(row - best) <= atol)]
        result.append((rows[i], keys, float(best)))
    return result


def attention_table(weights, tokens=None, value_label="weight") -> str:
    """Plain-text alternative to the heatmap, one line per query token.

    Example line: ``cat  -> mat  0.412`` (ties: ``The / the  0.300 each``).
    """
    entries = top_keys(weights, tokens)
    width = max(len(q) for q, _, _ in entries)
    lines = [f"{'query':<{width}}  ->  key with the largest {value_label}"]
    for query, keys, w in entries:
        each = " each" if len(keys) > 1 else ""
        lines.append(f"{query:<{width}}  ->  {' / '.join(keys) or '(none)'}  {w:.3f}{each}")
    return "\n".join(lines)


def heads_table(heads, tokens=None, value_label="weight") -> str:
    """Plain-text alternative to :func:`plot_heads`: one line per head, each query token
    with the key (or feature) holding its largest ``value_label`` (masked -inf entries are
    never the largest). heads: [H, L, S] or [1, H, L, S]."""
    mat = _to_matrix(heads, ndim=3)
    n_heads, L, S = mat.shape
    cols = tokens if tokens is not None and S == L else [f"#{j}" for j in range(S)]
    lines = [f"head: each query -> the {'key' if S == L else 'feature'} with its largest "
             f"{value_label}"]
    for h in range(n_heads):
        parts = [f"{q}->{'/'.join(k)} {w:.2f}" for q, k, w in top_keys(mat[h], tokens, cols)]
        lines.append(f"head {h}: " + ", ".join(parts))
    return "\n".join(lines)


def check_figures(lesson, results) -> list[dict]:
    """The heatmaps the lesson's check cell draws for ``results`` (its checks' results,
    each with the values it read), from the spec's figures (``Step.figures``): one dict
    per figure that can be drawn, with ``title``, ``value_label``, ``matrix`` ([L, L], or
    [H, L, S] for one heatmap per head, float64), ``alt`` (the image's text alternative)
    and ``table`` (:func:`attention_table`, :func:`heads_table`). The kernel
    (``verify.show``) and the feedback of a graded notebook draw from the same dicts."""
    by_name = {r.step: r for r in results}
    labels = list(lesson.labels) or None
    out = []
    for step in lesson.steps:
        for fig in step.figures:
            result = by_name.get(fig.check)
            if result is None or not fig.wanted(result):
                continue
            mat = drawable(result.values_of(fig.value), labels)
            if mat is None:
                continue
            title = fig.title_for(result)
            label = fig.value_label
            if mat.ndim == 3:
                cols = "key tokens" if mat.shape[1] == mat.shape[2] else "the head's features"
                out.append({"title": title, "value_label": label, "matrix": mat,
                            "labels": labels, "table": heads_table(mat, labels, label),
                            "alt": (f"{mat.shape[0]} heatmaps, one per head: {title}. Rows "
                                    f"are tokens ({', '.join(labels or [])}), columns "
                                    f"{cols}; each square's shade and number give its "
                                    f"{label} (−∞: masked, left blank). The table beside "
                                    f"it names each row's largest {label}, head by head.")})
                continue
            out.append({"title": title, "value_label": label, "matrix": mat,
                        "labels": labels, "table": attention_table(mat, labels, label),
                        "alt": (f"Heatmap: {title}. Rows are query tokens, columns key tokens"
                                f" ({', '.join(labels or [])}); each square's shade and "
                                f"number give its {label}. The table beside it names each "
                                f"query's largest {label}.")})
    return out


def drawable(values, labels=None):
    """``values`` as a float64 matrix a heatmap can show, else None: [L, L] (L tokens
    when ``labels`` are given), or [H, L, S] with a head axis (values [1, H, L, S]: one
    heatmap per head). Finite, except -inf where a mask put it (drawn blank)."""
    if values is None:
        return None
    try:
        arr = np.asarray(values, dtype=np.float64)
        # ([1, L, S] is one matrix; [H, L, S] with H > 1, as the feedback stores it, and
        # [1, H, L, S] are heads)
        heads = arr.ndim == 4 or arr.ndim == 3 and arr.shape[0] > 1
        mat = _to_matrix(arr, ndim=3 if heads else 2)
    except (ValueError, TypeError):
        return None
    if mat.ndim == 3 and not 1 < mat.shape[0] <= 16:
        return None
    n = mat.shape[-2]
    if labels is not None and (n != len(labels) or mat.ndim == 2 and mat.shape[-1] != n):
        return None
    finite = ~(np.isnan(mat).any() or np.isposinf(mat).any())
    masked = np.isneginf(mat).any()
    # (a mask never covers a whole matrix of a single heatmap: then nothing is shown)
    return mat if finite and not (masked and np.isneginf(mat).all()) else None


def figure_png(fig: dict, dpi: int = 90) -> bytes:
    """The PNG of one of :func:`check_figures`' dicts (one heatmap per head for [H, L, S])."""
    mat = np.asarray(fig["matrix"], dtype=np.float64)
    if mat.ndim == 3:
        return png_bytes(plot_heads(mat, fig["labels"], title=fig["title"],
                                    value_label=fig["value_label"]), dpi)
    return png_bytes(plot_attention(mat, fig["labels"], title=fig["title"],
                                    value_label=fig["value_label"]), dpi)


def png_bytes(fig: Figure, dpi: int = 90) -> bytes:
    """``fig`` rendered once as PNG bytes."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def show_figure(fig: Figure, dpi: int = 90, alt: str | None = None) -> None:
    """Display ``fig`` in a notebook as a PNG (with ``alt`` as its text alternative).

    The lesson never imports pyplot, so IPython's inline backend has not
    registered a display formatter for matplotlib Figures, and ``display(fig)``
    would show only its text repr. Rendering the PNG here works with any
    backend. Nothing is returned, so a call can end a cell without an echo.
    """
    show_png(png_bytes(fig, dpi), alt)


def show_png(data: bytes, alt: str | None = None) -> None:
    from IPython.display import Image, display

    display(Image(data=data, format="png", alt=alt))


def show_attention(tensor, tokens=None, **kwargs):
    """Display :func:`plot_attention` of ``tensor`` in a notebook, if it can be drawn.

    For check cells: a tensor that is missing, of another shape or with
    NaN/inf draws nothing (the check above it has already said why), so the
    cell never fails on the plot. Returns the Figure or None.
    """
    mat = drawable(tensor, tokens)
    if mat is None:
        return None
    fig = plot_attention(mat, tokens, **kwargs)
    show_figure(fig, alt=f"Heatmap: {kwargs.get('title') or 'attention weights'}")
    return fig
