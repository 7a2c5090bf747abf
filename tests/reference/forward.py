"""Reference forward pass (numpy) for the MoE architectures moetier supports.

Written from the model definitions, independent of moetier's C++ engine:
    x = token_embd[tokens]
    for each layer:
        h = rms_norm(x) * attn_norm
        q, k, v = h Wq^T (+bq), h Wk^T (+bk), h Wv^T (+bv)
        q/k norm: qwen3moe per head (weight [head_dim]); olmoe over the whole projection
        RoPE at positions 0..T-1, theta_i = pos * base^(-2i/n_rot)
            NEOX (qwen3moe, olmoe, qwen2moe): rotate the pairs (i, i + n_rot/2)
            NORMAL (llama/Mixtral): rotate the pairs (2i, 2i + 1)
            linear scaling ({arch}.rope.scaling.factor) multiplies theta by 1/factor; llama's
            optional rope_freqs.weight [n_rot/2] divides theta_i by its i-th entry
        causal GQA attention, query head h reads kv head h // (n_head / n_head_kv),
            scale 1/sqrt(head_dim); x += attn Wo^T
        h = rms_norm(x) * ffn_norm
        p = softmax(h Wr^T) over all experts; top-k (descending) ids and their p
        renormalise the k weights to sum 1 (qwen3moe, llama) or not (olmoe, qwen2moe)
        moe = sum over slots s in order of w_s * down_e(silu(gate_e h) * up_e h)
        qwen2moe: moe += sigmoid(h . ffn_gate_inp_shexp) * down_sh(silu(gate_sh h) * up_sh h)
        x += moe
    logits = (rms_norm(x) * output_norm) W_out^T   (W_out = token_embd when `output` is absent)
rms_norm(x) = x / sqrt(mean(x^2) + eps), eps = {arch}.attention.layer_norm_rms_epsilon.
deepseek2 has the same residual stream, output and numerical method, with its own attention
(multi-head latent attention, YaRN) and FFN (dense leading layers; sigmoid or softmax routing
with selection bias and expert groups; shared experts): deepseek2.py. gpt-oss (sinks, sliding
window, clamped SwiGLU): gptoss.py. qwen3next and qwen35moe (gated DeltaNet layers, token by
token, between full-attention layers with an output gate; qwen2moe's gated shared expert,
renormalised): qwen3next.py.

Weights are dequantized exactly (dequant.py); all arithmetic runs in `dtype` (float64 by default).
float64 matters: a float32 run of this same code differs from the float64 one by max|d|/std
4e-6 (tiny) to 2.2e-5 (olmoe-tiny), more than moetier's own float32 error (1e-6 to 6e-6).

act_quant=True models the engine's numerical method for quantized weights (kernels/matmul.h)
instead of the exact product: every matrix product x W^T whose weight W has a quantized type
first replaces each token's input x by x_q = q * d, blockwise along the row:
    K-quants (Q4_K Q5_K Q6_K):  blocks of 256;   Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 MXFP4: blocks of 32
    d = amax / 127, q = round_half_even(x * (127 / amax)), q in [-127, 127]; q = d = 0 if
    amax = 0, computed in float32 as the engine does
(the rest of the product stays exact). F32/F16/BF16 weights read x unchanged, as do the
router, the shared-expert gate vector, the norms and the embedding lookup. The products
concerned: attention q/k/v/output (deepseek2: its MLA projections, deepseek2.py), dense,
expert and shared-expert gate/up/down, and the output head, each by its own tensor's type
(attn_k may be Q8_0 while attn_q is Q4_K: the same x is then quantized twice, differently).
kv_f16=True rounds K (after RoPE) and V to float16 as the engine's f16 KV cache stores them
(deepseek2: the latent and k_pe of each token, its cache's contents).
Both are roundings, so a value within float error of a rounding boundary may round the other
way in the engine; Pass names such elements and can flip them (compare_logits.py uses this).

Command line: forward.py MODEL.gguf TOKEN_ID... [--out logits.npy] [--f32] [--act-quant]
              [--kv-f16] [--mla mha|absorbed]
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dequant import dequantize, tensor_f32, tensor_rows_f32  # noqa: E402
from gguf_reader import GGUFFile  # noqa: E402
import deepseek2  # noqa: E402  (imports this module back; uses it only at call time)
import gptoss  # noqa: E402  (likewise)
import qwen3next  # noqa: E402  (likewise)

ARCHS = ("qwen3moe", "olmoe", "llama", "qwen2moe", "deepseek2", "glm4moe", "gpt-oss",
         "qwen3next", "qwen35moe")
NEOX = {"qwen3moe": True, "olmoe": True, "qwen2moe": True, "llama": False, "glm4moe": True}
RENORM = {"qwen3moe": True, "olmoe": False, "qwen2moe": False, "llama": True,
          "qwen3next": True, "qwen35moe": True}
# a shared expert gated by sigmoid(h . ffn_gate_inp_shexp)
GATED_SHEXP = ("qwen2moe", "qwen3next", "qwen35moe")


class HParams:
    def __init__(self, g):
        arch = g.get("general.architecture")
        if arch not in ARCHS:
            raise ValueError(f"unsupported architecture {arch!r}")
        self.arch = arch

        def key(name, default=None):
            v = g.get(f"{arch}.{name}", default)
            if v is None:
                raise ValueError(f"missing key {arch}.{name}")
            return v

        self.n_layer = int(key("block_count"))
        self.n_embd = int(key("embedding_length"))
        self.n_head = int(key("attention.head_count"))
        self.n_head_kv = int(key("attention.head_count_kv", self.n_head))
        self.head_dim = int(key("attention.key_length", self.n_embd // self.n_head))
        self.head_dim_v = int(key("attention.value_length", self.n_embd // self.n_head))
        self.n_rot = int(key("rope.dimension_count", self.head_dim))
        self.rope_base = float(key("rope.freq_base", 10000.0))
        self.eps = float(key("attention.layer_norm_rms_epsilon"))
        self.n_expert = int(key("expert_count"))
        self.n_expert_used = int(key("expert_used_count"))
        if arch == "deepseek2":
            deepseek2.read_hparams(self, g, key)
            return
        if arch == "gpt-oss":
            gptoss.read_hparams(self, g, key)
            return
        if arch in qwen3next.ARCHS:
            qwen3next.read_hparams(self, g, key)
            return
        if arch == "glm4moe":  # deepseek2's FFN and router fields (no groups), GQA attention
            self.n_layer -= int(key("nextn_predict_layers", 0))
            deepseek2.read_ffn_hparams(self, key)
        scaling_type = g.get(f"{arch}.rope.scaling.type", "linear")
        if scaling_type not in ("linear", "none"):
            raise ValueError(f"rope scaling {scaling_type!r} not in the reference")
        factor = float(g.get(f"{arch}.rope.scaling.factor",
                             g.get(f"{arch}.rope.scale_linear", 0.0)))
        self.rope_freq_scale = 1.0 if factor == 0.0 else 1.0 / factor
        # Always 1/sqrt(head_dim): llama.cpp reads {arch}.attention.scale only for granite.
        self.kq_scale = 1.0 / np.sqrt(self.head_dim)
        if self.n_rot != self.head_dim and arch != "glm4moe":
            raise ValueError("partial rotary embeddings are not in the reference")
        if self.head_dim != self.head_dim_v:
            raise ValueError("key_length != value_length is not in the reference")


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


# Elements of the output matrix kept dequantized (float32) between passes: 64 Mi, 256 MiB.
HEAD_CACHE = 1 << 26

# Activation block size by weight type under act_quant; None: the input stays as it is.
ACT_BLOCK = {
    "Q4_K": 256, "Q5_K": 256, "Q6_K": 256,
    "Q8_0": 32, "Q4_0": 32, "Q4_1": 32, "Q5_0": 32, "Q5_1": 32, "MXFP4": 32,
    "F32": None, "F16": None, "BF16": None,
}


def quantize_blocks(x, block, flip=()):
    """x [T, n] (n a multiple of block) -> (xq, v): xq = q * d per block of `block` along a
    row: d = amax / 127, q = round_half_even(x * (127 / amax)) (np.rint), all zero where
    amax = 0; v = x * (127 / amax), the value q rounds. flip: (row, column) pairs whose q
    takes the other neighbour of v instead (see Pass).
    Computed in float32 as the engine does (x, 127 / amax, the product and d each rounded to
    float32): this matters only where v is a half-integer to within float32 rounding, e.g.
    an f16 V read back at position 0 (the attention output is then V itself), whose exact
    ties the float32 scale 127 / amax decides."""
    x32 = x.astype(np.float32).reshape(x.shape[0], x.shape[1] // block, block)
    amax = np.max(np.abs(x32), axis=-1, keepdims=True)
    nonzero = amax > 0
    inv = np.where(nonzero, np.float32(127) / np.where(nonzero, amax, np.float32(1)),
                   np.float32(0)).astype(np.float32)
    v = (x32 * inv).reshape(x.shape).astype(np.float64)
    q = np.rint(np.clip(v, -127.0, 127.0))
    for r, c in flip:
        q[r, c] += 1.0 if v[r, c] > q[r, c] else -1.0
    d = (amax / np.float32(127)).astype(np.float32).astype(np.float64)
    return (q.reshape(x32.shape) * d).astype(x.dtype).reshape(x.shape), v


class Pass:
    """The numerical method of one forward pass, and what it records on the way.

    act_quant: quantize the inputs of quantized-weight products (module docstring).
    kv_f16:    round K (after RoPE) and V to float16, as a KV cache of type f16 stores them
               (deepseek2: the latent and k_pe, deepseek2.py).
    mla:       deepseek2's attention form, "mha", "absorbed" or None (deepseek2.attention).
    Both round, and a value within the float error of a float32 engine of a rounding
    boundary can round either way there. Such an element is named by a key
    (src, kind, position, column) and its distance to the boundary is its margin:
      activations: src names the float tensor quantized (the engine quantizes one input once
                   per format, whatever reads it: attn_q/k/v, or every expert of a token),
                   kind is the block size (32, 256); margin: the distance of x * 127 / amax
                   to a half-integer, in units of q
      f16 K / V:   src "blk.N.k" / "blk.N.v", kind "f16", column the element in the row of
                   n_head_kv * head_dim (deepseek2: "blk.N.kv_cmpr" / "blk.N.k_pe", the latent
                   and the rotated k_pe of a token); margin: the distance to the midpoint of
                   the two neighbouring f16 values, in units of their spacing
    flips:     keys that round to the other neighbour
    ambiguous: (activation margin, f16 margin): record the keys with a smaller margin in
               `candidates`
    Recorded per position t:
      router_gap[t]  min over layers of the relative top-k gap (p_k - p_k+1) / p_k (1 if k = E)
      act_margin[t]  min activation margin over every quantized input of position t (inf if
                     none)
      candidates[t]  {key: margin} of the ambiguous elements of position t
    """

    def __init__(self, model, n_tokens, act_quant=False, kv_f16=False, flips=(),
                 ambiguous=(0.0, 0.0), mla=None):
        self.m = model
        self.act_quant = act_quant
        self.kv_f16 = kv_f16
        self.mla = mla
        self.flips = {}                     # (src, kind, position) -> [column]
        for src, kind, t, c in flips:
            self.flips.setdefault((src, kind, t), []).append(c)
        self.ambiguous = ambiguous
        self.router_gap = np.ones(n_tokens)
        self.act_margin = np.full(n_tokens, np.inf)
        self.candidates = [{} for _ in range(n_tokens)]

    def _flipped(self, src, kind, pos):
        """[(row, column)] to flip among rows of positions pos."""
        return [(r, c) for r, t in enumerate(pos) for c in self.flips.get((src, kind, t), ())]

    def _record(self, src, kind, pos, margin, limit):
        for r, c in zip(*np.nonzero(margin < limit)):
            self.candidates[pos[r]][(src, kind, int(pos[r]), int(c))] = float(margin[r, c])

    def input(self, name, x, src, pos=None):
        """What the product with weight tensor `name` reads for rows x [T', n] of the float
        tensor `src` at positions `pos` (default: row t is position t): x, or under act_quant
        its blockwise quantized copy for that tensor's type."""
        if not self.act_quant:
            return x
        type_name = self.m.g.tensors[name].type_name
        if type_name not in ACT_BLOCK:
            raise ValueError(f"act_quant: no activation format for {name} of type {type_name}")
        block = ACT_BLOCK[type_name]
        if block is None:
            return x
        pos = np.arange(x.shape[0]) if pos is None else pos
        xq, v = quantize_blocks(x, block, self._flipped(src, block, pos))
        margin = np.abs(np.abs(v - np.rint(v)) - 0.5)
        np.minimum.at(self.act_margin, pos, margin.min(axis=1))
        self._record(src, block, pos, margin, self.ambiguous[0])
        return xq

    def linear(self, name, x, src, bias=None):
        """x W^T (+ bias) for the 2-D weight tensor `name`, x one row per position."""
        y = self.input(name, x, src) @ self.m.w(name).T
        b = self.m.opt(bias) if bias else None
        return y if b is None else y + b

    def kv(self, x, src):
        """K or V [T, n_head_kv, head_dim] (deepseek2: the latent or k_pe [T, n]) as the
        attention reads them back from the cache (engine: float32 -> f16)."""
        if not self.kv_f16:
            return x
        flat = x.reshape(x.shape[0], -1)
        h = flat.astype(np.float32).astype(np.float16)
        # the f16 neighbour on the other side of x (h itself where x is exactly h)
        toward = np.where(flat > h, np.float16(np.inf), np.float16(-np.inf)).astype(np.float16)
        other = np.nextafter(h, toward)
        spacing = np.abs(other.astype(np.float64) - h)
        margin = np.abs(np.abs(flat - h) / np.where(spacing > 0, spacing, 1) - 0.5)
        margin[flat == h] = 0.5
        pos = np.arange(x.shape[0])
        self._record(src, "f16", pos, margin, self.ambiguous[1])
        for r, c in self._flipped(src, "f16", pos):
            h[r, c] = other[r, c]
        return h.astype(x.dtype).reshape(x.shape)


def rope(x, n_rot, base, freq_scale, neox, freq_factors=None):
    """x: [T, n_heads, head_dim] at positions 0..T-1 -> rotated copy.
    freq_factors [n_rot/2] (llama's optional rope_freqs.weight) divide each theta_i."""
    T = x.shape[0]
    half = n_rot // 2
    inv_freq = base ** (-2.0 * np.arange(half, dtype=np.float64) / n_rot)
    if freq_factors is not None:
        inv_freq = inv_freq / np.asarray(freq_factors, np.float64)
    theta = freq_scale * np.arange(T, dtype=np.float64)[:, None] * inv_freq[None, :]  # [T, half]
    cos = np.cos(theta)[:, None, :].astype(x.dtype)
    sin = np.sin(theta)[:, None, :].astype(x.dtype)
    out = x.copy()
    if neox:
        a, b = x[..., :half], x[..., half:n_rot]
        out[..., :half] = a * cos - b * sin
        out[..., half:n_rot] = a * sin + b * cos
    else:
        a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = a * cos - b * sin
        out[..., 1:n_rot:2] = a * sin + b * cos
    return out


class Model:
    """A GGUF model loaded for the reference forward pass (weights dequantized lazily)."""

    def __init__(self, path, dtype=np.float64):
        self.g = GGUFFile(path)
        self.hp = HParams(self.g)
        self.dtype = dtype
        self._cache = {}
        self._head = None

    def has(self, name):
        return name in self.g.tensors

    def w(self, name):
        if name not in self._cache:
            if name not in self.g.tensors:
                raise KeyError(f"tensor {name} missing from {self.g.path}")
            self._cache[name] = tensor_f32(self.g, name).astype(self.dtype)
        return self._cache[name]

    def opt(self, name):
        return self.w(name) if self.has(name) else None

    def embed(self, tokens):
        return tensor_rows_f32(self.g, "token_embd.weight", tokens).astype(self.dtype)

    def output_logits(self, x, ps=None, pos=None):
        """x [T, n_embd] -> x W_out^T [T, n_vocab]; ps: the Pass whose numerical method applies
        (default exact) and pos the positions of the rows of x (default 0..T-1). W_out, the
        largest tensor, is kept as float32 (exact: the dequantized values are float32) up to
        HEAD_CACHE elements, else dequantized a slab at a time."""
        name = "output.weight" if self.has("output.weight") else "token_embd.weight"
        if ps is not None:
            x = ps.input(name, x, "output_norm", pos)
        t = self.g.tensors[name]
        n_vocab = t.shape[0]
        if self._head is None and n_vocab * t.shape[1] <= HEAD_CACHE:
            self._head = dequantize(t.type_name, self.g.raw(name))   # [n_vocab, n_embd]
        out = np.empty((x.shape[0], n_vocab), dtype=self.dtype)
        step = 8192
        for r in range(0, n_vocab, step):
            w = (self._head[r:r + step] if self._head is not None else
                 dequantize(t.type_name, self.g.raw(name)[r:r + step]))
            # einsum without BLAS: numpy's own loop beats the reference BLAS that Debian's
            # numpy falls back to by about 2x here.
            out[:, r:r + step] = np.einsum("td,vd->tv", x, w.astype(self.dtype), optimize=False)
        return out


def attention(ps, il, h):
    m = ps.m
    hp = m.hp
    T = h.shape[0]
    p = f"blk.{il}."

    def proj(name, x, src):
        return ps.linear(p + name + ".weight", x, p + src, bias=p + name + ".bias")

    q, k, v = (proj(name, h, "attn_norm") for name in ("attn_q", "attn_k", "attn_v"))
    if hp.arch == "olmoe":  # RMSNorm over the whole q / k projection
        q = rms_norm(q, m.w(p + "attn_q_norm.weight"), hp.eps)
        k = rms_norm(k, m.w(p + "attn_k_norm.weight"), hp.eps)
    q = q.reshape(T, hp.n_head, hp.head_dim)
    k = k.reshape(T, hp.n_head_kv, hp.head_dim)
    v = v.reshape(T, hp.n_head_kv, hp.head_dim)
    if hp.arch == "qwen3moe" or (hp.arch == "glm4moe" and m.has(p + "attn_q_norm.weight")):
        # RMSNorm of each head's vector (optional in glm4moe: GLM-4.5 has it, Air not)
        q = rms_norm(q, m.w(p + "attn_q_norm.weight"), hp.eps)
        k = rms_norm(k, m.w(p + "attn_k_norm.weight"), hp.eps)
    ff = m.opt("rope_freqs.weight") if hp.arch == "llama" else None
    q = rope(q, hp.n_rot, hp.rope_base, hp.rope_freq_scale, NEOX[hp.arch], ff)
    k = ps.kv(rope(k, hp.n_rot, hp.rope_base, hp.rope_freq_scale, NEOX[hp.arch], ff), p + "k")
    v = ps.kv(v, p + "v")

    group = hp.n_head // hp.n_head_kv
    kv_of = np.arange(hp.n_head) // group
    kh = k[:, kv_of, :]                      # [T, n_head, hd]
    vh = v[:, kv_of, :]
    scores = np.einsum("thd,shd->hts", q, kh) * hp.kq_scale  # [n_head, T, T]
    causal = np.triu(np.ones((T, T), dtype=bool), k=1)
    scores = np.where(causal[None], -np.inf, scores)
    probs = softmax(scores, axis=-1)
    out = np.einsum("hts,shd->thd", probs, vh).reshape(T, hp.n_head * hp.head_dim)
    return proj("attn_output", out, "attn_out")


def route(ps, il, h):
    """-> (ids [T, k] in descending probability, weights [T, k]). The router reads h as it
    is (its weights are floats in the engine, never an activation format)."""
    m = ps.m
    hp = m.hp
    logits = h @ m.w(f"blk.{il}.ffn_gate_inp.weight").T     # [T, n_expert]
    probs = softmax(logits, axis=-1)
    # descending order; among equal probabilities the lower expert id first
    ids = np.argsort(-probs, axis=-1, kind="stable")[:, :hp.n_expert_used]
    w = np.take_along_axis(probs, ids, axis=-1)
    k = hp.n_expert_used
    if k < hp.n_expert:
        s = -np.sort(-probs, axis=-1)
        ps.router_gap = np.minimum(ps.router_gap, (s[:, k - 1] - s[:, k]) / s[:, k - 1])
    if RENORM[hp.arch]:
        # llama.cpp clamps the sum below at 6.103515625e-5 (the smallest normal f16)
        w = w / np.maximum(w.sum(axis=-1, keepdims=True), 6.103515625e-5)
    return ids, w


def routed_experts(ps, il, h, ids, w, act=None):
    """sum over slots s, in order, of w[:, s] * down_e(act(gate_e h, up_e h)), e = ids[:, s]:
    h [T, n_embd], ids and w [T, n_expert_used]; act(g, u) = silu(g) * u unless given. Where
    the layer has per-expert biases (gpt-oss: ffn_{gate,up,down}_exps.bias, [n_expert, n]),
    each product adds its expert's."""
    m = ps.m
    hp = m.hp
    T = h.shape[0]
    p = f"blk.{il}."
    gate_name, up_name, down_name = (p + f"ffn_{n}_exps.weight" for n in ("gate", "up", "down"))
    gate = m.w(gate_name)   # [n_expert, n_ff_exp, n_embd]
    up = m.w(up_name)       # [n_expert, n_ff_exp, n_embd]
    down = m.w(down_name)   # [n_expert, n_embd, n_ff_exp]
    bias = [m.opt(p + f"ffn_{n}_exps.bias") for n in ("gate", "up", "down")]
    bias = [np.zeros((hp.n_expert, 1)) if b is None else b for b in bias]
    act = act or (lambda g, u: silu(g) * u)
    slot_out = np.zeros((T, hp.n_expert_used, hp.n_embd), dtype=h.dtype)
    for e in np.unique(ids):
        t_idx, s_idx = np.nonzero(ids == e)
        x = h[t_idx]
        a = act(ps.input(gate_name, x, p + "ffn_norm", t_idx) @ gate[e].T + bias[0][e],
                ps.input(up_name, x, p + "ffn_norm", t_idx) @ up[e].T + bias[1][e])
        y = ps.input(down_name, a, p + f"ffn_hidden.{e}", t_idx) @ down[e].T + bias[2][e]
        slot_out[t_idx, s_idx] = y * w[t_idx, s_idx][:, None]
    out = slot_out[:, 0]
    for s in range(1, hp.n_expert_used):     # add the slots in order
        out = out + slot_out[:, s]
    return out


def moe(ps, il, h):
    m = ps.m
    hp = m.hp
    p = f"blk.{il}."
    ids, w = route(ps, il, h)
    out = routed_experts(ps, il, h, ids, w)
    if hp.arch in GATED_SHEXP:
        # the gate vector is read as floats by the engine (as the router): never quantized
        g = h @ m.w(p + "ffn_gate_inp_shexp.weight").reshape(-1)   # [T]
        sh = (silu(ps.linear(p + "ffn_gate_shexp.weight", h, p + "ffn_norm")) *
              ps.linear(p + "ffn_up_shexp.weight", h, p + "ffn_norm"))
        sh = ps.linear(p + "ffn_down_shexp.weight", sh, p + "ffn_hidden.shexp")
        out = out + sh * (1.0 / (1.0 + np.exp(-g)))[:, None]
    return out


def forward(model, tokens, act_quant=False, kv_f16=False, flips=(), ambiguous=(0.0, 0.0),
            last_only=False, stats=None, mla=None):
    """Logits [len(tokens), n_vocab] (model.dtype) for tokens at positions 0..T-1, causally.
    act_quant, kv_f16, flips, ambiguous: the numerical method (Pass); last_only: only the last
    position's logits ([1, n_vocab]); stats: a dict that receives the Pass's router_gap,
    act_margin and candidates; mla: deepseek2's attention form, "mha" or "absorbed" (default:
    the engine's under act_quant, else "mha"; deepseek2.py)."""
    if isinstance(model, str):
        model = Model(model)
    hp = model.hp
    tokens = np.asarray(tokens, dtype=np.int64)
    ps = Pass(model, len(tokens), act_quant, kv_f16, flips, ambiguous, mla)
    attn, ffn = {"deepseek2": (deepseek2.attention, deepseek2.ffn),
                 "glm4moe": (attention, deepseek2.ffn),
                 "gpt-oss": (gptoss.attention, gptoss.ffn),
                 "qwen3next": (qwen3next.attention, moe),
                 "qwen35moe": (qwen3next.attention, moe)}.get(hp.arch, (attention, moe))
    # glm4moe, gpt-oss, qwen3next and qwen35moe store the FFN's norm as post_attention_norm
    ffn_norm = ("post_attention_norm" if hp.arch in ("glm4moe", "gpt-oss") + qwen3next.ARCHS
                else "ffn_norm")
    x = model.embed(tokens)
    for il in range(hp.n_layer):
        p = f"blk.{il}."
        x = x + attn(ps, il, rms_norm(x, model.w(p + "attn_norm.weight"), hp.eps))
        x = x + ffn(ps, il, rms_norm(x, model.w(p + f"{ffn_norm}.weight"), hp.eps))
    x = rms_norm(x, model.w("output_norm.weight"), hp.eps)
    if last_only:
        logits = model.output_logits(x[-1:], ps, np.array([len(tokens) - 1]))
    else:
        logits = model.output_logits(x, ps)
    if stats is not None:
        stats.update(router_gap=ps.router_gap, act_margin=ps.act_margin,
                     candidates=ps.candidates)
    return logits


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("tokens", type=int, nargs="+")
    ap.add_argument("--out", help="write logits as .npy")
    ap.add_argument("--f32", action="store_true", help="compute in float32")
    ap.add_argument("--act-quant", action="store_true",
                    help="quantize the inputs of quantized-weight products as the engine does")
    ap.add_argument("--kv-f16", action="store_true", help="round K and V to float16")
    ap.add_argument("--mla", choices=("mha", "absorbed"), help="deepseek2 attention form")
    a = ap.parse_args()
    logits = forward(Model(a.model, np.float32 if a.f32 else np.float64), a.tokens,
                     act_quant=a.act_quant, kv_f16=a.kv_f16, mla=a.mla)
    if a.out:
        np.save(a.out, logits)
    print("argmax per position:", np.argmax(logits, axis=-1).tolist())


if __name__ == "__main__":
    main()
