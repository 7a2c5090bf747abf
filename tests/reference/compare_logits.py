"""Compare an engine's logits with the numpy reference forward pass (forward.py).

usage: compare_logits.py --model M.gguf --ids "[1, 2, 3]" --check f32=A.npy [--check f16=B.npy]
  --ids    the token ids the engine evaluated (a Python-style list, as `moetier tokenize --ids`)
  --check  KV=FILE: float32 .npy [n_tokens, n_vocab] that the engine wrote with a KV cache of
           type KV (f32 or f16); KV selects the tolerances (TOLERANCES below)
The reference is computed once per model and compared with every FILE.
Exit status 0 when every metric is within its tolerance, 1 otherwise, 2 on bad usage.

Metrics (over all positions of one run):
  rel_max  max |engine - ref| / std(ref)     the worst single logit, scale-free
  kl_max   max over positions of KL(softmax(ref) || softmax(engine)), nats
  argmax   the top token agrees at every position whose reference top-2 gap is wider than
           what rel_max's tolerance allows (so a near-tie cannot fail a correct engine)

A top-k routing choice is a discontinuity: when two expert probabilities nearly tie, a tiny
error can pick another expert and move that position's logits by O(1) (this is what makes
llama.cpp's quantized runs differ by up to 3 std at single positions). So each check also
requires the reference's smallest relative gap (p_k - p_k+1) / p_k between the k-th and
(k+1)-th expert probability, over every layer and position, to be at least the KV type's
min_router_gap; below it the prompt/seed cannot test that engine (pick another), and the check
fails saying so. For softmax routing the relative gap is 1 - exp(-(logit_k - logit_k+1)), so it
is crossed when the two router logits move apart by about the gap.
"""

import argparse
import ast
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import forward as F  # noqa: E402

# (rel_max, kl_max, min_router_gap) by the engine's KV cache type. The reference dequantizes
# exactly (bit-identical to ggml's dequantize_row_*) and computes in float64, so the weight type
# does not matter; what remains is the engine's float32 arithmetic and its KV cache rounding.
# Measured, moetier vs reference, 14-55 prompt tokens, seed 1, weight types f32 f16 bf16 q8_0
# q4_0 q4_k_m q6_k mxfp4 (max over types):
#   KV f32: rel_max tiny 1.1e-6, mixtral-tiny 4.3e-6, olmoe-tiny 5.7e-6, qwen2moe-tiny 1.1e-6;
#           kl_max <= 5.1e-13 everywhere.
#           (llama.cpp CPU on f32 weights, f32 KV cache, no flash attention: 9.6e-7, 4.5e-6,
#            5.8e-6, 9.4e-7: the same float32 noise.)
#   KV f16: rel_max tiny 7.2e-4, mixtral-tiny 3.1e-3, olmoe-tiny 4.2e-3, qwen2moe-tiny 7.3e-4;
#           kl_max <= 1.7e-7. Rounding K and V to f16 in the reference reproduces these
#           (6.2e-4 tiny, 2.6e-3 mixtral-tiny) and moves router logits by at most 5.5e-4.
# rel_max and kl_max tolerances are about 4x the worst value measured on any preset.
# min_router_gap: f32 100x the float32 noise; f16 2x the largest possible opposite move of two
# router logits (2 x 5.5e-4).
TOLERANCES = {
    "f32": (2e-5, 2e-12, 1e-4),
    "f16": (1.5e-2, 1e-6, 2.2e-3),
}


def log_softmax(x):
    x = np.asarray(x, np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def metrics(ref, test, rel_tol=0.0):
    ref = np.asarray(ref, np.float64)
    test = np.asarray(test, np.float64)
    scale = np.std(ref)
    lr, lt = log_softmax(ref), log_softmax(test)
    kl = np.sum(np.exp(lr) * (lr - lt), axis=-1)
    top2 = np.sort(ref, axis=-1)[:, -2:]
    decided = (top2[:, 1] - top2[:, 0]) > 2 * rel_tol * scale
    agree = np.argmax(ref, -1) == np.argmax(test, -1)
    return {
        "rel_max": float(np.max(np.abs(test - ref)) / scale),
        "kl_max": float(np.max(kl)),
        "argmax": float(np.mean(agree)),
        "argmax_decided_bad": int(np.sum(decided & ~agree)),
    }


def reference_with_router_gap(model, ids):
    """Reference logits and the smallest relative top-k router gap seen on the way."""
    gaps = []
    route = F.route

    def recording_route(m, il, h):
        probs = F.softmax(h @ m.w(f"blk.{il}.ffn_gate_inp.weight").T, axis=-1)
        s = -np.sort(-probs, axis=-1)
        k = m.hp.n_expert_used
        if k < m.hp.n_expert:
            gaps.append(np.min((s[:, k - 1] - s[:, k]) / s[:, k - 1]))
        return route(m, il, h)

    F.route = recording_route
    try:
        ref = F.forward(model, ids)
    finally:
        F.route = route
    return ref, (min(gaps) if gaps else 1.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", required=True)
    ap.add_argument("--check", action="append", required=True, metavar="KV=FILE")
    a = ap.parse_args()
    try:
        ids = ast.literal_eval(a.ids.strip())
        assert isinstance(ids, list) and ids and all(isinstance(i, int) for i in ids)
    except Exception:
        print(f"bad --ids {a.ids[:80]!r}: want a list like [1, 2, 3]")
        return 2
    checks = [c.split("=", 1) for c in a.check]
    if any(len(c) != 2 or c[0] not in TOLERANCES for c in checks):
        print(f"bad --check {a.check}: want KV=FILE with KV in {sorted(TOLERANCES)}")
        return 2

    model = F.Model(a.model)
    n_vocab = model.g.tensors["token_embd.weight"].ne[1]
    ref, gap = reference_with_router_gap(model, ids)
    name = os.path.basename(a.model)
    failures = 0
    for kv, path in checks:
        rel_tol, kl_tol, min_gap = TOLERANCES[kv]
        if gap < min_gap:
            print(f"{name} kv {kv}: the reference has a top-k router gap of {gap:.2g} < "
                  f"{min_gap:g}: the prompt/seed sits on a routing near-tie and cannot test "
                  "this; choose another")
            failures += 1
            continue
        try:
            test = np.load(path)
        except (OSError, ValueError) as e:
            print(f"{name} kv {kv}: cannot read {path}: {e}")
            failures += 1
            continue
        if test.dtype != np.float32 or test.shape != (len(ids), n_vocab):
            print(f"{name} kv {kv}: logits {test.dtype}{list(test.shape)}, "
                  f"want float32[{len(ids)}, {n_vocab}]")
            failures += 1
            continue
        if not np.all(np.isfinite(test)):
            print(f"{name} kv {kv}: logits contain NaN or Inf")
            failures += 1
            continue
        m = metrics(ref, test, rel_tol)
        bad = []
        if not m["rel_max"] <= rel_tol:
            bad.append(f"rel_max {m['rel_max']:.3g} > {rel_tol:g}")
        if not m["kl_max"] <= kl_tol:
            bad.append(f"kl_max {m['kl_max']:.3g} > {kl_tol:g}")
        if m["argmax_decided_bad"]:
            bad.append(f"top token differs at {m['argmax_decided_bad']} position(s)")
        print(f"{name} kv {kv}: {len(ids)} tokens, rel_max {m['rel_max']:.3g} (tol {rel_tol:g}),"
              f" kl_max {m['kl_max']:.3g} (tol {kl_tol:g}), argmax {m['argmax']:.3f},"
              f" router gap {gap:.2g}" + ("" if not bad else " -> FAIL: " + "; ".join(bad)))
        failures += bool(bad)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
