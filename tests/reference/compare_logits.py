"""Compare an engine's logits with the numpy reference forward pass (forward.py).

usage: compare_logits.py --model M.gguf --ids "[1, 2, 3]" --check f32=A.npy [--check f16=B.npy]
                         [--mutate NAME]
  --ids    the token ids the engine evaluated (a Python-style list, as `moetier tokenize --ids`)
  --check  KV=FILE: float32 .npy [n_tokens, n_vocab] that the engine wrote with a KV cache of
           type KV (f32 or f16)
  --mutate a deliberate error in the reference (qwen3next.MUTATIONS; qwen3next and qwen35moe
           only), for checking that the comparison fails
Exit status 0 when every metric is within its tolerance, 1 otherwise, 2 on bad usage.

Each FILE is compared with two references:

1. The engine's numerical method (tight, TOLERANCES). forward.py with act_quant (the inputs
   of quantized-weight products quantized to int8 blocks, in float32, as kernels/matmul.h
   does) and, for KV f16, K and V rounded to float16 as the cache stores them (deepseek2:
   the latent and k_pe of its MLA cache). What remains
   is float32 arithmetic, except at roundings: an activation x * 127 / amax within the
   engine's float error (seen up to 2.3e-5, in units of q; 1e-4 downstream of an f16 cache)
   of a half-integer, or a K/V value that close (seen up to 1.4e-3 of the f16 spacing) to
   the midpoint of two f16 values, can round the other way there. Once one int8 code
   differs, the next layers' codes are redrawn (a one-step change moves other values across
   boundaries), and that position's logits, and every later position's through attention,
   end up as far apart as the activation quantization noise itself (rel_max ~0.1). Such
   near-ties cannot be avoided by choosing a prompt: there are ~1e4 quantized values per
   position and their margins are uniform on [0, 0.5].
   So the comparison resolves them (sync): going through the positions in order, at the
   first one whose logits are out of tolerance it looks for one element of that position
   (or an f16 K/V element of the one before: a K at position 0 does not move position 0),
   or two (the second among the near-ties that the first one's flip produces), whose
   margin is below AMBIGUOUS and whose other rounding brings the position within
   tolerance. Each resolved element is listed. A wrong engine cannot pass this way: a flip
   moves one value by one step where the rounding is a coin toss within float error, and
   everything else must still agree to float32 precision.
   KV f32: every position must agree (after sync).
   KV f16: each f16 near-tie moves all later attention a little; with quantized weights
   that crosses several int8 boundaries at once, and with float weights several such small
   moves add up, so one or two flips do not always explain a position (measured: the run
   stays explained to the end in 14 of 32 preset/type pairs, otherwise up to a position
   between 3 and 30). So KV f16 is compared tightly on the positions before the first one
   that is not explained, which must include position 0; the later positions are checked
   against the exact model only.
2. The exact model (loose, EXACT_BOUNDS). forward.py in float64 with exact products and an
   f32 cache: what the model means. The engine's distance from it is the cost of its method
   (int8 activations, f16 cache): reported, and checked only against loose bounds on the
   median and mean over positions (a routing flip between the two moves single positions by
   O(1); the method and the exact model are different computations).

Metrics (over the positions compared):
  rel_max  max |engine - ref| / std(ref)     the worst single logit, scale-free
  kl_max   max over positions of KL(softmax(ref) || softmax(engine)), nats
  argmax   the top token agrees at every position whose reference top-2 gap is wider than
           what rel_max's tolerance allows (so a near-tie cannot fail a correct engine)
  rel_med  median over positions of max |engine - ref| / std(ref)  (vs exact only)
  kl_mean  mean over positions of the KL                           (vs exact only)

A top-k routing choice is a discontinuity too: when two expert probabilities nearly tie, a
tiny error can pick another expert and move that position's logits by O(1). So each check
requires the engine-method reference's smallest relative gap (p_k - p_k+1) / p_k between the
k-th and (k+1)-th expert probability, over every layer and the positions compared, to be at
least min_router_gap; below it the prompt/seed cannot test the engine (pick another), and the
check fails saying so. For softmax routing the relative gap is 1 - exp(-(logit_k -
logit_k+1)), so it is crossed when the two router logits move apart by about the gap.
"""

import argparse
import ast
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import forward as F  # noqa: E402
import qwen3next  # noqa: E402

# (rel_max, kl_max, min_router_gap) vs the engine-method reference, by KV cache type.
# Measured, moetier vs reference after sync, prompt of tests/e2e/reference_logits.sh (14-40
# tokens), seed 1, presets tiny mixtral-tiny olmoe-tiny qwen2moe-tiny x weight types f32 f16
# bf16 q8_0 q4_0 q4_k_m q6_k mxfp4 (max over all):
#   KV f32, every position: rel_max 8.1e-6 (olmoe-tiny q4_k_m), kl_max 6.5e-13; 0 to 3
#     near-ties resolved per run (without sync, quantized types: rel_max up to 0.4).
#   KV f16, the positions compared: rel_max 2.9e-5 (float weights, after several resolved
#     f16 near-ties), kl_max 2.9e-12 (these tolerances end the prefix, so they bound it).
# The gated DeltaNet hybrids, same prompt, seed 1, qwen3next-tiny f32 q8_0 q4_k_m and
# qwen35moe-tiny f32 q4_k_m (the delta rule's state in float32 in the engine): KV f32 rel_max
# <= 1.7e-6, KV f16 <= 3.0e-6, kl_max <= 1.9e-12, every position; 0 or 1 near-tie resolved.
# With the 184 tokens of gpt-oss's long prompt (KV f32; qwen35moe-tiny f32, qwen3next-tiny q8_0
# q4_k_m): rel_max <= 1.8e-6.
# rel_max and kl_max tolerances are about 4x the worst KV f32 value; for KV f16 the same
# tolerances decide where the compared prefix ends.
# min_router_gap: 100x the float32 noise (the reference models the f16 cache too). (olmoe-
# tiny q6_k with this prompt: 9e-5, refused.)
TOLERANCES = {
    "f32": (4e-5, 3e-12, 1e-4),
    "f16": (4e-5, 3e-12, 1e-4),
}

# Resolving near-ties (sync, module docstring): the largest margin that may be flipped, for
# an activation (in units of q) and an f16 K/V value (in units of the f16 spacing): about 2x
# the largest margin a resolved flip has had (1e-4 and 1.4e-3, both with an f16 cache).
AMBIGUOUS = (2e-4, 3e-3)
SYNC_BRANCH = 4       # second flips: after each of the 4 first, among the 4 smallest margins

# Loose bounds vs the exact reference (rel_med, kl_mean), by KV type and whether any product
# reads quantized activations; measured (same runs as above), times ~4:
#   float weights, KV f32: the method is the exact model: the tight tolerances.
#   float weights, KV f16: rel_med <= 1.9e-3, kl_mean <= 4.8e-8 (the f16 rounding of K/V).
#   quantized weights:     rel_med <= 0.22, kl_mean <= 5.8e-3 (mixtral-tiny q4_0, where
#                          routing differs at a few positions; others <= 0.21 and 1.6e-3).
EXACT_BOUNDS = {
    ("f32", False): (4e-5, 3e-12),
    ("f16", False): (8e-3, 2e-7),
    ("f32", True): (0.9, 0.025),
    ("f16", True): (0.9, 0.025),
}


def log_softmax(x):
    x = np.asarray(x, np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def position_kl(ref, test):
    """KL(softmax(ref) || softmax(test)) per position, nats."""
    lr, lt = log_softmax(ref), log_softmax(test)
    return np.sum(np.exp(lr) * (lr - lt), axis=-1)


def position_errors(ref, test, scale=None):
    """max |test - ref| / scale per position (scale: std(ref) by default)."""
    return np.max(np.abs(test - ref), axis=-1) / (np.std(ref) if scale is None else scale)


def disagree(ref, test, tol, scale=None):
    """Per position: whether rel or KL exceed tol = (rel_tol, kl_tol)."""
    return ((position_errors(ref, test, scale) > tol[0]) | (position_kl(ref, test) > tol[1]))


def metrics(ref, test, rel_tol=0.0):
    ref = np.asarray(ref, np.float64)
    test = np.asarray(test, np.float64)
    scale = np.std(ref)
    kl = position_kl(ref, test)
    rel = position_errors(ref, test)
    top2 = np.sort(ref, axis=-1)[:, -2:]
    decided = (top2[:, 1] - top2[:, 0]) > 2 * rel_tol * scale
    agree = np.argmax(ref, -1) == np.argmax(test, -1)
    return {
        "rel_max": float(np.max(rel)),
        "rel_med": float(np.median(rel)),
        "kl_max": float(np.max(kl)),
        "kl_mean": float(np.mean(kl)),
        "argmax": float(np.mean(agree)),
        "argmax_decided_bad": int(np.sum(decided & ~agree)),
    }


def ranked(candidates):
    """[(key, margin)] by margin relative to its kind's AMBIGUOUS, smallest first."""
    return sorted(candidates.items(), key=lambda km: km[1] / AMBIGUOUS[km[0][1] == "f16"])


def resolve(model, ids, kv_f16, flips, test, tol, scale, candidates):
    """The one or two further flips [(key, margin)] that make the last position of ids agree
    with test [n_vocab] (its logits there), or None. A second flip is looked for among the
    candidates after a first: a flip redraws the codes after it, so the ambiguous elements
    downstream are only known once it is applied."""
    def attempt(extra):
        st = {}
        keys = [k for k, _ in flips + extra]
        r = F.forward(model, ids, True, kv_f16, keys, AMBIGUOUS, True, st)
        return not disagree(r, test[None], tol, scale)[0], st["candidates"][-1]

    after = []
    for first in ranked(candidates):
        ok, cands = attempt([first])
        if ok:
            return [first]
        after.append((first, cands))
    for first, cands in after[:SYNC_BRANCH]:
        for second in [c for c in ranked(cands) if c[0] != first[0]][:SYNC_BRANCH]:
            if attempt([first, second])[0]:
                return [first, second]
    return None


def sync(model, ids, kv_f16, test, tol):
    """The engine-method reference of `test` with its near-ties resolved (module docstring).
    tol: (rel_tol, kl_tol) per position.
    -> (ref logits, stats of its pass, [(key, margin)] flipped, None or the first position
    that no allowed flip explains)."""
    flips = []
    resolved = -1
    while True:
        st = {}
        ref = F.forward(model, ids, True, kv_f16, [k for k, _ in flips], AMBIGUOUS, False, st)
        bad = np.nonzero(disagree(ref, test, tol))[0]
        if not len(bad):
            return ref, st, flips, None
        p = int(bad[0])
        extra = None
        if p > resolved:                      # else a resolved position did not stay so
            # the near-ties of position p, and the f16 K/V ones of p - 1: a K at position 0
            # does not change position 0 at all (its attention has one score)
            cands = dict(st["candidates"][p])
            if p > 0:
                cands.update({k: m for k, m in st["candidates"][p - 1].items() if k[1] == "f16"})
            extra = resolve(model, ids[:p + 1], kv_f16, flips, test[p], tol, np.std(ref), cands)
        if extra is None:
            return ref, st, flips, p
        flips += extra
        resolved = p


def describe_flips(flips):
    return ", ".join(f"{src}[pos {t}, col {c}] ({kind if kind == 'f16' else f'q{kind}'}, "
                     f"margin {m:.1e})" for (src, kind, t, c), m in flips)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", required=True)
    ap.add_argument("--check", action="append", required=True, metavar="KV=FILE")
    ap.add_argument("--mutate", choices=qwen3next.MUTATIONS)
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
    if a.mutate:
        if model.hp.arch not in qwen3next.ARCHS:
            print(f"--mutate: not for {model.hp.arch}")
            return 2
        model.hp.mutations = {a.mutate}
    n_vocab = model.g.tensors["token_embd.weight"].ne[1]
    exact = None
    name = os.path.basename(a.model)
    failures = 0
    for kv, path in checks:
        rel_tol, kl_tol, min_gap = TOLERANCES[kv]
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
        ref, st, flips, unexplained = sync(model, ids, kv == "f16", test, (rel_tol, kl_tol))
        quantized = bool(np.any(np.isfinite(st["act_margin"])))  # a product read int8
        # The positions compared tightly: all for KV f32; for KV f16 those before the first
        # one that no flip explains (module docstring).
        n = len(ids) if kv == "f32" or unexplained is None else unexplained
        bad = []
        if unexplained is not None and (kv == "f32" or n == 0):
            bad.append(f"position {unexplained} differs and no other rounding of one or two "
                       "ambiguous elements there explains it")
        gaps = st["router_gap"][:max(n, 1)]
        gap = float(np.min(gaps))
        if gap < min_gap:
            print(f"{name} kv {kv}: the reference has a top-k router gap of {gap:.2g} < "
                  f"{min_gap:g} (position {int(np.argmin(gaps))}): the prompt/seed sits on a "
                  "routing near-tie and cannot test this; choose another")
            failures += 1
            continue
        m = metrics(ref[:n], test[:n], rel_tol) if n else None
        if m and not m["rel_max"] <= rel_tol:
            bad.append(f"rel_max {m['rel_max']:.3g} > {rel_tol:g}")
        if m and not m["kl_max"] <= kl_tol:
            bad.append(f"kl_max {m['kl_max']:.3g} > {kl_tol:g}")
        if m and m["argmax_decided_bad"]:
            bad.append(f"top token differs at {m['argmax_decided_bad']} position(s)")
        if exact is None:
            # without quantized inputs the f32-cache method is the exact model
            same = kv == "f32" and not quantized
            exact = ref if same else F.forward(model, ids)
        x = metrics(exact, test)
        rel_bound, kl_bound = EXACT_BOUNDS[kv, quantized]
        if not x["rel_med"] <= rel_bound:
            bad.append(f"vs exact: rel_med {x['rel_med']:.3g} > {rel_bound:g}")
        if not x["kl_mean"] <= kl_bound:
            bad.append(f"vs exact: kl_mean {x['kl_mean']:.3g} > {kl_bound:g}")
        tight = ("nothing" if not m else
                 f"rel_max {m['rel_max']:.3g} (tol {rel_tol:g}), kl_max {m['kl_max']:.3g} "
                 f"(tol {kl_tol:g}), argmax {m['argmax']:.3f}")
        used = [f for f in flips if f[0][2] < n]
        print(f"{name} kv {kv}: {len(ids)} tokens, router gap {gap:.2g}, smallest activation "
              f"margin {np.min(st['act_margin']):.2g}\n"
              f"  vs engine method, positions 0..{n - 1}: {tight}; {len(used)} near-tie(s) "
              "resolved" + (f": {describe_flips(used)}" if used else "") +
              (f"; position {unexplained} not explained (rel "
               f"{position_errors(ref, test)[unexplained]:.3g}, kl "
               f"{position_kl(ref, test)[unexplained]:.3g})"
               if unexplained is not None else "") + "\n"
              f"  vs exact: rel_med {x['rel_med']:.3g} (bound {rel_bound:g}), kl_mean "
              f"{x['kl_mean']:.3g} (bound {kl_bound:g}); rel_max {x['rel_max']:.3g}, kl_max "
              f"{x['kl_max']:.3g}, argmax {x['argmax']:.3f}" +
              ("" if not bad else "\n  -> FAIL: " + "; ".join(bad)))
        failures += bool(bad)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
