"""Multi-head self-attention as a PyTorch module.

Shape legend: B batch, H heads, L sequence length, d_model model width,
d_k = d_model / H per-head width.

``python -m src.self_attention`` runs one head on the cat example with the
shipped Q/K/V weights and saves attention_weights.png with token labels.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch
from torch import nn

__all__ = ["SelfAttention"]


class SelfAttention(nn.Module):
    """Multi-head self-attention with query/key/value/output projections.

    ``forward(x, mask=None) -> (output, attn_weights)`` with x (B, L, d_model),
    mask boolean broadcastable to (B, H, L, L) with True = takes part
    (PyTorch's convention; a (L, L) causal mask works as is), output
    (B, L, d_model) and attn_weights (B, H, L, L). A query whose keys are
    all masked gets zero weights and a zero head output, as in
    ``torch.nn.functional.scaled_dot_product_attention``.

    Args:
        d_model: model width; must be divisible by ``n_heads``.
        n_heads: number of heads H.
    """

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        for name, val in (("d_model", d_model), ("n_heads", n_heads)):
            if not isinstance(val, int) or isinstance(val, bool) or val < 1:
                raise ValueError(f"{name}: expected a positive integer, got {val!r}")
        if d_model % n_heads:
            raise ValueError(
                f"expected d_model divisible by n_heads, got d_model={d_model} "
                f"and n_heads={n_heads}"
            )
        self.d_model, self.n_heads = d_model, n_heads
        self.d_k = d_model // n_heads
        self.query = nn.Linear(d_model, d_model)
        self.key = nn.Linear(d_model, d_model)
        self.value = nn.Linear(d_model, d_model)
        self.output = nn.Linear(d_model, d_model)

    def _split(self, t: torch.Tensor) -> torch.Tensor:
        B, L, _ = t.shape
        return t.view(B, L, self.n_heads, self.d_k).transpose(1, 2)  # (B, H, L, d_k)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None):
        """Attend; see the class docstring for shapes."""
        if not isinstance(x, torch.Tensor) or x.ndim != 3 or x.shape[-1] != self.d_model:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(
                f"x: expected a tensor of shape (B, L, d_model={self.d_model}), got {got}"
            )
        B, L, _ = x.shape
        q = self._split(self.query(x))  # (B, H, L, d_k)
        k = self._split(self.key(x))  # (B, H, L, d_k)
        v = self._split(self.value(x))  # (B, H, L, d_k)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)  # (B, H, L, L)
        if mask is not None:
            if mask.dtype != torch.bool:
                raise ValueError(
                    f"mask: expected a boolean tensor (True = takes part), got {mask.dtype}"
                )
            try:
                mask = torch.broadcast_to(mask, scores.shape)
            except RuntimeError:
                raise ValueError(
                    f"mask: expected a shape that broadcasts to (B, H, L, L) = "
                    f"{tuple(scores.shape)}, got {tuple(mask.shape)}"
                ) from None
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        if mask is not None:
            # torch.softmax gives NaN for a row that is all -inf; such a
            # query attends to nothing, so its weights are defined as 0.
            weights = weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)
        heads = weights @ v  # (B, H, L, d_k)
        merged = heads.transpose(1, 2).reshape(B, L, self.d_model)  # (B, L, d_model)
        return self.output(merged), weights


def _main(argv=None) -> Path:
    parser = argparse.ArgumentParser(description="Self-attention on the cat example.")
    parser.add_argument("--out", type=Path, default=Path("attention_weights.png"))
    args = parser.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    from src.data import load_example
    from src.visualizations import attention_table, plot_attention

    ex = load_example()
    attn = SelfAttention(64, 1)
    with torch.no_grad():  # the shipped projections; identity output layer
        for mine, shipped in ((attn.query, ex.q_proj), (attn.key, ex.k_proj),
                              (attn.value, ex.v_proj)):
            mine.load_state_dict(shipped.state_dict())
        attn.output.weight.copy_(torch.eye(64))
        attn.output.bias.zero_()
        _, weights = attn(ex.x)  # (1, 1, 6, 6)
    fig = plot_attention(weights[0, 0], ex.tokens,
                         title='Self-attention: "The cat sat on the mat"')
    fig.savefig(args.out, dpi=120, bbox_inches="tight")
    print(attention_table(weights[0, 0], ex.tokens))
    print(f"saved {args.out}")
    return args.out


if __name__ == "__main__":
    _main()
