"""numpy dequantization of ggml's IQ lattice types (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
IQ1_S, IQ1_M), written from the ggml block definitions; dequant.py's DEQUANT maps their names
here. Conventions as in dequant.py: uint8 (..., row_bytes) -> float32 (..., n_per_row), float32
arithmetic in ggml's order (so results match a float32 C dequantizer bit for bit).

The grids (ggml-common.h's iq2xxs_grid ... iq1s_grid) are read from moetier's own table,
src/quant/iq_grids.cc, where each point is stored as level indices (2 bits per coordinate for
the 8-coordinate grids, 3 bits for the 4-coordinate IQ3 grids); the levels are:
  IQ2: 8, 25, 43   IQ3_XXS: 4, 12, ..., 52, 62   IQ3_S: 1, 3, ..., 15   IQ1: -1, 0, 1

Block layouts (QK_K = 256, 32 groups of 8 elements; G = group, b = 32-element block):
  IQ2_XXS (66 B):  f16 d | u8 qs[64]: per b, u32 w0 (4 grid indices), u32 w1 (4 x 7-bit signs,
                   4-bit ls in bits 28..31). x = (d (0.5 + ls) 0.25) g s
  IQ2_XS  (74 B):  f16 d | u16 qs[32] (9-bit index | 7-bit signs << 9) | u8 scales[8] (ls per
                   16: low nibble first). x as IQ2_XXS
  IQ2_S   (82 B):  f16 d | u8 qs[32] (index low bits) | u8 signs[32] | u8 qh[8] (2 bits per
                   group) | u8 scales[8]. x as IQ2_XXS
  IQ3_XXS (98 B):  f16 d | u8 qs[64] (two 4-value indices per group) | 8 x u32 (signs as
                   IQ2_XXS, ls in 28..31). x = (d (0.5 + ls) 0.5) g s
  IQ3_S  (110 B):  f16 d | u8 qs[64] | u8 qh[8] (9th index bits) | u8 signs[32] | u8 scales[4]
                   (ls per 32). x = (d (1 + 2 ls)) g s
  IQ1_S   (50 B):  f16 d | u8 qs[32] | u16 qh[8] (3 high index bits per group, 3-bit ls in
                   12..14, delta sign in 15). x = (d (2 ls + 1)) (g + delta), delta = +-1/8
  IQ1_M   (56 B):  u8 qs[32] | u8 qh[16] (per group nibble: 3 high index bits, delta sign) |
                   u16 scales[4] (3-bit ls per 16; the top nibbles make the f16 d).
"7-bit signs": bit 7 of the group's sign byte is the parity of bits 0..6.
"""

import os
import re

import numpy as np

QK_K = 256

_GRID_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src",
                            "quant", "iq_grids.cc")
_LEVELS = {
    "kIq2xxsCodes": (8, [8, 25, 43], 2), "kIq2xsCodes": (8, [8, 25, 43], 2),
    "kIq2sCodes": (8, [8, 25, 43], 2),
    "kIq3xxsCodes": (4, [4, 12, 20, 28, 36, 44, 52, 62], 3),
    "kIq3sCodes": (4, [1, 3, 5, 7, 9, 11, 13, 15], 3),
    "kIq1sCodes": (8, [-1, 0, 1], 2),
}
_GRIDS = {}


def _grid(name):
    """(points, coords) float32 array of grid `name` (a kIq*Codes array of iq_grids.cc)."""
    if not _GRIDS:
        text = open(_GRID_SOURCE).read()
        for n, (coords, levels, bits) in _LEVELS.items():
            body = re.search(r"\b" + n + r"\[\d+\] = \{(.*?)\};", text, re.S).group(1)
            codes = np.array([int(v, 16) for v in re.findall(r"0x[0-9a-fA-F]+", body)])
            idx = (codes[:, None] >> (bits * np.arange(coords))[None, :]) & ((1 << bits) - 1)
            _GRIDS[n] = np.array(levels, np.float32)[idx]
    return _GRIDS[name]


def _blocks(raw, block_bytes):
    raw = np.ascontiguousarray(raw, dtype=np.uint8)
    lead = raw.shape[:-1]
    if raw.shape[-1] % block_bytes:
        raise ValueError(f"row of {raw.shape[-1]} bytes is not whole {block_bytes}-byte blocks")
    return raw.reshape(-1, block_bytes), lead, raw.shape[-1] // block_bytes


def _f16(b, at):
    return b[:, at:at + 2].copy().view("<f2").astype(np.float32)  # (n, 1)


def _u32(b, at, count):
    return b[:, at:at + 4 * count].copy().view("<u4").astype(np.int64)  # (n, count)


def _signs7(fields):
    """7-bit sign fields -> (..., 8) of +-1: bit 7 is the parity of the 7."""
    bits = (fields[..., None] >> np.arange(7)) & 1
    parity = bits.sum(-1, keepdims=True) & 1
    return np.where(np.concatenate([bits, parity], -1) == 1, np.float32(-1), np.float32(1))


def _signs8(bytes_):
    bits = (bytes_[..., None].astype(np.int64) >> np.arange(8)) & 1
    return np.where(bits == 1, np.float32(-1), np.float32(1))


def _finish(y, lead, nb):
    return y.reshape(lead + (nb * QK_K,))


def _signed(db, g, s):
    """(db * g) * s, float32, db broadcast over each group's 8 elements."""
    return (db[..., None] * g).astype(np.float32) * s


def deq_iq2_xxs(raw):
    b, lead, nb = _blocks(raw, 66)
    d = _f16(b, 0)
    w = _u32(b, 2, 16).reshape(-1, 8, 2)  # (n, 32-block, [w0, w1])
    idx = (w[:, :, 0:1] >> (8 * np.arange(4))) & 0xFF  # (n, 8, 4)
    signs = _signs7((w[:, :, 1:2] >> (7 * np.arange(4))) & 127)  # (n, 8, 4, 8)
    db = d * (np.float32(0.5) + (w[:, :, 1] >> 28).astype(np.float32)) * np.float32(0.25)
    g = _grid("kIq2xxsCodes")[idx]
    return _finish(_signed(np.repeat(db[:, :, None], 4, 2), g, signs), lead, nb)


def _iq2_16_scales(b, at, d):
    """Per-group db of IQ2_XS / IQ2_S: 8 scale bytes, low nibble = first 16 of each 32."""
    sc = b[:, at:at + 8].astype(np.int64)
    ls = np.stack([sc & 0xF, sc >> 4], 2).reshape(-1, 16)  # per 16 elements
    db = d * (np.float32(0.5) + ls.astype(np.float32)) * np.float32(0.25)
    return np.repeat(db, 2, 1)  # per group


def deq_iq2_xs(raw):
    b, lead, nb = _blocks(raw, 74)
    d = _f16(b, 0)
    q = b[:, 2:66].copy().view("<u2").astype(np.int64)  # (n, 32)
    g = _grid("kIq2xsCodes")[q & 511]
    return _finish(_signed(_iq2_16_scales(b, 66, d), g, _signs7(q >> 9)), lead, nb)


def deq_iq2_s(raw):
    b, lead, nb = _blocks(raw, 82)
    d = _f16(b, 0)
    qh = b[:, 66:74].astype(np.int64)
    high = ((qh[:, :, None] >> (2 * np.arange(4))) & 3).reshape(-1, 32)
    g = _grid("kIq2sCodes")[b[:, 2:34].astype(np.int64) | (high << 8)]
    return _finish(_signed(_iq2_16_scales(b, 74, d), g, _signs8(b[:, 34:66])), lead, nb)


def deq_iq3_xxs(raw):
    b, lead, nb = _blocks(raw, 98)
    d = _f16(b, 0)
    w = _u32(b, 66, 8)  # (n, 8)
    g = _grid("kIq3xxsCodes")[b[:, 2:66].astype(np.int64)].reshape(-1, 32, 8)
    signs = _signs7((w[:, :, None] >> (7 * np.arange(4))) & 127).reshape(-1, 32, 8)
    db = d * (np.float32(0.5) + (w >> 28).astype(np.float32)) * np.float32(0.5)
    return _finish(_signed(np.repeat(db, 4, 1), g, signs), lead, nb)


def deq_iq3_s(raw):
    b, lead, nb = _blocks(raw, 110)
    d = _f16(b, 0)
    qh = b[:, 66:74].astype(np.int64)
    high = ((qh[:, :, None] >> np.arange(8)) & 1).reshape(-1, 64)
    g = _grid("kIq3sCodes")[b[:, 2:66].astype(np.int64) | (high << 8)].reshape(-1, 32, 8)
    sc = b[:, 106:110].astype(np.int64)
    ls = np.stack([sc & 0xF, sc >> 4], 2).reshape(-1, 8)  # per 32
    db = d * (1 + 2 * ls).astype(np.float32)
    return _finish(_signed(np.repeat(db, 4, 1), g, _signs8(b[:, 74:106])), lead, nb)


def deq_iq1_s(raw):
    b, lead, nb = _blocks(raw, 50)
    d = _f16(b, 0)
    qh = b[:, 34:50].copy().view("<u2").astype(np.int64)  # (n, 8)
    high = ((qh[:, :, None] >> (3 * np.arange(4))) & 7).reshape(-1, 32)
    g = _grid("kIq1sCodes")[b[:, 2:34].astype(np.int64) | (high << 8)].reshape(-1, 8, 32)
    dl = d * (2 * ((qh >> 12) & 7) + 1).astype(np.float32)
    delta = np.where(qh & 0x8000, np.float32(-0.125), np.float32(0.125))
    return _finish(dl[:, :, None] * (g + delta[:, :, None]), lead, nb)


def deq_iq1_m(raw):
    b, lead, nb = _blocks(raw, 56)
    s = b[:, 48:56].copy().view("<u2").astype(np.int64)  # (n, 4)
    d_bits = (s[:, 0] >> 12) | ((s[:, 1] >> 8) & 0xF0) | ((s[:, 2] >> 4) & 0xF00) | (s[:, 3] & 0xF000)
    d = d_bits.astype("<u2").view("<f2").astype(np.float32)[:, None]
    ls = ((s[:, :, None] >> (3 * np.arange(4))) & 7).reshape(-1, 16)  # per 16
    dl = np.repeat(d * (2 * ls + 1).astype(np.float32), 2, 1)  # per group
    h = ((b[:, 32:48, None].astype(np.int64) >> np.array([0, 4])) & 15).reshape(-1, 32)
    g = _grid("kIq1sCodes")[b[:, 0:32].astype(np.int64) | ((h & 7) << 8)]
    delta = np.where(h & 8, np.float32(-0.125), np.float32(0.125))
    return _finish(dl[:, :, None] * (g + delta[:, :, None]), lead, nb)


DEQUANT_IQ = {
    "IQ2_XXS": deq_iq2_xxs, "IQ2_XS": deq_iq2_xs, "IQ2_S": deq_iq2_s,
    "IQ3_XXS": deq_iq3_xxs, "IQ3_S": deq_iq3_s, "IQ1_S": deq_iq1_s, "IQ1_M": deq_iq1_m,
}
