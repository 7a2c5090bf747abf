"""Hand-derived values for the reference's model of the engine's roundings (forward.py):
blockwise activation quantization (quantize_blocks, Pass.input) and the f16 KV cache
(Pass.kv), with their margins and flips; and the deepseek2 cases (deepseek2_test.py) and the
gated DeltaNet ones (qwen3next_test.py).
Run: python3 numerics_test.py   (exit status 1 on a mismatch)
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import forward as F  # noqa: E402
import deepseek2_test  # noqa: E402
import qwen3next_test  # noqa: E402

bad = 0


def expect(what, got, want):
    """Arrays equal exactly (every value here is exact in binary), or equal objects."""
    global bad
    if isinstance(want, (list, tuple)) and want and not isinstance(want[0], (int, float)):
        ok = got == want
    else:
        got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
        ok = got.shape == want.shape and np.array_equal(got, want)
        got, want = got.tolist(), want.tolist()
    if not ok:
        print(f"FAIL {what}: got {got}, want {want}")
        bad += 1


def quantize_cases():
    # Block of 32 with amax 127: d = 1, v = x, so q = x rounded half to even.
    x = np.zeros((1, 32))
    x[0, :8] = [127, 2.5, 3.5, -2.5, -3.5, 0.4999, 1.25, -126.6]
    xq, v = F.quantize_blocks(x, 32)
    expect("q32 amax 127", xq[0, :8], [127, 2, 4, -2, -4, 0, 1, -127])
    expect("q32 zeros stay", xq[0, 8:], np.zeros(24))

    # Two blocks of 32: the second all zero (d = 0, q = 0), the first with amax 254: d = 2,
    # v = x / 2: 5 -> 2.5 -> 2 -> 4; 7 -> 3.5 -> 4 -> 8; -1 -> -0.5 -> -0 -> 0.
    x = np.zeros((1, 64))
    x[0, :4] = [-254, 5, 7, -1]
    xq, v = F.quantize_blocks(x, 32)
    expect("q32 amax 254", xq[0, :4], [-254, 4, 8, 0])
    expect("q32 zero block", np.concatenate([xq[0, 32:], v[0, 32:]]), np.zeros(64))

    # Block of 256 (K-quants): amax 31.75 at element 255 -> d = 0.25, v = 4 x: 0.375 -> 1.5
    # -> 2, 0.625 -> 2.5 -> 2 (half to even), -0.875 -> -3.5 -> -4. Tokens are independent.
    # (Every scale and product here is exact in float32, like the engine's.)
    x = np.zeros((2, 256))
    x[0, [0, 1, 2, 255]] = [0.375, 0.625, -0.875, 31.75]
    x[1, 0] = -1.0
    xq, v = F.quantize_blocks(x, 256)
    expect("q256 token 0", xq[0, [0, 1, 2, 255]] * 4, [2, 2, -4, 127])
    # token 1: amax 1, d = float32(1 / 127) (the engine's float d), q = -127
    expect("q256 token 1", xq[1, :2], [-127 * float(np.float32(1 / 127)), 0])
    # flips take the other neighbour of v: 1.5 -> 1, 2.5 -> 3, -3.5 -> -3
    xq, _ = F.quantize_blocks(x, 256, [(0, 0), (0, 1), (0, 2)])
    expect("q256 flipped", xq[0, :3] * 4, [1, 3, -3])


class FakeTensor:
    def __init__(self, type_name):
        self.type_name = type_name


class FakeModel:
    """Just the tensor types Pass.input reads."""

    def __init__(self, types):
        self.g = type("G", (), {"tensors": {n: FakeTensor(t) for n, t in types.items()}})()


def pass_cases():
    m = FakeModel({"a": "Q8_0", "b": "Q4_K", "c": "F16", "d": "Q5_1", "e": "Q2_K"})
    x = np.zeros((2, 256))
    x[:, 0] = 127.0
    x[0, 1] = 2.5          # margin 0 in a block of 32 (d = 1)
    x[1, 1] = 2.375        # margin 0.125
    x[0, 40] = 3.0         # the second block of 32: amax 3, v = 127 -> margin 0.5
    ps = F.Pass(m, 2, act_quant=True, ambiguous=(0.2, 0.0))
    xq = ps.input("a", x, "src")
    expect("input Q8_0", xq[:, 1], [2, 2])
    expect("act_margin", ps.act_margin, [0, 0.125])
    expect("candidates", [sorted(c) for c in ps.candidates],
           [[("src", 32, 0, 1)], [("src", 32, 1, 1)]])
    # Q4_K reads blocks of 256: amax 127 again, so the same codes here
    expect("input Q4_K", ps.input("b", x, "src")[:, 1], [2, 2])
    # float formats read x unchanged; types the engine has no kernel for are an error
    expect("input F16", ps.input("c", x, "src"), x)
    # Q5_1 has no K-block kernel: the engine reads int8 blocks of 32, as for Q8_0
    expect("input Q5_1", ps.input("d", x, "src")[:, 1], [2, 2])
    expect("input Q5_1 = input Q8_0", ps.input("d", x, "src"), ps.input("a", x, "src"))
    try:
        ps.input("e", x, "src")
        expect("Q2_K raises", 0, 1)
    except ValueError:
        pass
    # a flip by key: position 1, column 1 of src in blocks of 32: v 2.375 -> 3
    ps = F.Pass(m, 2, act_quant=True, flips=[("src", 32, 1, 1)])
    expect("flip by key", ps.input("a", x, "src")[:, 1], [2, 3])
    # rows of positions given explicitly (an expert's tokens): row 0 is position 1
    ps = F.Pass(m, 2, act_quant=True, flips=[("src", 32, 1, 1)], ambiguous=(0.2, 0.0))
    expect("flip with pos", ps.input("a", x[::-1], "src", np.array([1, 0]))[:, 1], [3, 2])
    expect("margin with pos", ps.act_margin, [0, 0.125])
    # without act_quant nothing changes
    expect("exact", F.Pass(m, 2).input("a", x, "src"), x)


def kv_cases():
    # f16 spacing at 1.0 is 2^-10: 1 + 2^-11 is the midpoint (margin 0, rounds to even: 1.0);
    # 1 + 0.75 * 2^-10 rounds to 1 + 2^-10 (margin 0.25); 2.0 is exact (margin 0.5).
    u = 2.0 ** -10
    x = np.array([1 + u / 2, 1 + 0.75 * u, 2.0, -(1 + 0.75 * u)]).reshape(1, 1, 4)
    ps = F.Pass(None, 1, kv_f16=True, ambiguous=(0.0, 0.3))
    expect("kv f16", ps.kv(x, "blk.0.k").ravel(), [1, 1 + u, 2, -(1 + u)])
    expect("kv candidates", sorted(ps.candidates[0].items()),
           [(("blk.0.k", "f16", 0, 0), 0.0), (("blk.0.k", "f16", 0, 1), 0.25),
            (("blk.0.k", "f16", 0, 3), 0.25)])
    ps = F.Pass(None, 1, kv_f16=True, flips=[("blk.0.k", "f16", 0, 0), ("blk.0.k", "f16", 0, 3)])
    expect("kv flipped", ps.kv(x, "blk.0.k").ravel(), [1 + u, 1 + u, 2, -1])
    expect("kv f32 cache", F.Pass(None, 1).kv(x, "blk.0.k"), x)


def main():
    global bad
    quantize_cases()
    pass_cases()
    kv_cases()
    bad += deepseek2_test.run()
    bad += qwen3next_test.run()
    print("numerics_test: " + ("all passed" if not bad else f"{bad} failure(s)"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
