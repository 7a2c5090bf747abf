"""The deepseek2 architecture (DeepSeek-V2/V2-Lite/V3/R1, Kimi-K2) for the reference forward
pass (forward.py), written from the model definitions; forward.py dispatches here.

Attention, multi-head latent attention (MLA). Per layer, h = rms_norm(x) * attn_norm [T, n_embd]:
    q    = h Wq^T, or with a query LoRA (attn_q_a present):
           (rms_norm(h Wq_a^T) * attn_q_a_norm) Wq_b^T                 [T, n_head * d_k]
         per head q = [q_nope (d_nope = d_k - n_rot) | q_pe (n_rot)]
    kv   = h Wkv_a_mqa^T = [c (kv_lora_rank) | k_pe (n_rot)]          one vector per token
    c    = rms_norm(c) * attn_kv_a_norm                               the latent
    q_pe, k_pe rotated (RoPE NORMAL: adjacent pairs; YaRN below); k_pe shared by all heads
    per head h: k_nope = Wk_b[h]^T c    Wk_b: attn_k_b (n_head, kv_lora_rank, d_nope)
                v      = Wv_b[h] c      Wv_b: attn_v_b (n_head, d_v, kv_lora_rank)
       legacy files (no key_length_mla/value_length_mla) hold both in attn_kv_b
       (n_head * (d_nope + d_v), kv_lora_rank): [k_nope | v] of head h = rows
       h * (d_nope + d_v) ... of attn_kv_b times c
    score(t, s) = kq_scale * (q_nope(t) . k_nope(s) + q_pe(t) . k_pe(s)), causal softmax over s
    out = (concat over heads of sum_s p(t, s) v(s)) Wo^T
  d_k = key_length_mla, d_v = value_length_mla (current files) or key_length / value_length
  (legacy files, whose key_length is then the per-head size and not kv_lora_rank + n_rot).
  The absorbed form computes the same in latent space: score = kq_scale * ((Wk_b[h] q_nope) . c
  + q_pe . k_pe), out_h = Wv_b[h] (sum_s p(t, s) c(s)). Exact arithmetic gives the same values;
  the engine's numerical method (act_quant) differs between the two, see Pass below.

RoPE with YaRN (llama.cpp: rope.scaling.type yarn sets ext_factor 1; beta_fast 32, beta_slow 1;
n_ctx_orig = rope.scaling.original_context_length, default context_length). For pair i of n_rot:
    theta_extrap = pos * base^(-2i / n_rot),  theta_interp = freq_scale * theta_extrap
    freq_scale = 1 / rope.scaling.factor (1 without a factor or with type none)
    corr(beta) = n_rot * ln(n_ctx_orig / (2 pi beta)) / (2 ln base)
    low = max(0, floor(corr(beta_fast))), high = min(n_rot - 1, ceil(corr(beta_slow)))
    ramp_i = (1 - clamp((i - low) / max(0.001, high - low), 0, 1)) * ext_factor
    theta = theta_interp * (1 - ramp_i) + theta_extrap * ramp_i
    (cos, sin) = (cos theta, sin theta) * m,  m = attn_factor * (1 + 0.1 ln(1/freq_scale)) if
    ext_factor != 0 else attn_factor
  attn_factor and kq_scale as llama.cpp computes them (llama-context.cpp, models/deepseek2.cpp);
  log_mul = rope.scaling.yarn_log_multiplier / 0.1 (the converter stores 0.1 * mscale_all_dim):
    f = 1 / freq_scale
    attn_factor = 1
    if ext_factor != 0:
        attn_factor = 1 if log_mul != 0 else mscale(f, 1)   (deepseek2 reads mscale = log_mul,
                        so mscale(f, log_mul) / mscale(f, log_mul) = 1)
        attn_factor /= 1 + 0.1 ln f
    attn_factor *= rope.scaling.attn_factor (default 1)
    kq_scale = (attn_factor * (1 + 0.1 ln f) * (1 + 0.1 log_mul ln f))^2 / sqrt(d_k)
  with mscale(f, m) = 1 + 0.1 m ln f for f > 1, else 1. For a YaRN file with a log multiplier
  (every converted DeepSeek) the RoPE magnitude is rope.scaling.attn_factor and kq_scale is
  (1 + 0.1 mscale_all_dim ln f)^2 / sqrt(d_k). Without one, the factor (1 + 0.1 ln f) lands on
  cos/sin and squared on kq_scale too; with a factor but not YaRN, on kq_scale alone: both as
  llama.cpp does.

FFN. Layers below leading_dense_block_count: SwiGLU (ffn_gate, ffn_up, ffn_down). Others:
    p = softmax(h Wr^T) (expert_gating_func 1 or absent) or sigmoid (2)      [T, n_expert]
    s = p + exp_probs_b (if present): the selection score
    groups (expert_group_count G > 1): experts in G consecutive groups; a group scores the sum
        of its two best s; the experts outside the best expert_group_used_count groups are out
    ids = the n_expert_used best remaining s, in descending s; w = p[ids] (unbiased)
    expert_weights_norm: w /= max(sum w, 6.103515625e-5); expert_weights_scale not 0 or 1: w *= it
    out = sum_k w_k down_k(silu(gate_k h) * up_k h) + down_sh(silu(gate_sh h) * up_sh h)
  (the shared experts: ffn_*_shexp, n_ff_exp * expert_shared_count wide, ungated).

Numerical method (forward.py's Pass):
  act_quant: every product with a quantized weight reads blockwise int8 inputs, as for the other
    architectures: attn_q or attn_q_a/attn_q_b, attn_kv_a_mqa, attn_k_b, attn_v_b, attn_kv_b,
    attn_output, the dense, expert and shared-expert FFN and the output head. Which input
    attn_k_b / attn_v_b read depends on the form, so act_quant uses the engine's form: the
    absorbed one for current files (attn_k_b reads q_nope of each head, attn_v_b the latent
    attention output of each head, both quantized along their row: blocks never straddle
    heads since d_nope and kv_lora_rank are whole blocks), the MHA one for legacy attn_kv_b
    files (attn_kv_b reads the latent c of each token), as llama.cpp does.
  kv_f16: the cache holds the latent c (after its norm) and k_pe (after RoPE) of each token;
    both are rounded to f16 (keys "blk.N.kv_cmpr" and "blk.N.k_pe"), and everything the
    attention derives from the cache (k_nope, v, the latent output) is computed from the rounded
    values, in either form.
"""

import numpy as np

import forward as F

GATING = {0: "softmax", 1: "softmax", 2: "sigmoid"}   # 0: key absent (llama.cpp: softmax)
YARN_BETA_FAST = 32.0
YARN_BETA_SLOW = 1.0
WEIGHTS_SUM_MIN = 6.103515625e-5                       # llama.cpp clamps sum(w) below here


def read_ffn_hparams(hp, key):
    """The FFN and router fields (shared with glm4moe); key as in read_hparams."""
    hp.n_layer_dense_lead = int(key("leading_dense_block_count", 0))
    hp.n_expert_shared = int(key("expert_shared_count"))
    hp.n_ff_exp = int(key("expert_feed_forward_length"))
    hp.expert_weights_scale = float(key("expert_weights_scale", 0.0))
    hp.expert_weights_norm = bool(key("expert_weights_norm", False))
    # absent: softmax for deepseek2 (V2 files predate the key), sigmoid for glm4moe
    gating = int(key("expert_gating_func", 2 if hp.arch == "glm4moe" else 0))
    if gating not in GATING:
        raise ValueError(f"expert_gating_func {gating} not in the reference")
    hp.gating = GATING[gating]
    hp.n_group = int(key("expert_group_count", 0))
    hp.n_group_used = int(key("expert_group_used_count", 0))
    if hp.n_group > 1:
        if hp.n_expert % hp.n_group or not 0 < hp.n_group_used < hp.n_group:
            raise ValueError(f"{hp.n_expert} experts in {hp.n_group} groups, "
                             f"{hp.n_group_used} used: not a valid grouping")
        if hp.n_expert_used > hp.n_group_used * (hp.n_expert // hp.n_group):
            raise ValueError("more experts used than the used groups hold")


def read_hparams(hp, g, key):
    """Fills the deepseek2 fields of F.HParams hp from GGUF g; key(name, default) reads
    {arch}.name (no default: required)."""
    read_ffn_hparams(hp, key)
    hp.q_lora = "blk.0.attn_q_a.weight" in g.tensors
    hp.kv_lora_rank = int(key("attention.kv_lora_rank"))
    # current files: attn_k_b/attn_v_b and the per-head sizes in *_mla; legacy: attn_kv_b
    hp.legacy_kv_b = g.get(f"{hp.arch}.attention.key_length_mla") is None
    if hp.legacy_kv_b:
        hp.head_dim = int(key("attention.key_length", hp.n_embd // hp.n_head))
        hp.head_dim_v = int(key("attention.value_length", hp.n_embd // hp.n_head))
    else:
        hp.head_dim = int(key("attention.key_length_mla"))
        hp.head_dim_v = int(key("attention.value_length_mla"))
    hp.n_rot = int(key("rope.dimension_count", key("attention.key_length",
                                                    hp.n_embd // hp.n_head)))
    hp.d_nope = hp.head_dim - hp.n_rot
    if hp.d_nope < 1 or hp.n_rot % 2:
        raise ValueError(f"key length {hp.head_dim} with {hp.n_rot} rotary dims")

    scaling_type = g.get(f"{hp.arch}.rope.scaling.type", "linear")
    if scaling_type not in ("linear", "none", "yarn"):
        raise ValueError(f"rope scaling {scaling_type!r} not in the reference")
    factor = float(key("rope.scaling.factor", key("rope.scale_linear", 0.0)))
    hp.rope_freq_scale = (1.0 if scaling_type == "none" or factor == 0.0 else 1.0 / factor)
    hp.yarn_ext_factor = 1.0 if scaling_type == "yarn" else 0.0
    hp.n_ctx_orig = int(key("rope.scaling.original_context_length", key("context_length")))
    stored = g.get(f"{hp.arch}.rope.scaling.yarn_log_multiplier")
    hp.yarn_log_mul = 0.0 if stored is None else float(np.float32(stored) / np.float32(0.1))
    hp.rope_attn_factor = float(key("rope.scaling.attn_factor", 1.0))
    hp.attn_factor, hp.kq_scale = attn_scales(hp)


def get_mscale(scale, mscale):
    return 1.0 if scale <= 1.0 else 0.1 * mscale * np.log(scale) + 1.0


def attn_scales(hp):
    """-> (attn_factor, kq_scale) as llama.cpp derives them (module docstring)."""
    f = 1.0 / hp.rope_freq_scale
    attn_factor = 1.0
    if hp.yarn_ext_factor != 0.0:
        if hp.yarn_log_mul != 0.0:   # mscale / mscale_all_dim, both log_mul for deepseek2
            attn_factor = get_mscale(f, hp.yarn_log_mul) / get_mscale(f, hp.yarn_log_mul)
        else:
            attn_factor = get_mscale(f, 1.0)
        attn_factor *= 1.0 / (1.0 + 0.1 * np.log(f))
    attn_factor *= hp.rope_attn_factor
    attn_factor_org = attn_factor * (1.0 + 0.1 * np.log(f))
    mscale = attn_factor_org * (1.0 + 0.1 * hp.yarn_log_mul * np.log(f))
    return attn_factor, mscale * mscale / np.sqrt(hp.head_dim)


def yarn_corr_dims(n_rot, n_ctx_orig, base, beta_fast=YARN_BETA_FAST, beta_slow=YARN_BETA_SLOW):
    """(low, high): the pairs below low keep theta_extrap, those from high on theta_interp.
    In float32 as ggml computes them: floor/ceil make this a discrete choice."""
    def corr(beta):
        f32 = np.float32
        return (f32(n_rot) * np.log(f32(n_ctx_orig) / (f32(beta) * f32(2) * f32(np.pi)))
                / (f32(2) * np.log(f32(base))))
    return max(0.0, float(np.floor(corr(beta_fast)))), min(n_rot - 1.0,
                                                          float(np.ceil(corr(beta_slow))))


def rope_cos_sin(hp, positions):
    """cos, sin [T, n_rot/2] with the magnitude factor applied (module docstring)."""
    half = hp.n_rot // 2
    i = np.arange(half, dtype=np.float64)
    theta_extrap = (np.asarray(positions, np.float64)[:, None] *
                    hp.rope_base ** (-2.0 * i / hp.n_rot)[None, :])
    theta_interp = hp.rope_freq_scale * theta_extrap
    m = hp.attn_factor
    if hp.yarn_ext_factor != 0.0:
        low, high = yarn_corr_dims(hp.n_rot, hp.n_ctx_orig, hp.rope_base)
        ramp = (1.0 - np.clip((i - low) / max(0.001, high - low), 0.0, 1.0)) * hp.yarn_ext_factor
        theta = theta_interp * (1.0 - ramp) + theta_extrap * ramp
        m *= 1.0 + 0.1 * np.log(1.0 / hp.rope_freq_scale)
    else:
        theta = theta_interp
    return np.cos(theta) * m, np.sin(theta) * m


def rope_normal(x, cos, sin):
    """x [T, ..., n_rot] rotated by adjacent pairs (2i, 2i+1); cos, sin [T, n_rot/2]."""
    shape = (x.shape[0],) + (1,) * (x.ndim - 2) + (cos.shape[1],)
    c, s = cos.reshape(shape).astype(x.dtype), sin.reshape(shape).astype(x.dtype)
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * c - b * s
    out[..., 1::2] = a * s + b * c
    return out


def kv_b_heads(ps, p):
    """(Wk_b [n_head, kv_lora_rank, d_nope], Wv_b [n_head, d_v, kv_lora_rank]) of layer prefix
    p, from attn_k_b/attn_v_b or split from a legacy attn_kv_b."""
    m, hp = ps.m, ps.m.hp
    if not hp.legacy_kv_b:
        return m.w(p + "attn_k_b.weight"), m.w(p + "attn_v_b.weight")
    kv_b = m.w(p + "attn_kv_b.weight").reshape(hp.n_head, hp.d_nope + hp.head_dim_v, -1)
    return kv_b[:, :hp.d_nope].transpose(0, 2, 1), kv_b[:, hp.d_nope:]


def causal_softmax(scores):
    """scores [n_head, T, T] -> probabilities over the last axis, position s <= t only."""
    T = scores.shape[-1]
    causal = np.triu(np.ones((T, T), dtype=bool), k=1)
    return F.softmax(np.where(causal[None], -np.inf, scores), axis=-1)


def attention(ps, il, h):
    """MLA for layer il: h [T, n_embd] -> [T, n_embd]. The form: ps.mla ("mha", "absorbed") or,
    unset, the engine's under act_quant and MHA otherwise (module docstring)."""
    m, hp = ps.m, ps.m.hp
    T = h.shape[0]
    p = f"blk.{il}."
    src_h = p + "attn_norm"
    if hp.q_lora:
        qa = ps.linear(p + "attn_q_a.weight", h, src_h)
        qa = F.rms_norm(qa, m.w(p + "attn_q_a_norm.weight"), hp.eps)
        q = ps.linear(p + "attn_q_b.weight", qa, p + "attn_q_a_norm")
    else:
        q = ps.linear(p + "attn_q.weight", h, src_h)
    q = q.reshape(T, hp.n_head, hp.head_dim)
    cos, sin = rope_cos_sin(hp, np.arange(T))
    q_nope = q[..., :hp.d_nope]
    q_pe = rope_normal(q[..., hp.d_nope:], cos, sin)                   # [T, n_head, n_rot]

    kv = ps.linear(p + "attn_kv_a_mqa.weight", h, src_h)               # [T, kv_lora + n_rot]
    c = F.rms_norm(kv[:, :hp.kv_lora_rank], m.w(p + "attn_kv_a_norm.weight"), hp.eps)
    k_pe = rope_normal(kv[:, hp.kv_lora_rank:], cos, sin)              # [T, n_rot]
    # what the latent cache holds and attention reads back
    c = ps.kv(c, p + "kv_cmpr")
    k_pe = ps.kv(k_pe, p + "k_pe")

    form = ps.mla or ("absorbed" if ps.act_quant and not hp.legacy_kv_b
                                        else "mha")
    s_pe = np.einsum("thd,sd->hts", q_pe, k_pe)
    if form == "mha":
        if hp.legacy_kv_b:
            kvh = ps.linear(p + "attn_kv_b.weight", c, p + "kv_cmpr")
            kvh = kvh.reshape(T, hp.n_head, hp.d_nope + hp.head_dim_v)
            k_nope, v = kvh[..., :hp.d_nope], kvh[..., hp.d_nope:]
        else:
            wk_b, wv_b = kv_b_heads(ps, p)
            k_nope = np.einsum("tr,hrd->thd", ps.input(p + "attn_k_b.weight", c, p + "kv_cmpr"),
                               wk_b)
            v = np.einsum("tr,hdr->thd", ps.input(p + "attn_v_b.weight", c, p + "kv_cmpr"),
                          wv_b)
        scores = (np.einsum("thd,shd->hts", q_nope, k_nope) + s_pe) * hp.kq_scale
        probs = causal_softmax(scores)
        out = np.einsum("hts,shd->thd", probs, v)
    elif form == "absorbed":
        wk_b, wv_b = kv_b_heads(ps, p)
        kb_name = p + ("attn_kv_b.weight" if hp.legacy_kv_b else "attn_k_b.weight")
        vb_name = p + ("attn_kv_b.weight" if hp.legacy_kv_b else "attn_v_b.weight")
        qn = ps.input(kb_name, q_nope.reshape(T, -1), p + "q_nope").reshape(q_nope.shape)
        q_abs = np.einsum("thd,hrd->thr", qn, wk_b)                      # [T, n_head, kv_lora]
        scores = (np.einsum("thr,sr->hts", q_abs, c) + s_pe) * hp.kq_scale
        probs = causal_softmax(scores)
        lat = np.einsum("hts,sr->thr", probs, c)                         # [T, n_head, kv_lora]
        lat = ps.input(vb_name, lat.reshape(T, -1), p + "attn_latent").reshape(lat.shape)
        out = np.einsum("thr,hdr->thd", lat, wv_b)
    else:
        raise ValueError(f"MLA form {form!r}")
    out = out.reshape(T, hp.n_head * hp.head_dim_v)
    return ps.linear(p + "attn_output.weight", out, p + "attn_out")


def select_experts(hp, probs, bias=None):
    """-> (ids [T, k] in descending selection score, gap [T]) for router probabilities probs
    [T, n_expert]. gap: the smallest relative margin of a choice, min of the k-th vs (k+1)-th
    remaining score and the last used vs first unused group score, each (a - b) / |a| (1 where
    nothing is left out)."""
    T, E = probs.shape
    k = hp.n_expert_used
    s = probs if bias is None else probs + bias[None, :]
    gap = np.ones(T)

    def rel(a, b):
        return (a - b) / np.maximum(np.abs(a), 1e-30)

    if hp.n_group > 1:
        per = E // hp.n_group
        top2 = -np.sort(-s.reshape(T, hp.n_group, per), axis=-1)[..., :2]
        group_score = top2.sum(axis=-1)                                  # [T, n_group]
        order = np.argsort(-group_score, axis=-1, kind="stable")
        g_sorted = np.take_along_axis(group_score, order, axis=-1)
        gap = np.minimum(gap, rel(g_sorted[:, hp.n_group_used - 1], g_sorted[:, hp.n_group_used]))
        keep = np.zeros((T, hp.n_group), dtype=bool)
        np.put_along_axis(keep, order[:, :hp.n_group_used], True, axis=-1)
        s = np.where(np.repeat(keep, per, axis=-1), s, -np.inf)
    ids = np.argsort(-s, axis=-1, kind="stable")[:, :k]
    ranked = -np.sort(-s, axis=-1)
    if k < E:
        nxt = ranked[:, k]
        gap = np.minimum(gap, np.where(np.isfinite(nxt), rel(ranked[:, k - 1], nxt), 1.0))
    return ids, gap


def route(ps, il, h):
    """-> (ids [T, k], weights [T, k]) for the MoE layer il (module docstring)."""
    m, hp = ps.m, ps.m.hp
    p = f"blk.{il}."
    logits = h @ m.w(p + "ffn_gate_inp.weight").T                     # [T, n_expert]
    probs = F.softmax(logits, axis=-1) if hp.gating == "softmax" else 1.0 / (1.0 + np.exp(-logits))
    ids, gap = select_experts(hp, probs, m.opt(p + "exp_probs_b.bias"))
    ps.router_gap = np.minimum(ps.router_gap, gap)
    w = np.take_along_axis(probs, ids, axis=-1)
    if hp.expert_weights_norm:
        w = w / np.maximum(w.sum(axis=-1, keepdims=True), WEIGHTS_SUM_MIN)
    if hp.expert_weights_scale not in (0.0, 1.0):
        w = w * hp.expert_weights_scale
    return ids, w


def swiglu(ps, p, suffix, h, src):
    """down(silu(gate h) * up h) with the weights blk.N.ffn_{gate,up,down}{suffix}."""
    a = (F.silu(ps.linear(p + f"ffn_gate{suffix}.weight", h, src)) *
         ps.linear(p + f"ffn_up{suffix}.weight", h, src))
    return ps.linear(p + f"ffn_down{suffix}.weight", a, p + f"ffn_hidden{suffix}")


def ffn(ps, il, h):
    """The FFN of layer il: h [T, n_embd] -> [T, n_embd]."""
    p = f"blk.{il}."
    if il < ps.m.hp.n_layer_dense_lead:
        return swiglu(ps, p, "", h, p + "ffn_norm")
    ids, w = route(ps, il, h)
    out = F.routed_experts(ps, il, h, ids, w)
    if ps.m.has(p + "ffn_gate_shexp.weight"):
        out = out + swiglu(ps, p, "_shexp", h, p + "ffn_norm")
    return out

