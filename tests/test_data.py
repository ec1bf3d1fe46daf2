"""The shipped example data: checksums, regeneration, loader."""

import hashlib

import numpy as np
import pytest
import torch

from src import data as D


def test_files_match_recorded_checksums():
    recorded = dict(
        reversed(line.split("  ")) for line in
        (D.DATA_DIR / D.CHECKSUM_FILE).read_text().splitlines()
    )
    assert sorted(recorded) == sorted(D.DATA_FILES)
    for name, digest in recorded.items():
        actual = hashlib.sha256((D.DATA_DIR / name).read_bytes()).hexdigest()
        assert actual == digest, f"data/{name} differs from SHA256SUMS: run `make data`"


def test_make_data_regenerates_byte_identically(tmp_path):
    D.write_data_files(tmp_path)
    for name in (*D.DATA_FILES, D.CHECKSUM_FILE):
        assert (tmp_path / name).read_bytes() == (D.DATA_DIR / name).read_bytes(), name


def test_tokenization_and_vocabulary():
    arrays = D.load_arrays()
    assert arrays["tokens"] == ["The", "cat", "sat", "on", "the", "mat"]
    assert arrays["vocab"] == {"the": 0, "cat": 1, "sat": 2, "on": 3, "mat": 4}
    assert arrays["ids"] == [0, 1, 2, 3, 0, 4]
    assert D.tokenize(D.PROMPT_EXAMPLE) == arrays["tokens"]
    assert D.encode(D.tokenize("the mat sat"), arrays["vocab"]) == [0, 4, 2]


def test_tokenizer_errors():
    with pytest.raises(ValueError, match="not in the vocabulary"):
        D.encode(["dog"], {"the": 0})
    with pytest.raises(ValueError, match="expected a string"):
        D.tokenize(None)
    with pytest.raises(ValueError, match="at least one token"):
        D.tokenize("   ")


def test_arrays_shapes_dtypes_and_init_ranges():
    a = D.load_arrays()
    assert a["x"].shape == (1, 6, 64) and a["x"].dtype == np.float32
    assert a["embeddings"].shape == (5, 64)
    # "The" and "the" share an embedding: no positional encoding is added.
    np.testing.assert_array_equal(a["x"][0, 0], a["x"][0, 4])
    for name in "qkv":
        w, b = a[f"w_{name}"], a[f"b_{name}"]
        assert w.shape == (64, 64) and b.shape == (64,) and w.dtype == np.float32
        # nn.Linear's init range U(-1/sqrt(64), 1/sqrt(64)), and it is used
        assert np.abs(w).max() <= 0.125 and np.abs(w).max() > 0.12
    assert not np.array_equal(a["w_q"], a["w_k"])


def test_load_example_gives_linear_layers_with_shipped_weights():
    ex = D.load_example()
    a = D.load_arrays()
    assert ex.x.shape == (1, 6, 64) and ex.x.dtype == torch.float32
    for name, layer in (("q", ex.q_proj), ("k", ex.k_proj), ("v", ex.v_proj)):
        assert isinstance(layer, torch.nn.Linear)
        assert (layer.in_features, layer.out_features) == (64, 64)
        np.testing.assert_array_equal(layer.weight.detach().numpy(), a[f"w_{name}"])
        with torch.no_grad():
            np.testing.assert_allclose(layer(ex.x).numpy(),
                                       a["x"] @ a[f"w_{name}"].T + a[f"b_{name}"],
                                       rtol=1e-5, atol=1e-6)


def test_the_two_the_rows_attend_identically():
    """The documented consequence of adding no positional encoding."""
    from src.attention import scaled_dot_product_attention

    a = D.load_arrays()
    q, k, v = (a["x"] @ a[f"w_{n}"].T + a[f"b_{n}"] for n in "qkv")
    _, w = scaled_dot_product_attention(q, k, v)
    # Equal up to float32 rounding: BLAS computes rows 0 and 4 in different tiles.
    np.testing.assert_allclose(w[0, 0], w[0, 4], rtol=1e-6)  # same query row
    np.testing.assert_allclose(w[0, :, 0], w[0, :, 4], rtol=1e-6)  # same weight on both keys
    pe = D.sinusoidal_positions(6)
    q, k, v = ((a["x"] + pe) @ a[f"w_{n}"].T + a[f"b_{n}"] for n in "qkv")
    _, w = scaled_dot_product_attention(q, k, v)
    assert not np.allclose(w[0, 0], w[0, 4], rtol=1e-3)


def test_sinusoidal_positions():
    pe = D.sinusoidal_positions(6, 64)
    assert pe.shape == (6, 64)
    np.testing.assert_allclose(pe[0, 0::2], 0.0)
    np.testing.assert_allclose(pe[0, 1::2], 1.0)
    with pytest.raises(ValueError, match="even d_model"):
        D.sinusoidal_positions(6, 7)


def test_lesson2_output_layer_is_a_seeded_linear_weight():
    """W_o (lesson 2) is nn.Linear(64, 64)'s weight drawn after the three projections from
    the same seed, stored transposed (merged @ W_o); its range says the init was used."""
    w_o = D.load_output()
    assert w_o.shape == (64, 64) and w_o.dtype == np.float32
    assert np.abs(w_o).max() <= 0.125 and np.abs(w_o).max() > 0.12
    torch.manual_seed(D.SEED)
    torch.nn.Embedding(5, 64)
    for _ in range(3):
        torch.nn.Linear(64, 64)
    np.testing.assert_array_equal(torch.nn.Linear(64, 64).weight.detach().T.numpy(), w_o)
