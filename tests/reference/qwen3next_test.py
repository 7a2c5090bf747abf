"""Cases for the reference's gated DeltaNet pieces (qwen3next.py), run by numerics_test.py (or
alone): the key head each value head reads (grouped, tiled), qwen3next's ssm_ba row layout, the
causal conv from a zero history, the l2 norm's eps, softplus's linear branch, the delta rule's
retrieval by hand (orthogonal keys, overwrite, decay), and the recurrent step against the
unrolled per-token sum on random values.
Run: python3 qwen3next_test.py   (exit status 1 on a mismatch)
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen3next as Q  # noqa: E402

bad = 0


def close(what, got, want, atol=1e-12):
    global bad
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if not (got.shape == want.shape and np.all(np.abs(got - want) <= atol)):
        print(f"FAIL {what}: got {got.tolist()}, want {want.tolist()}")
        bad += 1


def layout_cases():
    # 2 key heads, 4 value heads: grouped repeats each key head in place, tiled the block
    close("grouped", Q.key_heads(2, 4, True), [0, 0, 1, 1])
    close("tiled", Q.key_heads(2, 4, False), [0, 1, 0, 1])
    close("grouped 1:1", Q.key_heads(3, 3, True), [0, 1, 2])
    close("tiled 1:1", Q.key_heads(3, 3, False), [0, 1, 2])
    # ssm_ba rows 0..7 for 2 key heads of r = 2: key head 0 holds b0 b1 a0 a1, key head 1
    # b2 b3 a2 a3
    b, a = Q.split_ba(np.arange(8.0)[None, :], 2, 4)
    close("ssm_ba b rows", b, [[0, 1, 4, 5]])
    close("ssm_ba a rows", a, [[2, 3, 6, 7]])


def conv_cases():
    # channel 0: weights 1, 10, 100, 1000 (oldest input first); inputs 1..5 from a zero
    # history: out_t = sum_i w[i] x_{t-3+i}; channel 1 (weights 0 0 0 1) passes x through
    w = np.array([[1.0, 10.0, 100.0, 1000.0], [0.0, 0.0, 0.0, 1.0]])
    hist = np.zeros((3, 2))
    got = []
    for x in range(1, 6):
        y, hist = Q.conv_step(hist, np.array([x, -x], np.float64), w)
        got.append(y)
    close("conv", got, [[1000, -1], [2100, -2], [3210, -3], [4321, -4], [5432, -5]])
    close("conv history", hist, [[3, -3], [4, -4], [5, -5]])


def norm_cases():
    close("l2 norm", Q.l2_norm(np.array([[3.0, 4.0], [0.0, 0.0]]), 1e-6), [[0.6, 0.8], [0, 0]])
    # below eps the norm is eps: x / 1e-6
    close("l2 norm eps", Q.l2_norm(np.array([3e-7, 4e-7]), 1e-6), [0.3, 0.4])
    close("softplus", Q.softplus(np.array([0.0, 25.0, 20.0, -30.0])),
          [np.log(2.0), 25.0, np.log1p(np.exp(20.0)), np.exp(-30.0)], 1e-15)


def delta_rule_cases():
    S = 4   # o = M^T q / sqrt(4) = M^T q / 2
    e0, e1 = np.eye(S)[0], np.eye(S)[1]
    v1, v2, v3 = np.array([1.0, 2, 3, 4]), np.array([-1.0, 5, 0, 2]), np.array([4.0, 0, -4, 8])
    m = np.zeros((S, S))
    o, m = Q.delta_rule_step(m, e0, e0, v1, 0.0, 1.0)      # write v1 under key e0
    close("delta write", o, v1 / 2)
    o, m = Q.delta_rule_step(m, e0, e1, v2, 0.0, 1.0)      # an orthogonal key leaves it
    close("delta orthogonal", o, v1 / 2)
    o, m = Q.delta_rule_step(m, e1, e0, v3, 0.0, 1.0)      # beta 1 overwrites under e0
    close("delta keeps e1", o, v2 / 2)
    o, _ = Q.delta_rule_step(m, e0, e0, v3, 0.0, 0.0)      # beta 0, g 0: reads only
    close("delta overwrite", o, v3 / 2)
    # from M = e0 v1^T: decay 1/2, beta 1/2, write v3 under e0:
    # M' = 0.5 e0 v1^T + e0 (0.5 (v3 - 0.5 v1))^T = e0 (0.25 v1 + 0.5 v3)^T
    o, _ = Q.delta_rule_step(np.outer(e0, v1), e0, e0, v3, np.log(0.5), 0.5)
    close("delta decay and beta", o, [1.125, 0.25, -0.625, 2.5])


def unrolled_cases():
    """The recurrent step against M_t = sum_{s<=t} A_t ... A_{s+1} beta_s k_s v_s^T,
    A_u = exp(g_u) (I - beta_u k_u k_u^T), computed from scratch for every t."""
    rs = np.random.RandomState(7)
    S, T = 5, 7
    q, k = rs.standard_normal((T, S)), rs.standard_normal((T, S))
    k /= np.linalg.norm(k, axis=1, keepdims=True)
    v = rs.standard_normal((T, S))
    g, beta = -rs.uniform(0.0, 1.0, T), rs.uniform(0.0, 1.0, T)
    m = np.zeros((S, S))
    for t in range(T):
        o, m = Q.delta_rule_step(m, q[t], k[t], v[t], g[t], beta[t])
        mt = np.zeros((S, S))
        for s in range(t + 1):
            p = beta[s] * np.outer(k[s], v[s])
            for u in range(s + 1, t + 1):
                p = np.exp(g[u]) * (np.eye(S) - beta[u] * np.outer(k[u], k[u])) @ p
            mt += p
        close(f"unrolled t={t}", o, mt.T @ q[t] / np.sqrt(S), 1e-12)


def run():
    layout_cases()
    conv_cases()
    norm_cases()
    delta_rule_cases()
    unrolled_cases()
    return bad


if __name__ == "__main__":
    n = run()
    print("qwen3next_test: " + ("all passed" if not n else f"{n} failure(s)"))
    sys.exit(1 if n else 0)
