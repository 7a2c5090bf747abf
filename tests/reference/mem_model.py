"""Models held in memory for tests of the reference (numerics_test.py): MemModel has the
interface of forward.Model over numpy arrays instead of a GGUF file, and deepseek2_tiny builds
a small deepseek2 model's metadata and weights from a seed, in either attention layout.

The weights are float32 values (as an F32 GGUF holds them) drawn from np.random.RandomState,
whose stream numpy keeps stable across versions, so the same seed and options give the same
model everywhere; writing them to a GGUF gives llama.cpp the same model (the values in
deepseek2_test.py's GOLDEN come from such a file).
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import forward as F  # noqa: E402


class MemTensor:
    def __init__(self, array, type_name):
        self.type_name = type_name
        self.shape = array.shape
        self.ne = list(reversed(array.shape))


class MemGGUF:
    """metadata (key -> value) and tensors (name -> MemTensor), like gguf_reader.GGUFFile."""

    def __init__(self, metadata, arrays, types):
        self.path = "<memory>"
        self.metadata = dict(metadata)
        self.tensors = {n: MemTensor(a, types.get(n, "F32")) for n, a in arrays.items()}

    def get(self, key, default=None):
        return self.metadata.get(key, default)


class MemModel(F.Model):
    """forward.Model over arrays {name: numpy array in numpy order (reversed ne)}. types: name
    -> type name for act_quant (default F32); the values are used as they are."""

    def __init__(self, metadata, arrays, types=None, dtype=np.float64):
        self.g = MemGGUF(metadata, arrays, types or {})
        self.hp = F.HParams(self.g)
        self.dtype = dtype
        self._arrays = arrays
        self._cache = {}
        self._head = None

    def w(self, name):
        if name not in self._arrays:
            raise KeyError(f"tensor {name} missing")
        return self._arrays[name].astype(self.dtype)

    def embed(self, tokens):
        return self.w("token_embd.weight")[np.asarray(tokens)]

    def output_logits(self, x, ps=None, pos=None):
        name = "output.weight" if self.has("output.weight") else "token_embd.weight"
        if ps is not None:
            x = ps.input(name, x, "output_norm", pos)
        return x @ self.w(name).T


# The options of deepseek2_tiny, and their defaults.
DEEPSEEK2_TINY = dict(
    n_layer=3, n_embd=64, n_head=4, d_nope=32, n_rot=16, d_v=32, kv_lora=64, q_lora=48,
    n_expert=8, n_expert_used=2, n_ff_exp=32, n_ff=96, n_shared=1, n_dense_lead=1, n_vocab=160,
    gating=1, exp_probs_b=False, n_group=0, n_group_used=0, weights_norm=False,
    weights_scale=None, legacy=False, tied=False, rope_base=10000.0, n_ctx=4096,
    # None, or (rope.scaling.type, .factor, .original_context_length, .yarn_log_multiplier),
    # None for a key not written
    rope_scaling=None,
    rope_attn_factor=None, eps=1e-6,
)


def deepseek2_tiny(seed=1, **opts):
    """-> (metadata, arrays) of a deepseek2 model with DEEPSEEK2_TINY's options overridden by
    opts (q_lora 0: attn_q instead of the query LoRA; legacy: attn_kv_b instead of attn_k_b
    and attn_v_b, from the same draws, so that both layouts hold the same model)."""
    o = dict(DEEPSEEK2_TINY)
    unknown = set(opts) - set(o)
    if unknown:
        raise ValueError(f"unknown options {sorted(unknown)}")
    o.update(opts)
    rs = np.random.RandomState(seed)
    a = "deepseek2"
    E, d_k = o["n_embd"], o["d_nope"] + o["n_rot"]

    def mat(rows, cols, gain=1.0):
        return (rs.standard_normal((rows, cols)) * gain / np.sqrt(cols)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rs.standard_normal(n)).astype(np.float32)

    md = {
        "general.architecture": a,
        f"{a}.block_count": o["n_layer"], f"{a}.context_length": o["n_ctx"],
        f"{a}.embedding_length": E, f"{a}.feed_forward_length": o["n_ff"],
        f"{a}.attention.head_count": o["n_head"], f"{a}.attention.head_count_kv": 1,
        f"{a}.rope.freq_base": o["rope_base"],
        f"{a}.attention.layer_norm_rms_epsilon": o["eps"],
        f"{a}.expert_count": o["n_expert"], f"{a}.expert_used_count": o["n_expert_used"],
        f"{a}.leading_dense_block_count": o["n_dense_lead"],
        f"{a}.attention.q_lora_rank": o["q_lora"],
        f"{a}.attention.kv_lora_rank": o["kv_lora"],
        f"{a}.expert_feed_forward_length": o["n_ff_exp"],
        f"{a}.expert_shared_count": o["n_shared"],
        f"{a}.expert_gating_func": o["gating"],
        f"{a}.rope.dimension_count": o["n_rot"],
        f"{a}.vocab_size": o["n_vocab"],
    }
    if o["legacy"]:   # per-head sizes, and K/V per head as in an MHA cache
        md[f"{a}.attention.head_count_kv"] = o["n_head"]
        md[f"{a}.attention.key_length"] = d_k
        md[f"{a}.attention.value_length"] = o["d_v"]
    else:
        md[f"{a}.attention.key_length"] = o["kv_lora"] + o["n_rot"]
        md[f"{a}.attention.value_length"] = o["kv_lora"]
        md[f"{a}.attention.key_length_mla"] = d_k
        md[f"{a}.attention.value_length_mla"] = o["d_v"]
    if o["n_group"]:
        md[f"{a}.expert_group_count"] = o["n_group"]
        md[f"{a}.expert_group_used_count"] = o["n_group_used"]
    if o["weights_norm"]:
        md[f"{a}.expert_weights_norm"] = True
    if o["weights_scale"] is not None:
        md[f"{a}.expert_weights_scale"] = o["weights_scale"]
    if o["rope_scaling"] is not None:
        keys = ("type", "factor", "original_context_length", "yarn_log_multiplier")
        for k, v in zip(keys, o["rope_scaling"]):
            if v is not None:
                md[f"{a}.rope.scaling.{k}"] = v
    if o["rope_attn_factor"] is not None:
        md[f"{a}.rope.scaling.attn_factor"] = o["rope_attn_factor"]

    w = {"token_embd.weight": (rs.standard_normal((o["n_vocab"], E))).astype(np.float32)}
    H, R, L = o["n_head"], o["n_rot"], o["kv_lora"]
    for il in range(o["n_layer"]):
        p = f"blk.{il}."
        w[p + "attn_norm.weight"] = norm(E)
        if o["q_lora"]:
            w[p + "attn_q_a.weight"] = mat(o["q_lora"], E)
            w[p + "attn_q_a_norm.weight"] = norm(o["q_lora"])
            w[p + "attn_q_b.weight"] = mat(H * d_k, o["q_lora"], 2.0)
        else:
            w[p + "attn_q.weight"] = mat(H * d_k, E, 2.0)
        w[p + "attn_kv_a_mqa.weight"] = mat(L + R, E, 2.0)
        w[p + "attn_kv_a_norm.weight"] = norm(L)
        k_b = (rs.standard_normal((H, L, o["d_nope"])) / np.sqrt(L)).astype(np.float32)
        v_b = (rs.standard_normal((H, o["d_v"], L)) / np.sqrt(L)).astype(np.float32)
        if o["legacy"]:   # rows of head h: its k_nope part (k_b[h]^T), then its v part
            w[p + "attn_kv_b.weight"] = np.concatenate(
                [k_b.transpose(0, 2, 1), v_b], axis=1).reshape(H * (o["d_nope"] + o["d_v"]), L)
        else:
            w[p + "attn_k_b.weight"] = k_b
            w[p + "attn_v_b.weight"] = v_b
        w[p + "attn_output.weight"] = mat(E, H * o["d_v"], 0.5)
        w[p + "ffn_norm.weight"] = norm(E)
        if il < o["n_dense_lead"]:
            w[p + "ffn_gate.weight"] = mat(o["n_ff"], E)
            w[p + "ffn_up.weight"] = mat(o["n_ff"], E)
            w[p + "ffn_down.weight"] = mat(E, o["n_ff"], 0.5)
            continue
        X, f = o["n_expert"], o["n_ff_exp"]
        w[p + "ffn_gate_inp.weight"] = mat(X, E, 4.0)     # clear router choices
        if o["exp_probs_b"]:
            w[p + "exp_probs_b.bias"] = (0.05 * rs.standard_normal(X)).astype(np.float32)
        w[p + "ffn_gate_exps.weight"] = (rs.standard_normal((X, f, E)) / np.sqrt(E)).astype(
            np.float32)
        w[p + "ffn_up_exps.weight"] = (rs.standard_normal((X, f, E)) / np.sqrt(E)).astype(
            np.float32)
        w[p + "ffn_down_exps.weight"] = (0.5 * rs.standard_normal((X, E, f)) / np.sqrt(f)).astype(
            np.float32)
        if o["n_shared"]:
            fs = f * o["n_shared"]
            w[p + "ffn_gate_shexp.weight"] = mat(fs, E)
            w[p + "ffn_up_shexp.weight"] = mat(fs, E)
            w[p + "ffn_down_shexp.weight"] = mat(E, fs, 0.5)
    w["output_norm.weight"] = norm(E)
    if not o["tied"]:
        w["output.weight"] = mat(o["n_vocab"], E, 4.0)
    return md, w
