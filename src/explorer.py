"""An interactive attention explorer for the lesson (ipywidgets + matplotlib, offline).

Choose how the scores are scaled: by 1/sqrt(d_k), not at all, or by a
temperature T from a slider (weights = softmax(Q K^T / T); 1/sqrt(d_k) is the
temperature T = sqrt(d_k) = 8, "none" is T = 1). Pick a query token: the
heatmap marks its row, a bar chart shows how it spreads its attention over the
keys, and a text readout names the key each query attends to most. A menu
switches between lesson 1's random layer and the heads of the small model trained
for real by ``src/train.py`` (4 heads of d_k = 16 under the causal mask, on the
same sentence). Everything is drawn by matplotlib in the kernel and shown by the
widgets that ship with JupyterLab: no CDN, no network.

Shape legend: L queries (rows), S keys (columns), d_k query/key size.
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from src.attention import softmax
from src.visualizations import CMAP, _heatmap, attention_table, new_figure, png_bytes

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["MODES", "RANDOM", "AttentionExplorer", "ExplorerState", "explore_state"]

#: (label, mode) pairs of the scale control.
MODES = (("1/√d_k", "sqrt"), ("none", "none"), ("temperature", "temperature"))
#: The weights menu's value for lesson 1's layer (a trained head's value is its index).
RANDOM = "random"


@dataclass
class ExplorerState:
    """What the explorer shows for one setting of its controls."""

    divisor: float  # the scores are Q K^T / divisor
    weights: np.ndarray  # (L, S), rows sum to 1
    query_index: int
    row: np.ndarray  # (S,): weights of the chosen query
    readout: str  # text: the key each query attends to most


def explore_state(raw_scores, d_k: int, mode: str = "sqrt", temperature: float = 8.0,
                  query_index: int = 0, tokens=None, mask=None) -> ExplorerState:
    """The explorer's state for unscaled scores ``raw_scores`` = Q K^T, (L, S); ``mask``
    (L, S) boolean, True = the key takes part (a masked key gets weight 0)."""
    raw = np.asarray(raw_scores, dtype=np.float64)
    if raw.ndim != 2:
        raise ValueError(f"raw_scores: expected shape (L, S), got {raw.shape}")
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype != bool or mask.shape != raw.shape:
            raise ValueError(f"mask: expected a boolean array of shape {raw.shape} (True = "
                             f"takes part), got {mask.dtype} of shape {mask.shape}")
    if mode == "sqrt":
        divisor = math.sqrt(d_k)
    elif mode == "none":
        divisor = 1.0
    elif mode == "temperature":
        if not temperature > 0:
            raise ValueError(f"temperature: expected a positive number, got {temperature}")
        divisor = float(temperature)
    else:
        raise ValueError(f"mode: expected one of {[m for _, m in MODES]}, got {mode!r}")
    if not 0 <= query_index < raw.shape[0]:
        raise ValueError(f"query_index: expected 0..{raw.shape[0] - 1}, got {query_index}")
    scores = raw / divisor
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)  # the library's softmax gives them 0
    weights = softmax(scores, axis=-1)
    return ExplorerState(divisor, weights, query_index, weights[query_index],
                         attention_table(weights, tokens))


def _as_2d(tensor):
    """(L, d) NumPy float64 from a torch tensor or array of shape (L, d) or (1, L, d)."""
    if tensor is None:
        return None
    if hasattr(tensor, "detach"):
        tensor = tensor.detach().cpu().numpy()
    try:
        arr = np.asarray(tensor, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    if arr.ndim == 3 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != 2 or not np.isfinite(arr).all():
        return None
    return arr


class AttentionExplorer:
    """The widget: ``display(AttentionExplorer(query, key, tokens))``, or make it the
    last line of a cell.

    ``query`` and ``key`` ([1, L, d_k] or [L, d_k], torch or NumPy) default to the
    lesson's reference projections of the shipped data; a missing or unusable
    pair (None, NaN, wrong shape) falls back to them as well. The weights menu
    switches to a head of the trained model (``data/trained_heads.npz``) and back.
    """

    def __init__(self, query=None, key=None, tokens=None):
        import ipywidgets as w

        q, k = _as_2d(query), _as_2d(key)
        self.source = "your query and key"
        if q is None or k is None or q.shape[1] != k.shape[1]:
            from src.data import load_arrays

            data = load_arrays()
            x = data["x"][0].astype(np.float64)  # (L, d_model)
            q = x @ data["w_q"].T + data["b_q"]
            k = x @ data["w_k"].T + data["b_k"]
            tokens = tokens or data["tokens"]
            self.source = "the reference query and key"
        tokens = list(tokens) if tokens is not None else [str(i) for i in range(len(q))]
        # Each view: (raw scores Q K^T (L, S), d_k, tokens, mask or None, source).
        self.views = {RANDOM: (q @ k.T, k.shape[1], tokens, None, self.source)}
        self.trained_error = self._add_trained_heads()
        self.raw, self.d_k, self.tokens, self.mask, _ = self.views[RANDOM]
        self.figure = None
        self._switching = False

        self.weights = w.Dropdown(
            options=[("lesson 1: random layer", RANDOM)] + [
                (f"trained model: head {h}", h) for h in self.views if h != RANDOM],
            value=RANDOM, description="weights")
        self.scale = w.ToggleButtons(options=MODES, value="sqrt", description="scale")
        self.temperature = w.FloatSlider(value=math.sqrt(self.d_k), min=0.25, max=32.0,
                                         step=0.25, description="temperature T",
                                         continuous_update=False, disabled=True,
                                         style={"description_width": "initial"})
        self.query = w.Dropdown(options=self._query_options(), value=0, description="query")
        self.plot = w.Output()
        self.readout = w.HTML()
        self.title = w.HTML()
        for control in (self.scale, self.temperature, self.query):
            control.observe(self._on_change, names="value")
        self.weights.observe(self._on_weights, names="value")
        self.widget = w.VBox([self.title, self.weights, w.HBox([self.scale, self.temperature]),
                              self.query, self.plot, self.readout])
        self.update()

    def _add_trained_heads(self) -> str | None:
        """Add a view per head of the trained model on the lesson's sentence; returns why
        there are none (no weights file, say), or None."""
        try:
            from src.data import PROMPT_EXAMPLE, tokenize
            from src.train import load_model, queries_keys

            sentence = tokenize(PROMPT_EXAMPLE)
            q, k = queries_keys(load_model(), sentence)  # (H, L, d_k) each
        except (OSError, ValueError, KeyError) as exc:
            return f"no trained heads: {exc}"
        causal = np.tril(np.ones((len(sentence), len(sentence)), dtype=bool))  # (L, S)
        for h in range(q.shape[0]):
            self.views[h] = (q[h] @ k[h].T, k.shape[-1], sentence, causal,
                             f"trained model, head {h}, causal mask")
        return None

    def _query_options(self):
        return [(f"{i}: {t}", i) for i, t in enumerate(self.tokens)]

    def state(self) -> ExplorerState:
        return explore_state(self.raw, self.d_k, self.scale.value, self.temperature.value,
                             self.query.value, self.tokens, self.mask)

    def _on_change(self, _change):
        if not self._switching:
            self.update()

    def _on_weights(self, change):
        """Show another layer's head: its scores, d_k, tokens and mask."""
        self.raw, self.d_k, tokens, self.mask, _ = self.views[change["new"]]
        if tokens != self.tokens:
            # New options reset the query menu; redraw once, after both changed.
            self._switching = True
            try:
                self.tokens = tokens
                self.query.options = self._query_options()
                self.query.value = 0
            finally:
                self._switching = False
        self.update()

    def update(self) -> ExplorerState:
        """Recompute and redraw for the current controls."""
        self.temperature.disabled = self.scale.value != "temperature"
        source = self.views[self.weights.value][-1]
        note = f"; {self.trained_error}" if self.trained_error else ""
        self.title.value = (f"<b>Attention explorer</b> ({source}, d_k = {self.d_k}"
                            f"{note})")
        st = self.state()
        self.figure = self.draw(st)
        self.readout.value = (f"<pre>scores = Q·Kᵀ / {st.divisor:g}\n\n{st.readout}</pre>")
        # Set the Output widget's state directly, in one assignment: `with self.plot:`
        # routes the display through the frontend, and without one (nbval, nbclient)
        # it lands in the cell; clearing and appending would draw two images a moment.
        png = base64.b64encode(png_bytes(self.figure)).decode("ascii")
        self.plot.outputs = ({"output_type": "display_data", "metadata": {},
                              "data": {"image/png": png,
                                       "text/plain": "attention explorer figure"}},)
        return st

    def draw(self, st: ExplorerState) -> Figure:
        """Heatmap with the chosen row marked, and a bar chart of that row."""
        from matplotlib.patches import Rectangle

        fig = new_figure(figsize=(10, 4.2))
        fig.subplots_adjust(left=0.08, right=0.98, bottom=0.2, top=0.88, wspace=0.35)
        left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.1, 1]})
        im = _heatmap(left, st.weights, self.tokens, self.tokens, 0.0, 1.0, True, CMAP)
        fig.colorbar(im, ax=left, label="attention weight")
        left.add_patch(Rectangle((-0.5, st.query_index - 0.5), len(self.tokens), 1,
                                 fill=False, edgecolor="#d62728", linewidth=2.5))
        left.set_title(f"weights = softmax(Q·Kᵀ / {st.divisor:g})")
        bars = right.bar(range(len(st.row)), st.row, color="#4477aa")
        bars[int(np.argmax(st.row))].set_color("#d62728")
        right.set_xticks(range(len(self.tokens)), labels=self.tokens, rotation=45, ha="right")
        right.set_ylim(0, 1)
        # uniform over the keys this query may attend to: the level of "no preference"
        allowed = len(st.row) if self.mask is None else int(self.mask[st.query_index].sum())
        right.axhline(1 / allowed, color="grey", ls=":", lw=0.8)
        right.set_ylabel("attention weight")
        right.set_title(f"query '{self.tokens[st.query_index]}' attends to")
        return fig

    def _repr_mimebundle_(self, **kwargs):
        # The widget view for JupyterLab; a short text elsewhere (and for nbval), not
        # the Output widget's repr with its base64 PNG.
        data = self.widget._repr_mimebundle_(**kwargs)
        source = self.views[self.weights.value][-1]
        data["text/plain"] = (f"AttentionExplorer({source}, d_k={self.d_k}): "
                              "run the cell in JupyterLab to interact")
        return data
