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

Weights are dequantized exactly (dequant.py); all arithmetic runs in `dtype` (float64 by default).
float64 matters: a float32 run of this same code differs from the float64 one by max|d|/std
4e-6 (tiny) to 2.2e-5 (olmoe-tiny), more than moetier's own float32 error (1e-6 to 6e-6).

Command line: forward.py MODEL.gguf TOKEN_ID... [--out logits.npy]
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dequant import dequantize, tensor_f32, tensor_rows_f32  # noqa: E402
from gguf_reader import GGUFFile  # noqa: E402

ARCHS = ("qwen3moe", "olmoe", "llama", "qwen2moe")
NEOX = {"qwen3moe": True, "olmoe": True, "qwen2moe": True, "llama": False}
RENORM = {"qwen3moe": True, "olmoe": False, "qwen2moe": False, "llama": True}


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
        scaling_type = g.get(f"{arch}.rope.scaling.type", "linear")
        if scaling_type not in ("linear", "none"):
            raise ValueError(f"rope scaling {scaling_type!r} not in the reference")
        factor = float(g.get(f"{arch}.rope.scaling.factor",
                             g.get(f"{arch}.rope.scale_linear", 0.0)))
        self.rope_freq_scale = 1.0 if factor == 0.0 else 1.0 / factor
        self.eps = float(key("attention.layer_norm_rms_epsilon"))
        self.n_expert = int(key("expert_count"))
        self.n_expert_used = int(key("expert_used_count"))
        # Always 1/sqrt(head_dim): llama.cpp reads {arch}.attention.scale only for granite.
        self.kq_scale = 1.0 / np.sqrt(self.head_dim)
        if self.n_rot != self.head_dim:
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

    def output_logits(self, x):
        """x [T, n_embd] -> x W_out^T [T, n_vocab], W_out dequantized a slab of rows at a time
        (the vocabulary matrix is the largest tensor; no full float64 copy of it is kept)."""
        name = "output.weight" if self.has("output.weight") else "token_embd.weight"
        raw = self.g.raw(name)                                  # [n_vocab, row_bytes]
        out = np.empty((x.shape[0], raw.shape[0]), dtype=self.dtype)
        step = 8192
        for r in range(0, raw.shape[0], step):
            w = dequantize(self.g.tensors[name].type_name, raw[r:r + step])
            # einsum without BLAS: numpy's own loop beats the reference BLAS that Debian's
            # numpy falls back to by about 2x here.
            out[:, r:r + step] = np.einsum("td,vd->tv", x, w.astype(self.dtype), optimize=False)
        return out


def attention(m, il, h):
    hp = m.hp
    T = h.shape[0]
    p = f"blk.{il}."

    def proj(name):
        y = h @ m.w(p + name + ".weight").T
        b = m.opt(p + name + ".bias")
        return y if b is None else y + b

    q, k, v = proj("attn_q"), proj("attn_k"), proj("attn_v")
    if hp.arch == "olmoe":  # RMSNorm over the whole q / k projection
        q = rms_norm(q, m.w(p + "attn_q_norm.weight"), hp.eps)
        k = rms_norm(k, m.w(p + "attn_k_norm.weight"), hp.eps)
    q = q.reshape(T, hp.n_head, hp.head_dim)
    k = k.reshape(T, hp.n_head_kv, hp.head_dim)
    v = v.reshape(T, hp.n_head_kv, hp.head_dim)
    if hp.arch == "qwen3moe":  # RMSNorm of each head's vector
        q = rms_norm(q, m.w(p + "attn_q_norm.weight"), hp.eps)
        k = rms_norm(k, m.w(p + "attn_k_norm.weight"), hp.eps)
    ff = m.opt("rope_freqs.weight") if hp.arch == "llama" else None
    q = rope(q, hp.n_rot, hp.rope_base, hp.rope_freq_scale, NEOX[hp.arch], ff)
    k = rope(k, hp.n_rot, hp.rope_base, hp.rope_freq_scale, NEOX[hp.arch], ff)

    group = hp.n_head // hp.n_head_kv
    kv_of = np.arange(hp.n_head) // group
    kh = k[:, kv_of, :]                      # [T, n_head, hd]
    vh = v[:, kv_of, :]
    scores = np.einsum("thd,shd->hts", q, kh) * hp.kq_scale  # [n_head, T, T]
    causal = np.triu(np.ones((T, T), dtype=bool), k=1)
    scores = np.where(causal[None], -np.inf, scores)
    probs = softmax(scores, axis=-1)
    out = np.einsum("hts,shd->thd", probs, vh).reshape(T, hp.n_head * hp.head_dim)
    y = out @ m.w(p + "attn_output.weight").T
    b = m.opt(p + "attn_output.bias")
    return y if b is None else y + b


def route(m, il, h):
    """-> (ids [T, k] in descending probability, weights [T, k])."""
    hp = m.hp
    logits = h @ m.w(f"blk.{il}.ffn_gate_inp.weight").T     # [T, n_expert]
    probs = softmax(logits, axis=-1)
    # descending order; among equal probabilities the lower expert id first
    ids = np.argsort(-probs, axis=-1, kind="stable")[:, :hp.n_expert_used]
    w = np.take_along_axis(probs, ids, axis=-1)
    if RENORM[hp.arch]:
        # llama.cpp clamps the sum below at 6.103515625e-5 (the smallest normal f16)
        w = w / np.maximum(w.sum(axis=-1, keepdims=True), 6.103515625e-5)
    return ids, w


def moe(m, il, h):
    hp = m.hp
    T = h.shape[0]
    p = f"blk.{il}."
    ids, w = route(m, il, h)
    gate = m.w(p + "ffn_gate_exps.weight")   # [n_expert, n_ff_exp, n_embd]
    up = m.w(p + "ffn_up_exps.weight")       # [n_expert, n_ff_exp, n_embd]
    down = m.w(p + "ffn_down_exps.weight")   # [n_expert, n_embd, n_ff_exp]
    slot_out = np.zeros((T, hp.n_expert_used, hp.n_embd), dtype=h.dtype)
    for e in np.unique(ids):
        t_idx, s_idx = np.nonzero(ids == e)
        x = h[t_idx]
        a = silu(x @ gate[e].T) * (x @ up[e].T)
        slot_out[t_idx, s_idx] = (a @ down[e].T) * w[t_idx, s_idx][:, None]
    out = slot_out[:, 0]
    for s in range(1, hp.n_expert_used):     # add the slots in order
        out = out + slot_out[:, s]
    if hp.arch == "qwen2moe":
        g = h @ m.w(p + "ffn_gate_inp_shexp.weight").reshape(-1)   # [T]
        sh = silu(h @ m.w(p + "ffn_gate_shexp.weight").T) * (h @ m.w(p + "ffn_up_shexp.weight").T)
        sh = sh @ m.w(p + "ffn_down_shexp.weight").T
        out = out + sh * (1.0 / (1.0 + np.exp(-g)))[:, None]
    return out


def forward(model, tokens):
    """Logits [len(tokens), n_vocab] (model.dtype) for tokens at positions 0..T-1, causally."""
    if isinstance(model, str):
        model = Model(model)
    hp = model.hp
    tokens = np.asarray(tokens, dtype=np.int64)
    x = model.embed(tokens)
    for il in range(hp.n_layer):
        p = f"blk.{il}."
        x = x + attention(model, il, rms_norm(x, model.w(p + "attn_norm.weight"), hp.eps))
        x = x + moe(model, il, rms_norm(x, model.w(p + "ffn_norm.weight"), hp.eps))
    x = rms_norm(x, model.w("output_norm.weight"), hp.eps)
    return model.output_logits(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("tokens", type=int, nargs="+")
    ap.add_argument("--out", help="write logits as .npy")
    ap.add_argument("--f32", action="store_true", help="compute in float32")
    a = ap.parse_args()
    logits = forward(Model(a.model, np.float32 if a.f32 else np.float64), a.tokens)
    if a.out:
        np.save(a.out, logits)
    print("argmax per position:", np.argmax(logits, axis=-1).tolist())


if __name__ == "__main__":
    main()
