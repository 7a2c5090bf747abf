"""Hand-built blocks of the IQ lattice types for dequant_iq.py, with hand-derived values (the
grid entries quoted from ggml-common.h). dequant_test.py runs these with its own cases. (Both
dequantizers were also checked bit-exact against ggml's dequantize_row_iq* on 4096 random
blocks per type when they were written.)
"""

import numpy as np

F16_ONE, F16_HALF, F16_TWO = 0x3C00, 0x3800, 0x4000


def _block(n, fields):
    """n zero bytes with fields set: (offset, bytes-like or u16 f16 bits)."""
    b = np.zeros(n, np.uint8)
    for off, val in fields:
        if isinstance(val, int):
            val = np.array([val], "<u2").view(np.uint8)
        b[off:off + len(val)] = val
    return b


def _u8(*v):
    return np.array(v, np.uint8)


def _u32(v):
    return np.array([v], "<u4").view(np.uint8)


def cases():
    # IQ2_XXS: d = 1. 32-block 0: w0 = grid indices [1, 0, 0, 0]; w1 = group 0's 7-bit signs
    # 0b0000001 (element 0 negative; odd, so the parity bit makes element 7 negative too),
    # ls = 3 in bits 28..31 -> db = (0.5 + 3) * 0.25 = 0.875. iq2xxs_grid[1] =
    # 0x080808080808082b: coordinate 0 = 43, the rest 8. Group 1 (elements 8..15): index 0
    # (all 8), no signs.
    yield "IQ2_XXS", _block(66, [(0, F16_ONE), (2, _u8(1, 0, 0, 0)), (6, _u32(1 | 3 << 28))]), \
        {0: -37.625, 1: 7.0, 6: 7.0, 7: -7.0, 8: 7.0}

    # IQ2_XS: d = 1. qs[0] = index 2 | signs 0b0000011 << 9 (two minus signs: parity 0);
    # scales[0] = 0x51: ls 1 for elements 0..15 (db 0.375), 5 for 16..31 (db 1.375).
    # iq2xs_grid[2] = 0x0808080808081919: coordinates 0, 1 = 25, the rest 8. qs[2] = 0
    # (group 2: all 8, no signs).
    yield "IQ2_XS", _block(74, [(0, F16_ONE), (2, _u8(0x02, 0x06)), (66, _u8(0x51))]), \
        {0: -9.375, 1: -9.375, 2: 3.0, 7: 3.0, 16: 11.0}

    # IQ2_S: d = 2. Group 5 (elements 40..47, 32-block 1, l = 1): index = qs[5] | ((qh[1] >> 2)
    # & 3) << 8 = 3 | 1 << 8 = 259; iq2s_grid[259] = 0x08190819192b1908 -> 8 25 43 25 25 8 25
    # 8; its sign byte qs[32 + 5] = 0x81: elements 0 and 7 negative (all 8 stored, no parity).
    # scales[1] = 0x20: ls 0 for elements 32..47 -> db = 2 * 0.5 * 0.25 = 0.25.
    yield "IQ2_S", _block(82, [(0, F16_TWO), (2 + 5, _u8(3)), (2 + 37, _u8(0x81)),
                               (66 + 1, _u8(0x04)), (74 + 1, _u8(0x20))]), \
        {40: -2.0, 41: 6.25, 42: 10.75, 45: 2.0, 47: -2.0}

    # IQ3_XXS: d = 1. Group 0: qs[0] = 1 (elements 0..3: iq3xxs_grid[1] = 0x04040414 -> 20 4 4
    # 4), qs[1] = 0 (elements 4..7: all 4). Word at qs + 64: signs 0b0000100 (element 2; odd,
    # so element 7 too), ls 1 -> db = (0.5 + 1) * 0.5 = 0.75.
    yield "IQ3_XXS", _block(98, [(0, F16_ONE), (2, _u8(1, 0)), (66, _u32(4 | 1 << 28))]), \
        {0: 15.0, 1: 3.0, 2: -3.0, 4: 3.0, 7: -3.0}

    # IQ3_S: d = 0.5. Group 0: qs[0] = 5 (iq3s_grid[5] = 0x01010301 -> 1 3 1 1), qs[1] = 0 with
    # the 9th bit from bit 1 of qh[0] -> index 256 (iq3s_grid[256] = 0x05090507 -> 7 5 9 5).
    # signs[0] = 0x10: element 4 negative. scales[0] = 0x02: ls 2 for elements 0..31 ->
    # db = 0.5 * (1 + 2 * 2) = 2.5.
    yield "IQ3_S", _block(110, [(0, F16_HALF), (2, _u8(5, 0)), (66, _u8(0x02)), (74, _u8(0x10)),
                                (106, _u8(0x02))]), \
        {0: 2.5, 1: 7.5, 4: -17.5, 5: 12.5, 6: 22.5}

    # IQ1_S: d = 1. qh[0] = ls 2 << 12 | 0x8000: dl = 5, delta -1/8 for elements 0..31. Group 0:
    # index 0 (iq1s_grid[0]: all -1). Group 1: qs[1] = 2 (iq1s_grid[2] = 0xffffffffffff0000 ->
    # 0 0 -1 -1 -1 -1 -1 -1). 32-block 1: qh[1] = 0 -> dl = 1, delta +1/8, index 0.
    yield "IQ1_S", _block(50, [(0, F16_ONE), (2 + 1, _u8(2)), (34, 2 << 12 | 0x8000)]), \
        {0: -5.625, 8: -0.625, 9: -0.625, 10: -5.625, 32: -0.875}

    # IQ1_M: d = 1 = 0x3C00, its nibbles 0, 0, 0xC, 0x3 in the tops of the four scale words.
    # s[0] = 3 | 1 << 3: ls 3 for elements 0..15 (dl 7), 1 for 16..31 (dl 3). qh[0] = 0x80:
    # group 0 index 0 (all -1), delta +1/8; group 1 delta -1/8, index qs[1] = 2 (0 0 -1 ...).
    # Group 2 (qh[1] = 0): index 0, delta +1/8.
    yield "IQ1_M", _block(56, [(1, _u8(2)), (32, _u8(0x80)), (48, 3 | 1 << 3), (52, 0xC000),
                               (54, 0x3000)]), \
        {0: -6.125, 7: -6.125, 8: -0.875, 10: -7.875, 16: -2.625}
