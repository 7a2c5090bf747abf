"""Hand-built blocks with hand-derived values for the reference dequantizers (dequant.py).

Each case sets a few fields of one block and states the values the format's definition gives
for some elements. (The dequantizers were also checked bit-exact against ggml's
dequantize_row_* on 4096 random blocks per type when they were written.)
Run: python3 dequant_test.py   (exit status 1 on a mismatch)
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dequant import dequantize  # noqa: E402
from dequant_iq_test import cases as iq_cases  # noqa: E402

F16_ONE, F16_HALF, F16_TWO, F16_MINUS3 = 0x3C00, 0x3800, 0x4000, 0xC200


def block(n, **fields):
    """n zero bytes with fields set: name=(offset, bytes-like or u16 f16 bits)."""
    b = np.zeros(n, np.uint8)
    for off, val in fields.values():
        if isinstance(val, int):
            val = np.array([val], "<u2").view(np.uint8)
        b[off:off + len(val)] = val
    return b


def u8_(*v):
    return np.array(v, np.uint8)


def cases():
    # Q8_0: d = 0.5, q[i] = i - 16 -> x[i] = (i - 16) / 2
    q = (np.arange(32) - 16).astype(np.int8).view(np.uint8)
    yield "Q8_0", block(34, d=(0, F16_HALF), q=(2, q)), {i: (i - 16) / 2 for i in range(32)}

    # Q4_0: d = 2, qs[j] = j | (15 - j) << 4 -> x[j] = 2 (j - 8), x[j + 16] = 2 (7 - j)
    qs = (np.arange(16) | ((15 - np.arange(16)) << 4)).astype(np.uint8)
    want = {j: 2 * (j - 8) for j in range(16)} | {j + 16: 2 * (7 - j) for j in range(16)}
    yield "Q4_0", block(18, d=(0, F16_TWO), qs=(2, qs)), want

    # Q4_1: d = 1, m = -3, same nibbles -> x[j] = j - 3, x[j + 16] = 12 - j
    want = {j: j - 3 for j in range(16)} | {j + 16: 12 - j for j in range(16)}
    yield "Q4_1", block(20, d=(0, F16_ONE), m=(2, F16_MINUS3), qs=(4, qs)), want

    # Q5_0: d = 1, qh bits 0 and 31 set, qs = 0 -> x[0] = x[31] = 0, all others -16
    qh = np.array([0x01, 0, 0, 0x80], np.uint8)
    want = {i: -16.0 for i in range(32)} | {0: 0.0, 31: 0.0}
    yield "Q5_0", block(22, d=(0, F16_ONE), qh=(2, qh)), want

    # Q5_1: d = 2, m = 1, qh bit 17 set, qs[1] = 0x30 -> x[17] = 2 (3 + 16) + 1 = 39, x[1] = 1
    qh = np.array([0, 0, 2, 0], np.uint8)
    qs = np.array([0, 0x30], np.uint8)
    yield "Q5_1", block(24, d=(0, F16_TWO), m=(2, F16_ONE), qh=(4, qh), qs=(8, qs)), \
        {17: 39.0, 1: 1.0, 16: 1.0}

    # Q4_K: d = 1, dmin = 1. scales bytes: [0] = 5 (sc0 = 5), [4] = 2 (m0 = 2),
    # [1] = 0x40 (sc1 = 0, top bits give sc5 += 16), [5] = 0x80 (m1 = 0, top bits m5 += 32),
    # [9] = 0x23 (sc5 low = 3, m5 low = 2) -> sc5 = 19, m5 = 34.
    # qs[0] = 0x0A: element 0 (sub-block 0, low nibble) = 5*10 - 2 = 48;
    # element 32 (sub-block 1, high nibble of qs[0]) = 0*0 - 0 = 0.
    # qs[64] = 0x70: element 160 (sub-block 5 = high nibbles of qs[64:96]) = 19*7 - 34 = 99;
    # element 128 (sub-block 4, low nibble of qs[64]; sc4 = 0, m4 = 0) = 0.
    sc = np.zeros(12, np.uint8)
    sc[[0, 4, 1, 5, 9]] = [5, 2, 0x40, 0x80, 0x23]
    qs = np.zeros(128, np.uint8)
    qs[[0, 64]] = [0x0A, 0x70]
    want = {0: 48.0, 32: 0.0, 160: 99.0, 128: 0.0, 1: -2.0}
    yield "Q4_K", block(144, d=(0, F16_ONE), dmin=(2, F16_ONE), sc=(4, sc), qs=(16, qs)), want

    # Q5_K: d = 2, dmin = 1. scales [2] = 0xC0 (sc6 top bits 3 -> +48), [10] = 0x01 (sc6 low 1,
    # m6 low 0) -> sc6 = 49, m6 = 0 (bytes[6] = 0). Element 200 = sub-block 6, l = 8: low nibble
    # of qs[96 + 8] (groups of 64: sub-block 6 = low nibbles of qs[96:128]), 5th bit = bit 6 of
    # qh[8]. qs[104] = 0x04, qh[8] = 0x40 -> q = 4 + 16 = 20 -> x = 2*49*20 - 0 = 1960.
    sc = np.zeros(12, np.uint8)
    sc[[2, 10]] = [0xC0, 0x01]
    qh = np.zeros(32, np.uint8)
    qh[8] = 0x40
    qs = np.zeros(128, np.uint8)
    qs[104] = 0x04
    want = {200: 1960.0, 201: 0.0, 232: 0.0}
    yield "Q5_K", block(176, d=(0, F16_TWO), dmin=(2, F16_ONE), sc=(4, sc), qh=(16, qh),
                        qs=(48, qs)), want

    # Q6_K: d = 1. Element 200 = half 1, offset 72 = quarter k = 2, l = 8: low 4 bits are the
    # high nibble of ql[64 + 8], high 2 bits are bits 4..5 of qh[32 + 8], scale is
    # scales[8 + 8 // 16 + 2*2] = scales[12]. ql[72] = 0x50, qh[40] = 0x20, scales[12] = -3
    # -> q = (5 | 2 << 4) - 32 = 5 -> x = -15. Element 136 (k = 0, l = 8) reads the low nibble
    # of ql[72] (0) and bits 0..1 of qh[40] (0): q = -32, scale scales[8] = 0 -> 0.
    ql = np.zeros(128, np.uint8)
    ql[72] = 0x50
    qh = np.zeros(64, np.uint8)
    qh[40] = 0x20
    scales = np.zeros(16, np.int8)
    scales[12] = -3
    scales[0] = 1
    # element 0: q = 0 - 32, scale scales[0] = 1 -> -32
    want = {200: -15.0, 136: 0.0, 0: -32.0}
    yield "Q6_K", block(210, ql=(0, ql), qh=(128, qh), sc=(192, scales.view(np.uint8)),
                        d=(208, F16_ONE)), want

    # MXFP4: e = 128 -> scale 2^0 with the doubled table; qs[0] = 0xF5 -> x[0] = table[5] = 6,
    # x[16] = table[15] = -12. e = 130 -> 4x: qs[1] = 0x21 -> x[1] = 4, x[17] = 8.
    u8 = lambda *v: np.array(v, np.uint8)  # noqa: E731
    yield "MXFP4", block(17, e=(0, u8(128)), qs=(1, u8(0xF5))), {0: 6.0, 16: -12.0, 1: 0.0}
    yield "MXFP4", block(17, e=(0, u8(130)), qs=(1, u8(0, 0x21))), {1: 4.0, 17: 8.0}

    # Q2_K: scales at 0, qs at 16, d = 1 (80), dmin = 0.5 (82). qs[0] = 0xE4 -> element 0
    # q = 0, element 32 (shift 2) q = 1, element 96 (shift 6) q = 3. scales[0] = 0x21 (sc 1,
    # m 2): x0 = 0 - 1 = -1; scales[2] = 0x12: x32 = 2 * 1 - 0.5 = 1.5; scales[6] = 0x37:
    # x96 = 7 * 3 - 1.5 = 19.5. Element 161 = half 1, shift 2, l = 1: qs[33] = 0x08 -> q 2,
    # scales[10] = 0xF1 (sc 1, m 15): 2 - 7.5 = -5.5.
    sc = np.zeros(16, np.uint8)
    sc[[0, 2, 6, 10]] = [0x21, 0x12, 0x37, 0xF1]
    qs = np.zeros(64, np.uint8)
    qs[[0, 33]] = [0xE4, 0x08]
    yield "Q2_K", block(84, sc=(0, sc), qs=(16, qs), d=(80, F16_ONE), dmin=(82, F16_HALF)), \
        {0: -1.0, 32: 1.5, 96: 19.5, 161: -5.5, 64: 0.0}

    # Q3_K: hmask at 0, qs at 32, scales at 96, d = 0.5 (108). sc0 = 35 - 32 = 3 (scales[0]
    # low nibble 3, bits 0-1 of scales[8] = 2); zero scale bytes are sc = -32.
    # Element 0: qs[0] & 3 = 1, bit 0 of hmask[0] = 1 -> q 5 -> 0.5 * 3 * 1 = 1.5.
    # Element 1: q 0 -> 0.5 * 3 * -4 = -6. Element 144 (sub-block 9, sc -32): qs[48] & 3 = 3,
    # bit 4 of hmask[16] = 1 -> q 7 -> 0.5 * -32 * 3 = -48.
    hm = np.zeros(32, np.uint8)
    hm[[0, 16]] = [0x01, 0x10]
    qs = np.zeros(64, np.uint8)
    qs[[0, 48]] = [0x01, 0x03]
    sc = np.zeros(12, np.uint8)
    sc[[0, 8]] = [0x03, 0x02]
    yield "Q3_K", block(110, hm=(0, hm), qs=(32, qs), sc=(96, sc), d=(108, F16_HALF)), \
        {0: 1.5, 1: -6.0, 144: -48.0}

    # IQ4_NL: d = 2, qs[0] = 0xF0 -> x0 = 2 * V[0] = -254, x16 = 2 * V[15] = 226;
    # qs[3] = 0x78 -> x3 = 2 * V[8] = 2, x19 = 2 * V[7] = -20.
    yield "IQ4_NL", block(18, d=(0, F16_TWO), qs=(2, u8_(0xF0, 0, 0, 0x78))), \
        {0: -254.0, 16: 226.0, 3: 2.0, 19: -20.0}

    # IQ4_XS: d = 0.5 (0), scales_h = 0xC002 (2), scales_l[0] = 0x04, scales_l[3] = 0xF0:
    # ls0 = 4 | 2 << 4 = 36 (sc 4), ls7 = 15 | 3 << 4 = 63 (sc 31), ls5 = 0 (sc -32).
    # qs[0] = 0x9F: x0 = 0.5 * 4 * V[15] = 226, x16 = 0.5 * 4 * 13 = 26. qs[81] = 0x30:
    # x161 = 0.5 * -32 * V[0] = 2032, x177 = 0.5 * -32 * V[3] = 1040. qs[127] = 0x80:
    # x255 = 0.5 * 31 * V[8] = 15.5.
    qs = np.zeros(128, np.uint8)
    qs[[0, 81, 127]] = [0x9F, 0x30, 0x80]
    yield "IQ4_XS", block(136, d=(0, F16_HALF), sh=(2, 0xC002), sl=(4, u8_(0x04, 0, 0, 0xF0)),
                          qs=(8, qs)), {0: 226.0, 16: 26.0, 161: 2032.0, 177: 1040.0, 255: 15.5}

    # F16 / BF16 / F32
    yield "F16", np.array([0x3C00, 0xC000, 0x3555], "<u2").view(np.uint8), \
        {0: 1.0, 1: -2.0, 2: float(np.float16(1 / 3))}
    yield "BF16", np.array([0x3FC0, 0xC080], "<u2").view(np.uint8), {0: 1.5, 1: -4.0}
    yield "F32", np.array([0.25, -7.0], "<f4").view(np.uint8), {0: 0.25, 1: -7.0}


def main():
    bad = 0
    for name, raw, want in list(cases()) + list(iq_cases()):
        got = dequantize(name, raw[None, :])[0]
        for i, v in want.items():
            if got[i] != np.float32(v):
                print(f"FAIL {name}: element {i} = {got[i]}, want {v}")
                bad += 1
    print("dequant_test: " + ("all passed" if not bad else f"{bad} failure(s)"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
