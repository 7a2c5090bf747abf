"""The gpt-oss architecture (gpt-oss-20b, gpt-oss-120b) for the reference forward pass
(forward.py), written from the model definition (OpenAI's gpt_oss reference, as llama.cpp's
converter lays the tensors out); forward.py dispatches here.

Attention, per layer, h = rms_norm(x) * attn_norm [T, n_embd]:
    q, k, v = h W^T + b   (attn_q/k/v weight and bias; heads of head_dim = key_length, 64)
    q, k rotated: RoPE NEOX (halves) over all head_dim dims, YaRN as deepseek2.py describes
    score(t, s) = q(t) . k(s) / sqrt(head_dim)  for s <= t, and on sliding layers only for
        t - s < sliding_window (layer il slides when il % P < P - 1, P =
        sliding_window_pattern, default 2: the even layers)
    p(t, s) = exp(score(t, s)) / (sum_s' exp(score(t, s')) + exp(sink_h))   sink_h: attn_sinks
        (one logit per head, in the denominator only)
    out = (concat over heads of sum_s p(t, s) v(s)) Wo^T + bo
FFN, h = rms_norm(x) * post_attention_norm:
    logits = h Wr^T + br                        (ffn_gate_inp weight and bias)
    ids    = the k largest logits (ties: the lower expert first)
    w      = softmax over those k logits        (no renormalisation, no scale)
    out    = sum over slots of w * (Wd_e a + bd_e),
             a = min(g, 7) * sigmoid(1.702 min(g, 7)) * (clamp(u, -7, 7) + 1),
             g = Wg_e h + bg_e, u = Wu_e h + bu_e
"""
import numpy as np

import deepseek2
import forward as F


def read_hparams(hp, g, key):
    """Fills the gpt-oss fields of F.HParams hp from GGUF g."""
    hp.n_ff_exp = int(key("expert_feed_forward_length"))
    hp.n_group = 0  # (deepseek2.select_experts' grouping: none)
    hp.n_swa = int(key("attention.sliding_window"))
    hp.swa_pattern = int(key("attention.sliding_window_pattern", 2))
    scaling_type = g.get(f"{hp.arch}.rope.scaling.type", "linear")
    if scaling_type not in ("linear", "none", "yarn"):
        raise ValueError(f"rope scaling {scaling_type!r} not in the reference")
    factor = float(key("rope.scaling.factor", 0.0))
    hp.rope_freq_scale = 1.0 if scaling_type == "none" or factor == 0.0 else 1.0 / factor
    hp.yarn_ext_factor = 1.0 if scaling_type == "yarn" else 0.0
    hp.n_ctx_orig = int(key("rope.scaling.original_context_length", key("context_length")))
    hp.yarn_log_mul = 0.0
    hp.rope_attn_factor = float(key("rope.scaling.attn_factor", 1.0))
    hp.attn_factor, _ = deepseek2.attn_scales(hp)
    hp.kq_scale = 1.0 / np.sqrt(hp.head_dim)


def slides(hp, il):
    return hp.swa_pattern == 0 or il % hp.swa_pattern < hp.swa_pattern - 1


def rope_neox(x, cos, sin):
    """x [T, heads, n_rot] rotated by halves; cos, sin [T, n_rot/2]."""
    c, s = cos[:, None, :].astype(x.dtype), sin[:, None, :].astype(x.dtype)
    half = cos.shape[1]
    a, b = x[..., :half], x[..., half:2 * half]
    out = x.copy()
    out[..., :half] = a * c - b * s
    out[..., half:2 * half] = a * s + b * c
    return out


def attention(ps, il, h):
    m, hp = ps.m, ps.m.hp
    T = h.shape[0]
    p = f"blk.{il}."

    def proj(name, x, src):
        return ps.linear(p + name + ".weight", x, p + src, bias=p + name + ".bias")

    q, k, v = (proj(name, h, "attn_norm") for name in ("attn_q", "attn_k", "attn_v"))
    cos, sin = deepseek2.rope_cos_sin(hp, np.arange(T))
    q = rope_neox(q.reshape(T, hp.n_head, hp.head_dim), cos, sin)
    k = ps.kv(rope_neox(k.reshape(T, hp.n_head_kv, hp.head_dim), cos, sin), p + "k")
    v = ps.kv(v.reshape(T, hp.n_head_kv, hp.head_dim), p + "v")
    kv_of = np.arange(hp.n_head) // (hp.n_head // hp.n_head_kv)
    scores = np.einsum("thd,shd->hts", q, k[:, kv_of, :]) * hp.kq_scale   # [n_head, T, T]
    t, s = np.arange(T)[:, None], np.arange(T)[None, :]
    hidden = s > t
    if slides(hp, il):
        hidden = hidden | (t - s >= hp.n_swa)
    scores = np.where(hidden[None], -np.inf, scores)
    sinks = m.w(p + "attn_sinks.weight")                                 # [n_head]
    top = np.maximum(scores.max(axis=-1, keepdims=True), sinks[:, None, None])
    e = np.exp(scores - top)
    probs = e / (e.sum(axis=-1, keepdims=True) + np.exp(sinks[:, None, None] - top))
    out = np.einsum("hts,shd->thd", probs, v[:, kv_of, :]).reshape(T, hp.n_head * hp.head_dim)
    return proj("attn_output", out, "attn_out")


def route(ps, il, h):
    """-> (ids [T, k], weights [T, k]): top-k logits, softmax over them."""
    m, hp = ps.m, ps.m.hp
    p = f"blk.{il}."
    logits = h @ m.w(p + "ffn_gate_inp.weight").T + m.w(p + "ffn_gate_inp.bias")
    ids, gap = deepseek2.select_experts(hp, F.softmax(logits, axis=-1))
    ps.router_gap = np.minimum(ps.router_gap, gap)
    return ids, F.softmax(np.take_along_axis(logits, ids, axis=-1), axis=-1)


def swiglu_oai(g, u):
    g = np.minimum(g, 7.0)
    return g / (1.0 + np.exp(-1.702 * g)) * (np.clip(u, -7.0, 7.0) + 1.0)


def ffn(ps, il, h):
    ids, w = route(ps, il, h)
    return F.routed_experts(ps, il, h, ids, w, act=swiglu_oai)
