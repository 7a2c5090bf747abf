"""Cases for the reference's deepseek2 (deepseek2.py), run by numerics_test.py (or alone):
hand-derived YaRN correction dims, angles and attention scales; adjacent-pair RoPE; group-
limited routing by hand and against exhaustive search; the absorbed and MHA forms of MLA, and
the legacy attn_kv_b and split attn_k_b/attn_v_b layouts of the same weights, agreeing to
float64 error (with and without an f16 latent cache); which inputs act_quant quantizes; and
logits that llama.cpp computed for models of mem_model.deepseek2_tiny (GOLDEN).
Run: python3 deepseek2_test.py   (exit status 1 on a mismatch)
"""

import itertools
import os
import sys
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deepseek2 as D  # noqa: E402
import forward as F  # noqa: E402
import mem_model as M  # noqa: E402

bad = 0


def close(what, got, want, rtol=1e-12):
    """|got - want| <= rtol * max|want| elementwise."""
    global bad
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if not (got.shape == want.shape and
            np.all(np.abs(got - want) <= rtol * max(np.max(np.abs(want)), 1e-300))):
        print(f"FAIL {what}: got {got.tolist()}, want {want.tolist()}")
        bad += 1


def same(what, got, want):
    global bad
    if got != want:
        print(f"FAIL {what}: got {got}, want {want}")
        bad += 1


def rope_hp(**kw):
    hp = SimpleNamespace(n_rot=64, rope_base=10000.0, rope_freq_scale=1.0, yarn_ext_factor=0.0,
                         n_ctx_orig=4096, attn_factor=1.0, yarn_log_mul=0.0,
                         rope_attn_factor=1.0, head_dim=192)
    hp.__dict__.update(kw)
    return hp


def yarn_cases():
    # DeepSeek-V3's RoPE: n_rot 64, n_ctx_orig 4096, base 10000. corr(beta) = 64 ln(4096 /
    # (2 pi beta)) / (2 ln 10000): beta 32 -> 10.47 -> floor 10; beta 1 -> 22.51 -> ceil 23.
    close("corr dims V3", D.yarn_corr_dims(64, 4096, 10000.0), [10, 23])
    # n_rot 16, n_ctx_orig 64: beta 32 -> -0.99 -> 0 (clamped); beta 1 -> 2.02 -> 3
    close("corr dims tiny", D.yarn_corr_dims(16, 64, 10000.0), [0, 3])
    # n_rot 128: 20.94 -> floor 20, 45.03 -> ceil 46
    close("corr dims 128", D.yarn_corr_dims(128, 4096, 10000.0), [20, 46])

    # Angles at position 7 with factor 40 and attn_factor 0.8: pairs 0..10 extrapolate
    # (theta = 7 b^(-2i/64)), pairs from 23 interpolate (theta / 40), pair 16 mixes them with
    # ramp 1 - (16 - 10) / 13 = 7/13; magnitude 0.8 (1 + 0.1 ln 40).
    hp = rope_hp(rope_freq_scale=1 / 40, yarn_ext_factor=1.0, attn_factor=0.8)
    cos, sin = D.rope_cos_sin(hp, [0, 7])
    m = 0.8 * (1 + 0.1 * np.log(40.0))

    def th(i):
        return 7 * 10000.0 ** (-i / 32)
    want = {5: th(5), 10: th(10), 16: th(16) * (7 / 13 + 6 / 13 / 40), 23: th(23) / 40,
            31: th(31) / 40}
    for i, t in want.items():
        close(f"yarn pair {i}", [cos[1, i], sin[1, i]], [m * np.cos(t), m * np.sin(t)])
    close("yarn position 0", [cos[0], sin[0]], [np.full(32, m), np.zeros(32)])
    # no YaRN: theta / factor throughout (linear), magnitude attn_factor alone
    cos, sin = D.rope_cos_sin(rope_hp(rope_freq_scale=0.25, attn_factor=0.8), [7])
    close("linear pair 16", [cos[0, 16], sin[0, 16]],
          [0.8 * np.cos(th(16) / 4), 0.8 * np.sin(th(16) / 4)])

    # RoPE NORMAL rotates adjacent pairs: (1, 0) by 90 degrees -> (0, 1); (0, 1) by 0 stays.
    x = np.array([[[1.0, 0.0, 0.0, 1.0]]])
    close("rope pairs", D.rope_normal(x, np.array([[0.0, 1.0]]), np.array([[1.0, 0.0]])),
          [[[0.0, 1.0, 0.0, 1.0]]])


def scale_cases():
    f, d = 40.0, 192
    ln = np.log(f)
    # (hp fields, attn_factor, RoPE magnitude, kq_scale), hand-simplified from llama.cpp's steps
    cases = [
        # YaRN with log multiplier 0.707 (V2's mscale_all_dim): RoPE magnitude 1, kq_scale
        # (1 + 0.0707 ln 40)^2 / sqrt(192)
        ("yarn+log_mul", dict(rope_freq_scale=1 / f, yarn_ext_factor=1.0, yarn_log_mul=0.707),
         1 / (1 + 0.1 * ln), 1.0, (1 + 0.0707 * ln) ** 2 / np.sqrt(d)),
        # with rope.scaling.attn_factor 0.5: both scale by it (kq_scale squared)
        ("yarn+log_mul+attn_factor", dict(rope_freq_scale=1 / f, yarn_ext_factor=1.0,
                                          yarn_log_mul=0.707, rope_attn_factor=0.5),
         0.5 / (1 + 0.1 * ln), 0.5, 0.25 * (1 + 0.0707 * ln) ** 2 / np.sqrt(d)),
        # YaRN without log multiplier: (1 + 0.1 ln f) on cos/sin and squared on kq_scale
        ("yarn", dict(rope_freq_scale=1 / f, yarn_ext_factor=1.0),
         1.0, 1 + 0.1 * ln, (1 + 0.1 * ln) ** 2 / np.sqrt(d)),
        # linear factor 4, no YaRN: kq_scale still carries (1 + 0.1 ln 4)^2
        ("linear", dict(rope_freq_scale=0.25), 1.0, 1.0, (1 + 0.1 * np.log(4)) ** 2 / np.sqrt(d)),
        ("none", dict(), 1.0, 1.0, 1 / np.sqrt(d)),
    ]
    for what, kw, attn_factor, magnitude, kq_scale in cases:
        hp = rope_hp(**kw)
        got_af, got_kq = D.attn_scales(hp)
        hp.attn_factor = got_af
        cos, _ = D.rope_cos_sin(hp, [0])
        close(f"scales {what}", [got_af, cos[0, 0], got_kq], [attn_factor, magnitude, kq_scale])


def route_hp(n_expert, k, n_group=0, n_group_used=0, gating="softmax", norm=False, scale=0.0):
    return SimpleNamespace(n_expert=n_expert, n_expert_used=k, n_group=n_group,
                           n_group_used=n_group_used, gating=gating, expert_weights_norm=norm,
                           expert_weights_scale=scale)


def route_of(hp, logits, bias=None):
    """deepseek2.route on router logits [T, n_expert]: h the identity [T, T], W_r = logits^T."""
    logits = np.asarray(logits, np.float64)
    m = SimpleNamespace(hp=hp, w=lambda n: logits.T,
                        opt=lambda n: None if bias is None else np.asarray(bias, np.float64))
    ps = SimpleNamespace(m=m, router_gap=np.ones(len(logits)))
    ids, w = D.route(ps, 0, np.eye(len(logits)))
    return ids, w, ps.router_gap


def brute_force(hp, s):
    """The chosen experts by exhaustive search: the n_group_used groups whose total group score
    (sum of a group's two best s) is largest, then the k experts in them with the largest sum."""
    E = len(s)
    if hp.n_group > 1:
        per = E // hp.n_group
        score = [np.sort(s[g * per:(g + 1) * per])[-2:].sum() for g in range(hp.n_group)]
        gs = max(itertools.combinations(range(hp.n_group), hp.n_group_used),
                 key=lambda c: sum(score[g] for g in c))
        allowed = [e for g in gs for e in range(g * per, (g + 1) * per)]
    else:
        allowed = range(E)
    return set(max(itertools.combinations(allowed, hp.n_expert_used),
                   key=lambda c: sum(s[e] for e in c)))


def routing_cases():
    # 4 groups of 2, 2 used, top-3. Group scores (sums of both): .9, .95, .92, .2 -> groups 1, 2
    # (by their best expert alone it would be groups 0 and 2); there .6, .5, .45 -> [4, 2, 3].
    # gap: groups (.92 - .9) / .92, experts (.45 - .32) / .45.
    s = np.array([[0.9, 0.0, 0.5, 0.45, 0.6, 0.32, 0.1, 0.1]])
    ids, gap = D.select_experts(route_hp(8, 3, 4, 2), s)
    same("groups ids", ids.tolist(), [[4, 2, 3]])
    close("groups gap", gap, [0.02 / 0.92])
    # 2 groups of 4, 1 used, top-2: the sum of the two best (1.02 vs .95) picks group 0, where
    # the sum of all four (1.22 vs 1.55) would pick group 1.
    ids, _ = D.select_experts(route_hp(8, 2, 2, 1),
                              np.array([[0.9, 0.12, 0.1, 0.1, 0.5, 0.45, 0.3, 0.3]]))
    same("group top-2 sum", ids.tolist(), [[0, 1]])

    # sigmoid, bias, norm, scale: p = [.8, .6, .5, .2], s = p + [-.5, 0, 0, .5] = [.3, .6, .5, .7]
    # -> ids [3, 1]; weights the unbiased p: [.2, .6] / .8 * 2.5 = [.625, 1.875]
    p = np.array([0.8, 0.6, 0.5, 0.2])
    ids, w, gap = route_of(route_hp(4, 2, gating="sigmoid", norm=True, scale=2.5),
                           [np.log(p / (1 - p))], bias=[-0.5, 0, 0, 0.5])
    same("sigmoid ids", ids.tolist(), [[3, 1]])
    close("sigmoid weights", w, [[0.625, 1.875]])
    close("sigmoid gap", gap, [0.1 / 0.6])
    # softmax, no norm; scale 1 leaves the weights as they are
    for scale in (0.0, 1.0):
        ids, w, _ = route_of(route_hp(4, 2, scale=scale), [np.log([4.0, 2.0, 1.0, 1.0])])
        close(f"softmax weights scale {scale}", [ids[0], w[0]], [[0, 1], [0.5, 0.25]])
    # norm clamps the sum at 2^-14: sigmoid of -30 twice
    _, w, _ = route_of(route_hp(3, 2, gating="sigmoid", norm=True), [[-30.0, -30.0, -40.0]])
    close("norm clamp", w, [[1 / (1 + np.exp(30)) / 2 ** -14] * 2])

    # exhaustive search over random scores
    rs = np.random.RandomState(7)
    for n_expert, k, n_group, used in ((16, 4, 4, 2), (16, 6, 8, 3), (12, 3, 0, 0), (12, 5, 6, 5)):
        hp = route_hp(n_expert, k, n_group, used)
        s = rs.standard_normal((50, n_expert))
        ids, _ = D.select_experts(hp, s)
        ok = all(set(ids[t]) == brute_force(hp, s[t]) for t in range(len(s)))
        in_order = np.all(np.diff(np.take_along_axis(s, ids, -1), axis=-1) <= 0)
        same(f"brute force {n_expert}/{k}/{n_group}/{used}", [ok, bool(in_order)], [True, True])


TOKENS = [1, 5, 9, 33, 2, 77, 100, 3, 14, 15, 92, 65]

# Model options for the form/layout cases (every feature at least once).
CONFIGS = {
    "default": dict(),
    "no q lora": dict(q_lora=0, tied=True),
    "sigmoid groups": dict(gating=2, exp_probs_b=True, n_group=4, n_group_used=2,
                           n_expert_used=3, weights_norm=True, weights_scale=2.5),
    "yarn": dict(rope_scaling=("yarn", 40.0, 64, 0.0707), n_dense_lead=0, n_shared=2),
}


# llama.cpp's logits (b10587, commit 3f545becc; CPU, f32 KV cache, no flash attention) for
# deepseek2_tiny(1, **opts) written to an F32 GGUF, evaluating TOKENS in one batch:
# GOLDEN[name][i][j] is the logit of token GOLDEN_IDS[j] at position GOLDEN_POS[i]. In 16
# configurations of F32 files (all logits) llama.cpp agreed with the reference to max|d|/std
# <= 2.6e-6.
GOLDEN_CONFIGS = {
    "default": dict(),
    "legacy sigmoid groups": dict(legacy=True, q_lora=0, gating=2, exp_probs_b=True, n_group=4,
                                  n_group_used=2, n_expert_used=3, weights_norm=True,
                                  weights_scale=2.5),
    "yarn attn_factor tied": dict(rope_scaling=("yarn", 8.0, 32, 0.1), rope_attn_factor=0.7,
                                  tied=True, n_shared=2),
    "linear": dict(rope_scaling=("linear", 4.0, None, None), n_dense_lead=0),
}
GOLDEN_POS, GOLDEN_IDS = [0, 6, 11], [0, 31, 64, 97, 130, 159]
GOLDEN = {
    'default': [
        [-4.025109, 5.234641, -3.688627, -5.249011, 0.5740604, 3.388759],
        [4.689773, 7.946759, -0.6950387, -5.93962, 1.630707, 5.858966],
        [-0.3850353, -1.473141, -1.107495, -0.5224384, 0.1146235, -4.908998],
    ],
    'legacy sigmoid groups': [
        [-1.68082, 3.970054, -1.651961, 5.956939, 4.349537, -6.708639],
        [1.124236, -0.6669399, 4.386194, -10.48748, -5.021619, -4.579287],
        [-3.205092, 1.665886, -1.337253, 2.01163, -6.184679, -5.051715],
    ],
    'yarn attn_factor tied': [
        [10.21911, 7.649411, -18.82003, -1.393567, 3.319897, -4.501078],
        [5.491125, 0.8664436, 0.432312, -10.0169, -7.648858, -18.06194],
        [-1.325682, -0.1021831, 2.150565, 8.206204, 14.16458, -4.781797],
    ],
    'linear': [
        [2.38589, 1.488662, 5.502428, -4.319267, -0.1895325, 2.185955],
        [-4.402375, 2.32639, 3.132835, -5.564525, -5.201897, 4.046412],
        [5.154105, -0.4464938, 5.580755, 6.90832, -2.130174, -3.903851],
    ],
}
GOLDEN_TOL = 2e-5      # max |d| / std(reference logits); llama.cpp's float32 error ~2.6e-6


def golden_cases():
    for name, opts in GOLDEN_CONFIGS.items():
        ref = F.forward(M.MemModel(*M.deepseek2_tiny(1, **opts)), TOKENS)
        got = ref[np.ix_(GOLDEN_POS, GOLDEN_IDS)]
        rel = np.max(np.abs(got - np.array(GOLDEN[name]))) / np.std(ref)
        same(f"golden {name}: max|d|/std {rel:.2g}", bool(rel <= GOLDEN_TOL), True)


def form_cases():
    for name, opts in CONFIGS.items():
        split = M.MemModel(*M.deepseek2_tiny(1, **opts))
        legacy = M.MemModel(*M.deepseek2_tiny(1, legacy=True, **opts))
        for kv_f16 in (False, True):
            ref = F.forward(split, TOKENS, kv_f16=kv_f16, mla="mha")
            for what, model, form in (("split absorbed", split, "absorbed"),
                                      ("legacy mha", legacy, "mha"),
                                      ("legacy absorbed", legacy, "absorbed")):
                rel = np.max(np.abs(F.forward(model, TOKENS, kv_f16=kv_f16, mla=form) - ref))
                rel /= np.std(ref)
                same(f"{name} kv_f16 {kv_f16}: {what} = split mha (rel {rel:.2g})",
                     bool(rel <= 1e-12), True)
        # the f16 cache does round (rel ~1e-4 here), and the logits are not degenerate
        exact = F.forward(split, TOKENS)
        rel = np.max(np.abs(F.forward(split, TOKENS, kv_f16=True) - exact)) / np.std(exact)
        # what the f16 cache rounds: the latent and k_pe of each layer
        st = {}
        F.forward(split, TOKENS[:2], kv_f16=True, ambiguous=(0.0, 0.6), stats=st)
        same(f"{name}: f16 cache keys", sorted({k[0] for c in st["candidates"] for k in c}),
             sorted(f"blk.{il}.{s}" for il in range(3) for s in ("kv_cmpr", "k_pe")))
        same(f"{name}: f16 latent moves logits (rel {rel:.2g}, std {np.std(exact):.2g})",
             bool(1e-7 < rel < 1e-2 and np.std(exact) > 1), True)
    # the legacy and split hparams
    hp = M.MemModel(*M.deepseek2_tiny(1, q_lora=0, legacy=True)).hp
    hq = M.MemModel(*M.deepseek2_tiny(1)).hp
    same("hparams", [hp.legacy_kv_b, hp.q_lora, hp.head_dim, hp.head_dim_v, hp.d_nope,
                      hq.legacy_kv_b, hq.q_lora, hq.head_dim, hq.head_dim_v],
          [True, False, 48, 32, 32, False, True, 48, 32])
    hy = M.MemModel(*M.deepseek2_tiny(1, **CONFIGS["yarn"])).hp
    close("yarn hparams", [hy.yarn_ext_factor, hy.rope_freq_scale, hy.n_ctx_orig, hy.yarn_log_mul],
          [1.0, 1 / 40, 64, 0.707], 1e-6)


def act_quant_cases():
    """The quantized inputs (their src names) of each attention layout and form."""
    def srcs(opts, form=None):
        md, w = M.deepseek2_tiny(1, q_lora=64, **opts)
        types = {n: "Q8_0" for n, a in w.items()
                 if a.ndim > 1 and "ffn_gate_inp" not in n and "token_embd" not in n}
        st = {}
        F.forward(M.MemModel(md, w, types), TOKENS[:3], act_quant=True, ambiguous=(0.6, 0.0),
                  stats=st, mla=form)
        got = {k[0] for c in st["candidates"] for k in c}
        return sorted({s.split(".ffn_hidden.")[0] + ".ffn_hidden.E" if ".ffn_hidden." in s
                       else s for s in got})

    def want(attn):
        out = ["output_norm"]
        for il in range(3):
            p = f"blk.{il}."
            out += [p + s for s in ["attn_norm", "attn_q_a_norm", "attn_out", "ffn_norm"] + attn]
            out += [p + "ffn_hidden"] if il == 0 else [p + "ffn_hidden.E", p + "ffn_hidden_shexp"]
        return sorted(out)
    same("act_quant split (absorbed)", srcs({}), want(["q_nope", "attn_latent"]))
    same("act_quant split mha", srcs({}, "mha"), want(["kv_cmpr"]))
    same("act_quant legacy (mha)", srcs({"legacy": True}), want(["kv_cmpr"]))
    # act_quant over float weights only changes the form: the exact logits
    model = M.MemModel(*M.deepseek2_tiny(1))
    ref = F.forward(model, TOKENS)
    close("act_quant f32 = exact", F.forward(model, TOKENS, act_quant=True), ref,
          1e-12 * np.std(ref) / np.max(np.abs(ref)))


def run():
    yarn_cases()
    scale_cases()
    routing_cases()
    form_cases()
    act_quant_cases()
    golden_cases()
    return bad


if __name__ == "__main__":
    n = run()
    print("deepseek2_test: " + ("all passed" if not n else f"{n} failure(s)"))
    sys.exit(1 if n else 0)
