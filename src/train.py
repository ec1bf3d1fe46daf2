"""A tiny transformer trained for real on toy sentences, and what its heads measurably do.

``python -m src.train`` (``make train``) trains it in about 15 seconds on one CPU core,
printing the loss every 100 steps, then writes ``data/trained_heads.npz``, its checksum in
``data/TRAINED_SHA256SUMS`` and a plot of the loss (``train_loss.png``).

**The toy corpus.** Every sentence has the lesson's form, six words: determiner, animal,
verb, preposition, determiner, place ("The cat sat on the mat"). The grammar below allows
912 sentences: 8 animals (singular or plural; "a" only before a singular), 4 verbs each, 4
prepositions, and 2 places for each animal and preposition (a cat sits *on* a mat or a
sofa, a bird on a roof or a wall); the second determiner is "the", or "its"/"their"
(agreeing with the subject) before a place the animal owns. So the last word depends on
the subject *and* the preposition, and "its"/"their" on the subject's number: predicting
them needs attention to earlier words. The lesson's sentence and a fifth of the others,
drawn with the seed, are held out; the model trains on the rest, each equally likely.

**The model.** Token embeddings plus the sinusoidal positions of ``src.data``, one block
(LayerNorm, the course's own ``SelfAttention(64, 4)`` with the causal mask, a residual
connection, LayerNorm, a 128-unit ReLU MLP, a residual connection), a final LayerNorm and
a linear layer to the vocabulary: next-word prediction with cross-entropy, AdamW, seeded.

**What is measured.** :func:`head_profile` gives each head's share of attention of the
kinds in :data:`MEASURES`; :data:`STATED` holds the shares the lesson states for the
shipped weights, and :data:`TOLERANCE` how far a retrained model may be from them.

Shape legend: B sentences (batch), L tokens (6), V vocabulary (80), d_model (64), H heads
(4), d_k = d_model / H (16), N_l layers (1).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import torch
from torch import nn

from src.data import (
    DATA_DIR,
    PROMPT_EXAMPLE,
    _npz_bytes,
    encode,
    load_arrays,
    load_example,
    sinusoidal_positions,
    tokenize,
)
from src.self_attention import SelfAttention

__all__ = [
    "MEASURES", "STATED", "TOLERANCE", "TinyTransformer", "corpus", "describe",
    "encode_sentences", "head_profile", "held_out", "load_model", "lowest_loss", "queries_keys",
    "random_layer_weights", "roles", "sentence_weights", "train", "vocabulary",
]

# ------------------------------------------------------------------ the toy corpus
#: animal -> its plural
PLURAL = {"cat": "cats", "dog": "dogs", "bird": "birds", "mouse": "mice", "fox": "foxes",
          "hen": "hens", "frog": "frogs", "bee": "bees"}
#: animal -> the verbs it takes
VERBS = {"cat": ("sat", "slept", "hid", "lay"), "dog": ("sat", "slept", "ran", "lay"),
         "bird": ("sat", "slept", "flew", "sang"), "mouse": ("sat", "ran", "hid", "slept"),
         "fox": ("sat", "ran", "hid", "slept"), "hen": ("sat", "ran", "slept", "lay"),
         "frog": ("sat", "hid", "sang", "slept"), "bee": ("sat", "flew", "hid", "slept")}
#: animal -> preposition -> its two places
PLACES = {
    "cat": {"on": ("mat", "sofa"), "in": ("basket", "box"), "under": ("table", "bed"),
            "by": ("fire", "door")},
    "dog": {"on": ("rug", "lawn"), "in": ("kennel", "yard"), "under": ("porch", "table"),
            "by": ("gate", "door")},
    "bird": {"on": ("roof", "wall"), "in": ("nest", "cage"), "under": ("eaves", "bridge"),
             "by": ("window", "pond")},
    "mouse": {"on": ("shelf", "step"), "in": ("hole", "wall"), "under": ("floor", "stove"),
              "by": ("cheese", "door")},
    "fox": {"on": ("hill", "log"), "in": ("den", "wood"), "under": ("hedge", "bush"),
            "by": ("stream", "gate")},
    "hen": {"on": ("perch", "fence"), "in": ("coop", "barn"), "under": ("cart", "bush"),
            "by": ("barn", "well")},
    "frog": {"on": ("lily", "log"), "in": ("pond", "reeds"), "under": ("leaf", "stone"),
             "by": ("stream", "well")},
    "bee": {"on": ("flower", "rose"), "in": ("hive", "garden"), "under": ("leaf", "eaves"),
            "by": ("window", "hive")},
}
#: places an animal owns: "its"/"their" may stand before them
OWNED = frozenset({"mat", "basket", "bed", "kennel", "nest", "cage", "hole", "den", "coop",
                   "perch", "hive"})
LENGTH = 6

# ------------------------------------------------------------------ training settings
SEED = 0
STEPS = 2000
BATCH = 128
LR = 1e-3
WEIGHT_DECAY = 0.01
HELD_OUT_SHARE = 0.2
D_MODEL, N_HEADS, N_LAYERS, D_MLP = 64, 4, 1, 128
LOG_EVERY = 100
WEIGHTS_FILE = "trained_heads.npz"
CHECKSUM_FILE = "TRAINED_SHA256SUMS"
PLOT_FILE = Path("train_loss.png")


def corpus() -> list[tuple[str, ...]]:
    """Every sentence the grammar allows (912), as tuples of 6 lower-case words."""
    out = []
    for animal, verbs in VERBS.items():
        for plural in (False, True):
            subject = PLURAL[animal] if plural else animal
            firsts = ("the",) if plural else ("the", "a")
            for verb in verbs:
                for prep, places in PLACES[animal].items():
                    for place in places:
                        own = ("their" if plural else "its",) if place in OWNED else ()
                        for first in firsts:
                            for second in ("the", *own):
                                out.append((first, subject, verb, prep, second, place))
    return out


def vocabulary() -> dict[str, int]:
    """word -> id: the lesson's vocabulary first, with its ids (data/vocab.json), then the
    corpus's other words in order of first appearance."""
    vocab = dict(load_arrays()["vocab"])
    for sentence in corpus():
        for word in sentence:
            vocab.setdefault(word, len(vocab))
    return vocab


def held_out(seed: int = SEED) -> tuple[list, list]:
    """(training sentences, held-out sentences): the lesson's sentence and a fifth of the
    others, drawn with ``seed``, are held out."""
    lesson = tuple(w.lower() for w in tokenize(PROMPT_EXAMPLE))
    others = [s for s in corpus() if s != lesson]
    order = np.random.default_rng(seed).permutation(len(others))
    n_held = round(HELD_OUT_SHARE * len(others))
    return ([others[i] for i in sorted(order[n_held:])],
            [lesson] + [others[i] for i in sorted(order[:n_held])])


def lowest_loss(sentences) -> float:
    """The lowest mean cross-entropy any model can reach on ``sentences`` (each equally
    likely): where several next words are allowed, the choice is random, so the best
    prediction is their frequency after the same beginning."""
    total = 0.0
    for t in range(1, LENGTH):
        after = defaultdict(Counter)
        for s in sentences:
            after[s[:t]][s[t]] += 1
        for counts in after.values():
            n = sum(counts.values())
            total -= sum(c * math.log(c / n) for c in counts.values())
    return total / (len(sentences) * (LENGTH - 1))


# ------------------------------------------------------------------ the model
class Block(nn.Module):
    """LayerNorm, causal self-attention, residual; LayerNorm, ReLU MLP, residual.

    ``forward(x, mask) -> (x, weights)``: x (B, L, d_model), mask (L, L) boolean (True =
    may attend), weights (B, H, L, L).
    """

    def __init__(self, d_model: int, n_heads: int, d_mlp: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = SelfAttention(d_model, n_heads)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_mlp), nn.ReLU(), nn.Linear(d_mlp, d_model))

    def forward(self, x, mask):
        out, weights = self.attn(self.norm1(x), mask)
        x = x + out
        return x + self.mlp(self.norm2(x)), weights


class TinyTransformer(nn.Module):
    """A next-word model: embeddings + sinusoidal positions, ``n_layers`` blocks, a final
    LayerNorm and a linear layer to the vocabulary.

    ``forward(ids) -> (logits, weights)`` with ids (B, L) integer token ids, L <=
    ``max_len``; logits (B, L, V): row i predicts the word after token i; weights (B, N_l,
    H, L, L): each layer's attention weights under the causal mask.
    """

    def __init__(self, vocab_size: int, d_model: int = D_MODEL, n_heads: int = N_HEADS,
                 n_layers: int = N_LAYERS, d_mlp: int = D_MLP, max_len: int = LENGTH):
        super().__init__()
        self.config = dict(vocab_size=vocab_size, d_model=d_model, n_heads=n_heads,
                           n_layers=n_layers, d_mlp=d_mlp, max_len=max_len)
        self.embed = nn.Embedding(vocab_size, d_model)
        # GPT-2's small embedding init: next to the unit-size positions, the heads first
        # see where words are. With nn.Embedding's N(0, 1), trial runs often ended with
        # every head attending to itself (and above the lowest loss), depending on the seed.
        nn.init.normal_(self.embed.weight, std=0.02)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, d_mlp) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)
        self.unembed = nn.Linear(d_model, vocab_size)
        self.register_buffer("positions", torch.from_numpy(
            sinusoidal_positions(max_len, d_model)), persistent=False)  # (max_len, d_model)

    def _check(self, ids):
        if not isinstance(ids, torch.Tensor) or ids.ndim != 2 or ids.dtype != torch.long:
            got = (f"{ids.dtype} of shape {tuple(ids.shape)}" if isinstance(ids, torch.Tensor)
                   else type(ids).__name__)
            raise ValueError(f"ids: expected a (B, L) tensor of token ids (torch.long), "
                             f"got {got}")
        if not 1 <= ids.shape[1] <= self.config["max_len"]:
            raise ValueError(f"ids: expected 1 to {self.config['max_len']} tokens per "
                             f"sentence, got {ids.shape[1]}")
        if ids.numel() and not 0 <= int(ids.min()) <= int(ids.max()) < self.config[
                "vocab_size"]:
            raise ValueError(f"ids: expected ids in 0..{self.config['vocab_size'] - 1}, got "
                             f"{int(ids.min())}..{int(ids.max())}")

    def layer_inputs(self, ids):
        """The residual stream entering each block: N_l + 1 tensors (B, L, d_model), the
        last one leaving the last block; and each block's weights (B, H, L, L)."""
        self._check(ids)
        L = ids.shape[1]
        x = self.embed(ids) + self.positions[:L]  # (B, L, d_model)
        mask = torch.ones(L, L, dtype=torch.bool).tril()  # (L, L): True = may attend
        streams, weights = [x], []
        for block in self.blocks:
            x, w = block(x, mask)
            streams.append(x)
            weights.append(w)
        return streams, weights

    def forward(self, ids):
        streams, weights = self.layer_inputs(ids)
        return self.unembed(self.norm(streams[-1])), torch.stack(weights, dim=1)


def encode_sentences(sentences, vocab) -> torch.Tensor:
    """(B, L) long ids of sentences given as lists of words (any case)."""
    return torch.tensor([encode(list(s), vocab) for s in sentences], dtype=torch.long)


# ------------------------------------------------------------------ saving and loading
def _weights_bytes(model: TinyTransformer, vocab: dict, losses) -> bytes:
    arrays = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    arrays["config"] = np.array([json.dumps(model.config, sort_keys=True)])  # (1,) str
    arrays["vocab"] = np.array(sorted(vocab, key=vocab.get))
    arrays["loss"] = np.asarray(losses, dtype=np.float32)  # (steps,): the training loss
    return _npz_bytes(arrays)


def load_model(path: Path | str = DATA_DIR / WEIGHTS_FILE) -> TinyTransformer:
    """The trained model from ``path`` (default: the shipped ``data/trained_heads.npz``),
    in eval mode, with ``.vocab`` (word -> id) and ``.losses`` (the training loss by step)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: expected the trained weights there; run `make "
                                "train` to make them")
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    try:
        config = json.loads(arrays.pop("config").item())  # (1,) str
        words = [str(w) for w in arrays.pop("vocab")]
        losses = arrays.pop("loss")
    except KeyError as exc:
        raise ValueError(f"{path}: expected the keys config, vocab and loss, missing "
                         f"{exc}") from None
    with torch.random.fork_rng(devices=[]):  # (init draws; the caller's stream stays)
        model = TinyTransformer(**config)
    expected = set(model.state_dict())
    if set(arrays) != expected:
        raise ValueError(f"{path}: expected the parameters {sorted(expected)}, got "
                         f"{sorted(arrays)}")
    model.load_state_dict({k: torch.from_numpy(v) for k, v in arrays.items()})
    model.vocab = {w: i for i, w in enumerate(words)}
    model.losses = losses
    return model.eval()


# ------------------------------------------------------------------ what the heads do
#: What each head's profile measures: the share of its attention weight, with the queries
#: it is averaged over. Queries 1-4 are the words whose next word training predicts; the
#: first word can only attend to itself, and training never predicts after the last.
MEASURES = {
    "subject": "from the words after the subject noun (verb, preposition, second "
               "determiner) to the subject noun",
    "verb": "from the words after the verb (preposition, second determiner) to the verb",
    "preposition": "from the second determiner to the preposition",
    "self": "from queries 1-4 to themselves",
    "previous": "from queries 1-4 to the word just before",
    "first": "from queries 1-4 to the first word",
}
#: The shares the lesson states for the shipped weights (rounded): head -> measure ->
#: (on the lesson's sentence, mean over the held-out sentences). Asserted by
#: tests/test_train.py, on the shipped weights to the rounding, on a model retrained by
#: ``make test-train`` within TOLERANCE.
STATED = {
    0: {"verb": (0.72, 0.60), "self": (0.56, 0.56)},
    1: {"preposition": (1.00, 0.94), "self": (0.75, 0.74)},
    2: {"subject": (0.99, 0.93)},
    3: {"preposition": (1.00, 1.00), "self": (0.75, 0.75)},
}
#: How far (absolute share) a retrained model's stated shares may be from STATED. Floats
#: that differ in the last bit on another CPU send training down a slightly different
#: path: in 8 retrainings whose initial weights were nudged by 1e-7 to 1e-5 (a stand-in
#: for that), the stated shares moved by at most 0.17 (head 0's verb and head 1's
#: preposition, on the held-out sentences); the others by at most 0.06.
TOLERANCE = 0.2
#: A head is described by the measures in which it reaches this share on both sets.
THRESHOLD = 0.5


def roles(tokens) -> dict[str, int]:
    """Positions of the subject, verb, preposition and second determiner in a sentence of
    the corpus's form; ValueError for any other sentence."""
    words = [str(t).lower() for t in tokens]
    subjects = set(PLURAL) | set(PLURAL.values())
    preps = {p for places in PLACES.values() for p in places}
    verbs = {v for vs in VERBS.values() for v in vs}
    places = {w for by_prep in PLACES.values() for ws in by_prep.values() for w in ws}
    forms = (("a", "the"), subjects, verbs, preps, ("the", "its", "their"), places)
    if len(words) != LENGTH or any(w not in f for w, f in zip(words, forms)):
        raise ValueError("tokens: expected a sentence of the toy corpus's form, determiner "
                         f"animal verb preposition determiner place, got {list(tokens)}")
    return {"subject": 1, "verb": 2, "preposition": 3, "determiner": 4}


def head_profile(weights, tokens) -> dict[str, np.ndarray]:
    """Each head's shares of :data:`MEASURES` (values in [0, 1]).

    Shape legend: weights (H, L, L) for one sentence with ``tokens`` its L words, or
    (B, H, L, L) for B sentences with ``tokens`` a list of B word lists (the shares are
    then means over the sentences); returns measure -> (H,) float64.
    """
    if hasattr(weights, "detach"):
        weights = weights.detach().cpu().numpy()
    w = np.asarray(weights, dtype=np.float64)
    given = list(w.shape)
    if w.ndim == 3:
        w, tokens = w[None], [tokens]
    if w.ndim != 4 or w.shape[-2:] != (LENGTH, LENGTH) or len(tokens) != w.shape[0]:
        raise ValueError(f"weights: expected (H, {LENGTH}, {LENGTH}) with one sentence's "
                         f"tokens, or (B, H, {LENGTH}, {LENGTH}) with B sentences, got "
                         f"{given} and {len(tokens)} sentence(s)")
    pos = roles(tokens[0])
    for t in tokens[1:]:
        roles(t)
    q = np.arange(1, LENGTH - 1)  # queries 1-4
    after_subject = np.arange(pos["subject"] + 1, LENGTH - 1)  # the measured queries after it
    after_verb = np.arange(pos["verb"] + 1, LENGTH - 1)
    shares = {  # measure -> (B, H)
        "subject": w[:, :, after_subject, pos["subject"]].mean(axis=-1),
        "verb": w[:, :, after_verb, pos["verb"]].mean(axis=-1),
        "preposition": w[:, :, pos["determiner"], pos["preposition"]],
        "self": w[:, :, q, q].mean(axis=-1),
        "previous": w[:, :, q, q - 1].mean(axis=-1),
        "first": w[:, :, q, 0].mean(axis=-1),
    }
    return {k: v.mean(axis=0) for k, v in shares.items()}


def _check_layer(model, layer):
    if not isinstance(layer, int) or not 0 <= layer < len(model.blocks):
        raise ValueError(f"layer: expected 0 to {len(model.blocks) - 1}, got {layer!r}")


def sentence_weights(model: TinyTransformer, sentences, layer: int = 0) -> torch.Tensor:
    """Layer ``layer``'s attention weights: (H, L, L) for one sentence (a list of words),
    (B, H, L, L) for a list of B sentences."""
    if not sentences or isinstance(sentences, str):
        raise ValueError("sentences: expected a sentence (a list of words) or a list of "
                         f"sentences, got {sentences!r}")
    _check_layer(model, layer)
    one = isinstance(sentences[0], str)
    ids = encode_sentences([sentences] if one else sentences, model.vocab)
    with torch.no_grad():
        _, weights = model(ids)  # (B, N_l, H, L, L)
    return weights[0, layer] if one else weights[:, layer]


def queries_keys(model: TinyTransformer, tokens, layer: int = 0):
    """Layer ``layer``'s per-head queries and keys for one sentence, float64 NumPy:
    q, k (H, L, d_k); softmax(q k^T / sqrt(d_k)) under the causal mask is that layer's
    weights."""
    _check_layer(model, layer)
    ids = encode_sentences([tokens], model.vocab)
    block = model.blocks[layer]
    attn = block.attn
    with torch.no_grad():
        streams, _ = model.layer_inputs(ids)
        x = block.norm1(streams[layer])  # (1, L, d_model)
        q, k = attn._split(attn.query(x))[0], attn._split(attn.key(x))[0]  # (H, L, d_k)
    return q.double().numpy(), k.double().numpy()


def random_layer_weights(n_heads: int = 8) -> torch.Tensor:
    """Lesson 2's untrained layer on its sentence, for comparison: the course's
    ``SelfAttention(64, n_heads)`` with the shipped (random) Q/K/V projections, on the
    embeddings plus sinusoidal positions, under the causal mask; weights (H, L, L)."""
    # Making nn.Linear layers draws from torch's generator: leave the caller's untouched.
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        ex = load_example()
        layer = SelfAttention(ex.x.shape[-1], n_heads)
        for mine, shipped in ((layer.query, ex.q_proj), (layer.key, ex.k_proj),
                              (layer.value, ex.v_proj)):
            mine.load_state_dict(shipped.state_dict())
        x = ex.x + torch.from_numpy(sinusoidal_positions(len(ex.tokens)))  # (1, L, d_model)
        _, weights = layer(x, torch.ones(LENGTH, LENGTH, dtype=torch.bool).tril())
    return weights[0]


def measured(model: TinyTransformer | None = None) -> dict:
    """The profiles of the model's heads: {"lesson": ..., "held_out": ...}, each
    measure -> (H,) (see :func:`head_profile`)."""
    model = model or load_model()
    lesson = tokenize(PROMPT_EXAMPLE)
    _, held = held_out()
    return {"lesson": head_profile(sentence_weights(model, lesson), lesson),
            "held_out": head_profile(sentence_weights(model, held), held)}


def described(profiles: dict) -> dict:
    """head -> measure -> (lesson, held-out), rounded to 2 decimals, for the measures in
    which a head reaches THRESHOLD on both sets (the form of STATED)."""
    out = {}
    lesson, held = profiles["lesson"], profiles["held_out"]
    for h in range(len(lesson["self"])):
        found = {m: (round(float(lesson[m][h]), 2), round(float(held[m][h]), 2))
                 for m in MEASURES if min(lesson[m][h], held[m][h]) >= THRESHOLD}
        if found:
            out[h] = found
    return out


def describe(profiles: dict | None = None, model: TinyTransformer | None = None) -> str:
    """The lesson's text about the heads, made from measured ``profiles`` (default: of the
    shipped model): a table of every share, then each head's measures above THRESHOLD."""
    profiles = profiles or measured(model)
    lesson, held = profiles["lesson"], profiles["held_out"]
    n_held = len(held_out()[1])
    lines = [f"share of attention: on the sentence / mean over {n_held} held-out sentences",
             "        " + "".join(f"{m:>13}" for m in MEASURES)]
    for h in range(len(lesson["self"])):
        lines.append(f"head {h}  " + "".join(
            f"  {lesson[m][h]:.2f} / {held[m][h]:.2f}" for m in MEASURES))
    lines.append(f"measured at least {THRESHOLD} on both:")
    found = described(profiles)
    for h in range(len(lesson["self"])):
        parts = [f"{m} {a:.2f} / {b:.2f}" for m, (a, b) in found.get(h, {}).items()]
        lines.append(f"  head {h}: " + ("; ".join(parts) if parts else "none"))
    tokens = tokenize(PROMPT_EXAMPLE)
    untrained = head_profile(random_layer_weights(), tokens)
    lines.append("for comparison, lesson 2's random layer on the sentence, the largest share of "
                 "any of its 8 heads:")
    lines.append("  " + ", ".join(f"{m} {untrained[m].max():.2f}" for m in MEASURES))
    return "\n".join(lines)


# ------------------------------------------------------------------ training
def _loss(model, ids) -> torch.Tensor:
    logits, _ = model(ids[:, :-1])  # (B, L - 1, V): the last word predicts nothing
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                       ids[:, 1:].reshape(-1))


def train(out_dir: Path | str = DATA_DIR, plot: Path | str | None = PLOT_FILE,
          steps: int = STEPS, seed: int = SEED, log=print) -> TinyTransformer:
    """Train the model, write ``out_dir``/trained_heads.npz and its checksum file, save the
    loss plot to ``plot`` (None: no plot); returns the model. ``log`` gets each progress
    line."""
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps: expected a positive integer, got {steps!r}")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one core: the same sums in the same order on every run
    try:
        return _train(Path(out_dir), plot, steps, seed, log)
    finally:
        torch.set_num_threads(threads)


def _train(out_dir, plot, steps, seed, log):
    start = time.perf_counter()
    vocab = vocabulary()
    train_set, held = held_out(seed)
    data, held_ids = encode_sentences(train_set, vocab), encode_sentences(held, vocab)
    floor = lowest_loss(train_set)
    log(f"{len(train_set)} training sentences, {len(held)} held out, {len(vocab)} words; "
        f"lowest possible training loss {floor:.3f}")
    torch.manual_seed(seed)
    model = TinyTransformer(len(vocab))
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    # The learning rate falls along a half cosine to 0: the last steps settle.
    schedule = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda k: 0.5 * (1 + math.cos(math.pi * k / steps)))
    batches = torch.Generator().manual_seed(seed)
    losses, checkpoints = [], []
    for step in range(1, steps + 1):
        batch = data[torch.randint(len(data), (BATCH,), generator=batches)]  # (B, L)
        loss = _loss(model, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        schedule.step()
        losses.append(loss.item())
        if step % LOG_EVERY == 0 or step == steps:
            with torch.no_grad():
                held_loss = _loss(model, held_ids).item()
            checkpoints.append((step, held_loss))
            # the training loss as a mean over the last batches (one batch is noisy)
            log(f"step {step:>5}/{steps}  loss {np.mean(losses[-LOG_EVERY:]):.3f}  "
                f"held-out {held_loss:.3f}")
    model.eval()
    model.vocab = vocab
    out_dir.mkdir(parents=True, exist_ok=True)
    content = _weights_bytes(model, vocab, losses)
    (out_dir / WEIGHTS_FILE).write_bytes(content)
    (out_dir / CHECKSUM_FILE).write_text(
        f"{hashlib.sha256(content).hexdigest()}  {WEIGHTS_FILE}\n", encoding="utf-8")
    log(f"wrote {out_dir / WEIGHTS_FILE} and {out_dir / CHECKSUM_FILE} "
        f"({time.perf_counter() - start:.0f} s)")
    if plot is not None:
        _plot(losses, checkpoints, floor, Path(plot))
        log(f"saved the loss plot to {plot}")
    log(describe(measured(model)))
    return model


def _plot(losses, checkpoints, floor, path):
    from src.visualizations import new_figure  # a bare Figure: no pyplot, no backend

    fig = new_figure(figsize=(7, 4))
    ax = fig.add_subplot()
    ax.plot(np.arange(1, len(losses) + 1), losses, lw=0.5, color="#99bbdd",
            label="training loss (each batch)")
    steps, held = zip(*checkpoints)
    ax.plot(steps, held, "o-", color="#d62728", ms=3, label="held-out sentences")
    ax.axhline(floor, ls="--", color="grey",
               label=f"lowest possible on the training sentences ({floor:.2f})")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats per word)")
    ax.set_ylim(0, max(4.5, floor + 1))
    ax.legend()
    ax.set_title("Training the tiny transformer (src/train.py)")
    fig.savefig(path, dpi=100, bbox_inches="tight")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DATA_DIR,
                        help="directory for the weights and their checksum (default: data/)")
    parser.add_argument("--plot", type=Path, default=PLOT_FILE,
                        help=f"the loss plot, a PNG (default: {PLOT_FILE})")
    parser.add_argument("--steps", type=int, default=STEPS, help=f"default {STEPS}")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps: expected a positive number, got {args.steps}")
    train(args.out, args.plot, args.steps)


if __name__ == "__main__":
    main()
