"""Speed and memory of src/attention.py, as ratios against PyTorch in the same run.

Run with ``make bench``. Each figure is a median over rounds; in each round
one implementation runs all its repeats before the other starts, because
torch's and OpenBLAS's worker threads spin for a while after a call and slow
whatever runs next on these 2 cores. Ratios are ours / torch's: below 1 is
faster. Targets are reported, never asserted (the machines are shared).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
import tracemalloc

import numpy as np
import torch
import torch.nn.functional as F

from src import attention as A

SHAPES = [(1, 1, 6, 64), (8, 8, 128, 64), (4, 8, 512, 64), (1, 8, 2048, 64)]
SDPA_TARGET = {(4, 8, 512, 64): 1.5, (1, 8, 2048, 64): 1.5}
LONG_L = 8192


def timeit(fn, repeats):
    fn()  # warm-up: first-touch page faults, thread pools, caches
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def compare(fns: dict, repeats: int, rounds: int) -> dict:
    """Median seconds of each function, interleaved by rounds."""
    per = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            per[name].append(timeit(fn, repeats))
    return {name: statistics.median(ts) for name, ts in per.items()}


def repeats_for(B, H, L, D):
    flops = 4 * B * H * L * L * D
    return max(3, min(200, int(2e9 / max(flops, 1))))


def bench_shape(B, H, L, D, rounds):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((B, H, L, D), dtype=np.float32) for _ in range(3))
    tq, tk, tv = map(torch.from_numpy, (q, k, v))

    d_model = H * D
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(d_model, H, batch_first=True).eval()
    w = {name: p.detach().numpy() for name, p in mha.named_parameters()}
    w_q, w_k, w_v = w["in_proj_weight"].reshape(3, d_model, d_model)
    b_q, b_k, b_v = w["in_proj_bias"].reshape(3, d_model)
    x = rng.standard_normal((B, L, d_model), dtype=np.float32)
    tx = torch.from_numpy(x)
    params = dict(w_q=w_q, w_k=w_k, w_v=w_v, w_o=w["out_proj.weight"], b_q=b_q, b_k=b_k,
                  b_v=b_v, b_o=w["out_proj.bias"])

    def torch_mha():
        with torch.inference_mode():
            mha(tx, tx, tx, need_weights=False)

    reps = repeats_for(B, H, L, D)
    t = compare({
        "np_sdpa": lambda: A.scaled_dot_product_attention(q, k, v, need_weights=False),
        "np_sdpa_w": lambda: A.scaled_dot_product_attention(q, k, v),
        "torch_sdpa": lambda: F.scaled_dot_product_attention(tq, tk, tv),
        "np_mha": lambda: A.multi_head_attention(x, x, x, H, **params, need_weights=False),
        "torch_mha": torch_mha,
    }, reps, rounds)
    return t


def peak_bytes(fn):
    """Peak bytes NumPy allocated during ``fn`` (NumPy reports to tracemalloc)."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    fn()
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return peak


def bench_memory(rounds):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 1, LONG_L, 64), dtype=np.float32) for _ in range(3))
    needed = A.direct_attention_bytes(q, k)
    big = 4 * needed  # lets the direct path run
    small = needed // 64  # forces the blocked path

    def direct():
        return A.scaled_dot_product_attention(q, k, v, memory_budget=big)

    def blocked():
        return A.scaled_dot_product_attention(q, k, v, need_weights=False,
                                              memory_budget=small)

    np.testing.assert_allclose(blocked()[0], direct()[0], rtol=1e-5, atol=1e-6)
    mem = {"direct": peak_bytes(direct), "blocked": peak_bytes(blocked)}
    t = compare({"direct": direct, "blocked": blocked}, 3, rounds)
    return needed, mem, t


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)

    print(f"torch {torch.__version__} ({torch.get_num_threads()} threads), "
          f"numpy {np.__version__}; medians of {args.rounds} rounds; ms\n")
    head = (f"{'(B, H, L, D)':<18}{'np sdpa':>9}{'(+wts)':>9}{'torch':>9}{'ratio':>7}"
            f"{'(+wts)':>8}{'np mha':>9}{'torch':>9}{'ratio':>7}  target")
    print(head)
    print("-" * len(head))
    for shape in SHAPES:
        t = bench_shape(*shape, args.rounds)
        r = t["np_sdpa"] / t["torch_sdpa"]
        rw = t["np_sdpa_w"] / t["torch_sdpa"]
        rm = t["np_mha"] / t["torch_mha"]
        target = SDPA_TARGET.get(shape)
        verdict = "" if target is None else (
            f"sdpa <= {target}x: {'met' if r <= target else 'MISSED'}")
        ms = {key: val * 1e3 for key, val in t.items()}
        print(f"{str(shape):<18}{ms['np_sdpa']:>9.3f}{ms['np_sdpa_w']:>9.3f}"
              f"{ms['torch_sdpa']:>9.3f}{r:>7.2f}{rw:>8.2f}{ms['np_mha']:>9.3f}"
              f"{ms['torch_mha']:>9.3f}{rm:>7.2f}  {verdict}")
    print("\nnp sdpa: need_weights=False (torch's SDPA returns no weights either); "
          "(+wts): also returning the (B, H, L, L) weights.\n"
          "mha: multi_head_attention vs torch.nn.MultiheadAttention, need_weights=False.\n")

    needed, mem, t = bench_memory(args.rounds)
    mem_ratio = mem["blocked"] / mem["direct"]
    time_ratio = t["blocked"] / t["direct"]
    print(f"Long sequence, (B, H, L, D) = (1, 1, {LONG_L}, 64), float32; the score matrix "
          f"alone is {needed / 2**20:.0f} MiB")
    print(f"  direct path : peak {mem['direct'] / 2**20:8.1f} MiB, {t['direct'] * 1e3:7.1f} ms")
    print(f"  blocked path: peak {mem['blocked'] / 2**20:8.1f} MiB, {t['blocked'] * 1e3:7.1f} ms")
    print(f"  blocked/direct: memory {mem_ratio:.3f} (target <= 0.125: "
          f"{'met' if mem_ratio <= 0.125 else 'MISSED'}), time {time_ratio:.2f} "
          f"(target <= 1.5: {'met' if time_ratio <= 1.5 else 'MISSED'})")
    if not math.isfinite(time_ratio):
        raise SystemExit("timing failed")


if __name__ == "__main__":
    main()
