"""The course's one example: "The cat sat on the mat", shipped as files.

Tokenization rule: split the text on whitespace; each piece is one token,
shown as written. Its id is the index of its lower-cased form in the
vocabulary, which lists the lower-cased words in order of first appearance.
So "The" and "the" are the same word and share id 0, and therefore share an
embedding.

No positional encodings are added to X (see data/README.md): the two "the"
tokens have identical embeddings, hence identical query, key and value rows,
so their attention rows are identical and every query gives them the same
weight. Attention alone is permutation-equivariant; telling the two apart
needs position information (:func:`sinusoidal_positions`).

The files in data/ are written by ``python -m src.data`` (``make data``)
from fixed seeds with torch==2.13.0, byte-identically on every run; loading
them needs no torch RNG, so every machine sees the same tensors.

Shape legend: V vocabulary size (5), L tokens (6), d_model (64).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

PROMPT_EXAMPLE = "The cat sat on the mat"
D_MODEL = 64
SEED = 0
DATA_DIR = Path(__file__).resolve().parent.parent / "data"
DATA_FILES = ("vocab.json", "embeddings.npy", "projections.npz", "output.npz")
PROJECTION_KEYS = ("w_q", "b_q", "w_k", "b_k", "w_v", "b_v")
CHECKSUM_FILE = "SHA256SUMS"

__all__ = [
    "D_MODEL", "DATA_DIR", "Example", "PROMPT_EXAMPLE", "encode", "load_arrays",
    "load_example", "load_output", "load_projections", "sinusoidal_positions", "tokenize",
    "write_data_files",
]


def tokenize(text: str) -> list[str]:
    """Split ``text`` on whitespace into tokens, kept as written."""
    if not isinstance(text, str):
        raise ValueError(f"expected a string of text, got {type(text).__name__}")
    tokens = text.split()
    if not tokens:
        raise ValueError("expected at least one token, got only whitespace")
    return tokens


def _vocab_from(tokens: list[str]) -> dict[str, int]:
    vocab: dict[str, int] = {}
    for tok in tokens:
        vocab.setdefault(tok.lower(), len(vocab))
    return vocab


def encode(tokens: list[str], vocab: dict[str, int]) -> list[int]:
    """Map tokens to ids by their lower-cased form; unknown words raise."""
    ids = []
    for tok in tokens:
        if tok.lower() not in vocab:
            raise ValueError(
                f"token {tok!r} is not in the vocabulary; expected one of "
                f"{sorted(vocab)}"
            )
        ids.append(vocab[tok.lower()])
    return ids


def sinusoidal_positions(length: int, d_model: int = D_MODEL) -> np.ndarray:
    """Sinusoidal positional encodings of "Attention Is All You Need".

    Not added to the shipped X; used to show what position changes.
    Shape legend: returns (L, d_model) float32, L = ``length``.
    """
    if length < 1 or d_model < 2 or d_model % 2:
        raise ValueError(
            f"expected length >= 1 and an even d_model >= 2, got length="
            f"{length}, d_model={d_model}"
        )
    pos = np.arange(length)[:, None]  # (L, 1)
    freq = np.exp(-np.log(10000.0) * np.arange(0, d_model, 2) / d_model)
    pe = np.zeros((length, d_model))
    pe[:, 0::2] = np.sin(pos * freq)
    pe[:, 1::2] = np.cos(pos * freq)
    return pe.astype(np.float32)


# ------------------------------------------------------------------ loading
def _read_vocab(data_dir: Path) -> dict:
    return json.loads((data_dir / "vocab.json").read_text(encoding="utf-8"))


def load_projections(data_dir: Path = DATA_DIR) -> dict[str, np.ndarray]:
    """The Q/K/V parameters: w_* (d_model, d_model), b_* (d_model,), float32."""
    with np.load(Path(data_dir) / "projections.npz") as npz:
        return {key: npz[key] for key in PROJECTION_KEYS}


def load_output(data_dir: Path = DATA_DIR) -> np.ndarray:
    """Lesson 2's output layer W_o, (H * d_k, d_model) = (64, 64) float32, applied as
    ``merged @ W_o`` (Vaswani et al.'s W^O; nn.Linear's weight is its transpose)."""
    with np.load(Path(data_dir) / "output.npz") as npz:
        return npz["w_o"]


def load_arrays(data_dir: Path = DATA_DIR) -> dict:
    """Everything as NumPy, without importing torch.

    Returns a dict with ``tokens`` (list of L str), ``ids`` (list of L int),
    ``vocab`` (dict word -> id), ``embeddings`` (V, d_model), ``x``
    (1, L, d_model) float32 and the projection parameters of
    :func:`load_projections`.
    """
    data_dir = Path(data_dir)
    meta = _read_vocab(data_dir)
    embeddings = np.load(data_dir / "embeddings.npy")
    ids = meta["ids"]
    return {
        "tokens": list(meta["tokens"]),
        "ids": list(ids),
        "vocab": dict(meta["vocab"]),
        "embeddings": embeddings,
        "x": embeddings[ids][None],  # (1, L, d_model)
        **load_projections(data_dir),
    }


@dataclass
class Example:
    """The cat example as torch objects (see :func:`load_example`)."""

    tokens: list
    ids: list
    vocab: dict
    x: "torch.Tensor"  # noqa: F821  (1, L, d_model) float32
    q_proj: "torch.nn.Linear"  # noqa: F821
    k_proj: "torch.nn.Linear"  # noqa: F821
    v_proj: "torch.nn.Linear"  # noqa: F821


def load_example(data_dir: Path = DATA_DIR) -> Example:
    """Tokens, ids, X (1, 6, 64) and three nn.Linear(64, 64) with the shipped weights."""
    import torch

    arrays = load_arrays(data_dir)

    def linear(name):
        layer = torch.nn.Linear(D_MODEL, D_MODEL)
        with torch.no_grad():
            layer.weight.copy_(torch.from_numpy(arrays[f"w_{name}"]))
            layer.bias.copy_(torch.from_numpy(arrays[f"b_{name}"]))
        return layer

    return Example(
        tokens=arrays["tokens"], ids=arrays["ids"], vocab=arrays["vocab"],
        x=torch.from_numpy(arrays["x"].copy()),
        q_proj=linear("q"), k_proj=linear("k"), v_proj=linear("v"),
    )


# --------------------------------------------------------------- generating
def _npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.ascontiguousarray(arr), allow_pickle=False)
    return buf.getvalue()


def _npz_bytes(arrays: dict) -> bytes:
    """An .npz that np.load reads, with fixed zip timestamps (np.savez
    stamps the current time, so its files differ on every run)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for key, arr in arrays.items():
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            zf.writestr(info, _npy_bytes(arr))
    return buf.getvalue()


def _generate() -> dict[str, bytes]:
    """Contents of every data file, made from SEED with torch's own init."""
    import torch

    tokens = tokenize(PROMPT_EXAMPLE)
    vocab = _vocab_from(tokens)
    ids = encode(tokens, vocab)
    # The real layers initialise themselves: nn.Embedding draws N(0, 1);
    # nn.Linear draws weight and bias from U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
    torch.manual_seed(SEED)
    embeddings = torch.nn.Embedding(len(vocab), D_MODEL).weight.detach()
    params = {}
    for name in ("q", "k", "v"):
        layer = torch.nn.Linear(D_MODEL, D_MODEL)
        params[f"w_{name}"] = layer.weight.detach()
        params[f"b_{name}"] = layer.bias.detach()
    # Lesson 2's output layer: a fourth nn.Linear drawn after the three (the stream above is
    # unchanged, so the first files stay byte-identical); its weight [out, in] is stored
    # transposed, as W_o in merged @ W_o. Its bias is not used (the lesson's W_o is 64x64).
    w_o = torch.nn.Linear(D_MODEL, D_MODEL).weight.detach().T.contiguous()
    meta = {
        "prompt": PROMPT_EXAMPLE,
        "tokenization": "split on whitespace; id = index of the lower-cased "
                        "token in 'vocab' (words in order of first appearance)",
        "positional_encoding": "none (see data/README.md)",
        "seed": SEED,
        "tokens": tokens,
        "ids": ids,
        "vocab": vocab,
    }
    return {
        "vocab.json": (json.dumps(meta, indent=2) + "\n").encode("utf-8"),
        "embeddings.npy": _npy_bytes(embeddings.numpy().astype(np.float32)),
        "projections.npz": _npz_bytes(
            {k: params[k].numpy().astype(np.float32) for k in PROJECTION_KEYS}),
        "output.npz": _npz_bytes({"w_o": w_o.numpy().astype(np.float32)}),
    }


def write_data_files(out_dir: Path = DATA_DIR) -> dict[str, str]:
    """Write every data file and SHA256SUMS; return {file: sha256}."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sums = {}
    for name, content in _generate().items():
        (out_dir / name).write_bytes(content)
        sums[name] = hashlib.sha256(content).hexdigest()
    # sha256sum's format, so `sha256sum -c SHA256SUMS` checks them too.
    lines = "".join(f"{sums[n]}  {n}\n" for n in DATA_FILES)
    (out_dir / CHECKSUM_FILE).write_text(lines, encoding="utf-8")
    return sums


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DATA_DIR,
                        help="directory to write (default: data/)")
    args = parser.parse_args(argv)
    for name, digest in write_data_files(args.out).items():
        print(f"{digest}  {args.out / name}")


if __name__ == "__main__":
    main()
