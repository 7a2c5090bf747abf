"""The hybrid gated-DeltaNet MoE architectures qwen3next (Qwen3-Next) and qwen35moe (Qwen3.5
MoE) for the reference forward pass (forward.py), written from the model definitions (the Hugging
Face Qwen3-Next modelling, as llama.cpp's converter lays the tensors out); forward.py
dispatches here.

Layers. block_count includes the NextN (multi-token prediction) blocks, nextn_predict_layers
of them at the end, which a forward pass never runs: n_layer = block_count - nextn. Layer il
is a full-attention layer when (il + 1) % full_attention_interval == 0, else a gated DeltaNet
layer. Every layer: x += attn(rms_norm(x) * attn_norm); x += ffn(rms_norm(x) *
post_attention_norm).

Gated DeltaNet layer, h = rms_norm(x) * attn_norm [T, n_embd]. Sizes: H_k = ssm.group_count key
heads and H_v = ssm.time_step_rank value heads of S = ssm.state_size (d_inner = ssm.inner_size
= H_v * S), r = H_v / H_k, C = 2 H_k S + H_v S conv channels, d_conv = ssm.conv_kernel.
    qkv = h Wqkv^T   (attn_qkv, C rows: [q (H_k x S) | k (H_k x S) | v (H_v x S)])
    z   = h Wz^T     (attn_gate, H_v x S rows)
    b, a [H_v]:      qwen3next: h Wba^T (ssm_ba, 2 H_v rows), per KEY head g the b of its r
                     value heads, then their a: value head h = g r + j has b at row 2 g r + j
                     and a at row 2 g r + r + j
                     qwen35moe: h Wbeta^T and h Walpha^T (ssm_beta, ssm_alpha, H_v rows each)
    beta = sigmoid(b);  g = softplus(a + ssm_dt.bias) * ssm_a    (ssm_a = -exp(A_log) < 0)
        softplus(x) = x if x > 20 else ln(1 + e^x)
    conv (per channel c, causal, over the tokens of the sequence, zeros before position 0):
        u_t[c] = silu(sum_{i=0}^{d_conv-1} w[c][i] qkv_{t-(d_conv-1)+i}[c])
        w = ssm_conv1d [C, d_conv], oldest input first
    u_t = [q (H_k heads of S) | k (H_k of S) | v (H_v of S)]; q, k per head: x / max(|x|, eps)
    value head h reads key head kh(h) = h // r in qwen3next (grouped: llama.cpp repeats each key
        head r times in place) and h % H_k in qwen35moe (tiled: the key heads repeated as a
        block)
    per value head h, the state M_h [S, S] (zero at position 0), token by token:
        M_h = exp(g_h) M_h
        d   = beta_h (v_h - M_h^T k)          (M^T k: sum_i M[i][j] k[i] for each j)
        M_h = M_h + k d^T                     (M[i][j] += k[i] d[j])
        o_h = M_h^T q / sqrt(S)
      with q, k of key head kh(h)
    o_h = rms_norm(o_h) * ssm_norm * silu(z_h)     (over the head's S values, eps rms_eps)
    out = [o_0 ... o_{H_v-1}] Wout^T               (ssm_out)

Full-attention layer (GQA with an output gate), h as above, heads of d = key_length (default
n_embd / n_head):
    [q_h | gate_h] per head = h Wq^T              (attn_q: 2 n_head d rows, per head q then gate)
    k, v = h Wk^T, h Wv^T                         (n_head_kv heads)
    q, k: rms_norm per head * attn_q_norm / attn_k_norm
    RoPE NEOX (pairs (i, i + n_rot/2)) over the first n_rot = rope.dimension_count dims of each
        head, theta_i = pos * base^(-2i/n_rot); qwen35moe's M-RoPE (rope.dimension_sections)
        gives every section the same position for a text token, so it is this same rotation
    causal softmax attention, query head h reads kv head h // (n_head / n_head_kv), scale
        1/sqrt(d)
    out = (attn * sigmoid(gate)) Wo^T             (elementwise per head; attn_output)
FFN, h = rms_norm(x) * post_attention_norm: p = softmax(h Wr^T), top-k, weights renormalised
    to sum 1, SwiGLU experts (forward.routed_experts), plus the shared expert SwiGLU(ffn_*_shexp)
    times sigmoid(h . ffn_gate_inp_shexp) (forward.moe).

Numerical method (forward.py's Pass): under act_quant every product with a quantized weight reads
int8 blocks of its input: attn_qkv, attn_gate, ssm_ba / ssm_beta / ssm_alpha (all reading the
normed input once, src "blk.N.attn_norm"), ssm_out (src "blk.N.ssm_gated"), attn_q/k/v,
attn_output (src "blk.N.attn_out") and the FFN's. The conv, the state and everything else are
float; with kv_f16 the full-attention layers' K (after RoPE) and V are rounded to f16.

MUTATIONS: deliberate errors (hp.mutations) for showing that a comparison can fail:
    key-heads      value heads read the other key-head order (grouped <-> tiled)
    conv-state     the conv sees no earlier tokens (each token's history is zeros)
    delta-state    the state does not carry over between tokens (zero before every token)
    ba-halves      qwen3next's ssm_ba read as all b rows, then all a rows
"""

import numpy as np

import forward as F

ARCHS = ("qwen3next", "qwen35moe")
MUTATIONS = ("key-heads", "conv-state", "delta-state", "ba-halves")
SOFTPLUS_LINEAR = 20.0   # softplus(x) = x above this (llama.cpp / torch's threshold)


def read_hparams(hp, g, key):
    """Fills the qwen3next / qwen35moe fields of F.HParams hp from GGUF g."""
    hp.n_layer -= int(key("nextn_predict_layers", 0))
    hp.n_ff_exp = int(key("expert_feed_forward_length"))
    hp.d_conv = int(key("ssm.conv_kernel"))
    hp.d_inner = int(key("ssm.inner_size"))
    hp.d_state = int(key("ssm.state_size"))
    hp.n_k_heads = int(key("ssm.group_count"))
    hp.n_v_heads = int(key("ssm.time_step_rank"))
    hp.full_attn_interval = int(key("full_attention_interval", 4))
    if hp.n_v_heads % hp.n_k_heads or hp.d_inner != hp.n_v_heads * hp.d_state:
        raise ValueError(f"{hp.n_k_heads} key heads, {hp.n_v_heads} value heads of "
                         f"{hp.d_state}, inner size {hp.d_inner}: not a DeltaNet layout")
    if g.get(f"{hp.arch}.attention.recurrent_layers") is not None:
        raise ValueError("an explicit recurrent-layer list is not in the reference")
    hp.key_heads_grouped = hp.arch == "qwen3next"
    if hp.n_rot % 2 or hp.n_rot > hp.head_dim:
        raise ValueError(f"{hp.n_rot} rotary dims of {hp.head_dim}")
    sections = g.get(f"{hp.arch}.rope.dimension_sections")
    if sections is not None and sum(int(s) for s in sections) != hp.n_rot // 2:
        raise ValueError(f"rope sections {list(sections)} do not cover {hp.n_rot // 2} pairs")
    if g.get(f"{hp.arch}.rope.scaling.type", "none") not in ("none", "linear") or \
            float(g.get(f"{hp.arch}.rope.scaling.factor", 0.0)) not in (0.0, 1.0):
        raise ValueError("rope scaling is not in the reference")
    hp.rope_freq_scale = 1.0
    hp.kq_scale = 1.0 / np.sqrt(hp.head_dim)
    if hp.head_dim != hp.head_dim_v:
        raise ValueError("key_length != value_length is not in the reference")
    hp.mutations = set()


def is_recurrent(hp, il):
    return (il + 1) % hp.full_attn_interval != 0


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softplus(x):
    return np.where(x > SOFTPLUS_LINEAR, x, np.log1p(np.exp(np.minimum(x, SOFTPLUS_LINEAR))))


def l2_norm(x, eps):
    """x / max(|x|, eps) along the last axis."""
    return x / np.maximum(np.sqrt(np.sum(x * x, axis=-1, keepdims=True)), eps)


def key_heads(n_k_heads, n_v_heads, grouped):
    """kh(h) for every value head h: h // r (grouped) or h % n_k_heads (tiled)."""
    h = np.arange(n_v_heads)
    return h // (n_v_heads // n_k_heads) if grouped else h % n_k_heads


def split_ba(ba, n_k_heads, n_v_heads):
    """qwen3next's ssm_ba output [T, 2 H_v] -> (b, a) [T, H_v]: per key head g, r b then r a."""
    r = n_v_heads // n_k_heads
    per_key = ba.reshape(ba.shape[0], n_k_heads, 2 * r)
    return (per_key[:, :, :r].reshape(-1, n_v_heads), per_key[:, :, r:].reshape(-1, n_v_heads))


def conv_step(history, x, w):
    """One token of the causal conv: history [d_conv - 1, C] (the earlier inputs, oldest
    first), x [C] -> (sum_i w[c][i] window[i][c] per channel c (before silu), the new history),
    window = history then x; w [C, d_conv]."""
    window = np.concatenate([history, x[None, :]], axis=0)        # [d_conv, C]
    return np.einsum("ic,ci->c", window, w), window[1:]


def delta_rule_step(state, q, k, v, g, beta):
    """One token of one value head: state M [S, S] -> (o [S], the new M), for q, k, v [S]
    and scalars g (log decay), beta (module docstring). M[i][j]: key index i, value index j."""
    m = np.exp(g) * state
    d = beta * (v - m.T @ k)
    m = m + np.outer(k, d)
    return m.T @ q / np.sqrt(len(q)), m


def deltanet(ps, il, h):
    """The gated DeltaNet layer il: h [T, n_embd] -> [T, n_embd], token by token."""
    m, hp = ps.m, ps.m.hp
    T = h.shape[0]
    p = f"blk.{il}."
    Hk, Hv, S = hp.n_k_heads, hp.n_v_heads, hp.d_state
    nk = Hk * S
    src = p + "attn_norm"
    qkv = ps.linear(p + "attn_qkv.weight", h, src)                 # [T, C]
    z = ps.linear(p + "attn_gate.weight", h, src).reshape(T, Hv, S)
    if hp.arch == "qwen3next":
        ba = ps.linear(p + "ssm_ba.weight", h, src)                # [T, 2 H_v]
        if "ba-halves" in hp.mutations:
            b, a = ba[:, :Hv], ba[:, Hv:]
        else:
            b, a = split_ba(ba, Hk, Hv)
    else:
        b = ps.linear(p + "ssm_beta.weight", h, src)               # [T, H_v]
        a = ps.linear(p + "ssm_alpha.weight", h, src)
    beta = sigmoid(b)
    g = softplus(a + m.w(p + "ssm_dt.bias")) * m.w(p + "ssm_a")    # [T, H_v], <= 0
    w = m.w(p + "ssm_conv1d.weight")                               # [C, d_conv]
    grouped = hp.key_heads_grouped != ("key-heads" in hp.mutations)
    kh = key_heads(Hk, Hv, grouped)

    history = np.zeros((hp.d_conv - 1, qkv.shape[1]), dtype=h.dtype)
    state = np.zeros((Hv, S, S), dtype=h.dtype)
    out = np.zeros((T, Hv, S), dtype=h.dtype)
    for t in range(T):
        if "conv-state" in hp.mutations:
            history = np.zeros_like(history)
        if "delta-state" in hp.mutations:
            state = np.zeros_like(state)
        c, history = conv_step(history, qkv[t], w)
        u = F.silu(c)
        q = l2_norm(u[:nk].reshape(Hk, S), hp.eps)
        k = l2_norm(u[nk:2 * nk].reshape(Hk, S), hp.eps)
        v = u[2 * nk:].reshape(Hv, S)
        for hv in range(Hv):
            out[t, hv], state[hv] = delta_rule_step(state[hv], q[kh[hv]], k[kh[hv]], v[hv],
                                                    g[t, hv], beta[t, hv])
    o = F.rms_norm(out, m.w(p + "ssm_norm.weight"), hp.eps) * F.silu(z)
    return ps.linear(p + "ssm_out.weight", o.reshape(T, Hv * S), p + "ssm_gated")


def gated_attention(ps, il, h):
    """The full-attention layer il: h [T, n_embd] -> [T, n_embd]."""
    m, hp = ps.m, ps.m.hp
    T = h.shape[0]
    p = f"blk.{il}."
    d = hp.head_dim
    src = p + "attn_norm"
    qg = ps.linear(p + "attn_q.weight", h, src).reshape(T, hp.n_head, 2 * d)
    q, gate = qg[..., :d], qg[..., d:]
    k = ps.linear(p + "attn_k.weight", h, src).reshape(T, hp.n_head_kv, d)
    v = ps.linear(p + "attn_v.weight", h, src).reshape(T, hp.n_head_kv, d)
    q = F.rms_norm(q, m.w(p + "attn_q_norm.weight"), hp.eps)
    k = F.rms_norm(k, m.w(p + "attn_k_norm.weight"), hp.eps)
    q = F.rope(q, hp.n_rot, hp.rope_base, hp.rope_freq_scale, True)
    k = ps.kv(F.rope(k, hp.n_rot, hp.rope_base, hp.rope_freq_scale, True), p + "k")
    v = ps.kv(v, p + "v")
    kv_of = np.arange(hp.n_head) // (hp.n_head // hp.n_head_kv)
    scores = np.einsum("thd,shd->hts", q, k[:, kv_of, :]) * hp.kq_scale   # [n_head, T, T]
    causal = np.triu(np.ones((T, T), dtype=bool), k=1)
    probs = F.softmax(np.where(causal[None], -np.inf, scores), axis=-1)
    out = np.einsum("hts,shd->thd", probs, v[:, kv_of, :]) * sigmoid(gate)
    return ps.linear(p + "attn_output.weight", out.reshape(T, hp.n_head * d), p + "attn_out")


def attention(ps, il, h):
    return (deltanet if is_recurrent(ps.m.hp, il) else gated_attention)(ps, il, h)
