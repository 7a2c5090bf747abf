"""numpy dequantization of ggml tensor types, written from the ggml block definitions.

Each function takes a uint8 array whose last axis holds whole blocks of one row
(shape (..., row_bytes)) and returns float32 values of shape (..., n_per_row).
Arithmetic is done in float32 in the order of the format's definition
(e.g. Q4_K: (d * sc) * q - (dmin * m)), so results match a float32 C dequantizer exactly.

Block layouts (little-endian, QK_K = 256):
  Q8_0  (34 B / 32):  f16 d | i8 q[32]                      x = d * q
  Q4_0  (18 B / 32):  f16 d | u8 qs[16]                     x[j] = d * ((qs[j] & 15) - 8),
                                                            x[j+16] = d * ((qs[j] >> 4) - 8)
  Q4_1  (20 B / 32):  f16 d | f16 m | u8 qs[16]             x = d * q + m   (q as Q4_0, no -8)
  Q5_0  (22 B / 32):  f16 d | u32 qh | u8 qs[16]            5th bit of x[j] is bit j of qh;
                                                            x = d * (q5 - 16)
  Q5_1  (24 B / 32):  f16 d | f16 m | u32 qh | u8 qs[16]    x = d * q5 + m
  Q4_K  (144 B / 256): f16 d | f16 dmin | u8 scales[12] | u8 qs[128]
        8 sub-blocks of 32, 6-bit scale sc and min m each; sub-block 2g uses the low nibbles
        of qs[32g:32g+32], sub-block 2g+1 the high nibbles; x = (d*sc) * q - (dmin*m).
  Q5_K  (176 B / 256): f16 d | f16 dmin | u8 scales[12] | u8 qh[32] | u8 qs[128]
        as Q4_K plus a 5th bit: sub-block s takes bit s of qh[l] (l = index in sub-block).
  Q6_K  (210 B / 256): u8 ql[128] | u8 qh[64] | i8 scales[16] | f16 d
        two halves of 128; in half h, element l + 32*k (k = 0..3, l = 0..31) has low 4 bits from
        ql[64h + l + 32*(k&1)] (low nibble for k < 2, high for k >= 2), high 2 bits from
        qh[32h + l] >> 2k, scale scales[8h + l//16 + 2k]; x = (d * sc) * (q6 - 32).
  MXFP4 (17 B / 32):  u8 e (E8M0) | u8 qs[16]               x[j] = K[qs[j] & 15] * 2^(e-128),
        x[j+16] = K[qs[j] >> 4] * 2^(e-128), K = 2 * E2M1 = {0,1,2,3,4,6,8,12, -0,-1,...,-12}.
        (2^(e-127) is the E8M0 scale; the halving compensates for the doubled table.)
  Q2_K  (84 B / 256):  u8 scales[16] | u8 qs[64] | f16 d | f16 dmin
        16 sub-blocks of 16 (j = e // 16), scales[j] = sc | m << 4; element 128n + 32k + l
        (k < 4, l < 32) has q = (qs[32n + l] >> 2k) & 3; x = (d*sc) * q - (dmin*m).
  Q3_K  (110 B / 256): u8 hmask[32] | u8 qs[64] | u8 scales[12] | f16 d
        q = low 2 bits as Q2_K's | (bit e // 32 of hmask[e % 32]) << 2; 6-bit sc + 32: low 4 bits
        scales[j] & 15 (j < 8) or scales[j-8] >> 4, high 2 bits scales[8 + j%4] >> 2(j//4);
        x = (d * (sc - 32)) * (q - 4).
  IQ4_NL (18 B / 32):  f16 d | u8 qs[16]                    x = d * V[q], nibbles as Q4_0,
        V = kvalues_iq4nl = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, ..., 89, 113}.
  IQ4_XS (136 B / 256): f16 d | u16 scales_h | u8 scales_l[4] | u8 qs[128]
        8 sub-blocks of 32: ls = ((scales_l[j//2] >> 4(j%2)) & 15) | ((scales_h >> 2j) & 3) << 4;
        qs[16j:16j+16] as one IQ4_NL block's nibbles; x = (d * (ls - 32)) * V[q].
"""

import numpy as np

from dequant_iq import DEQUANT_IQ  # same folder (callers put it on sys.path)

QK_K = 256

# 2 * (the E2M1 values), indexed by the 4-bit code (sign bit 3).
_MXFP4_TABLE = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12],
                        dtype=np.float32)

# kvalues_iq4nl: the 16 values of the IQ4_NL / IQ4_XS codes.
_IQ4NL_TABLE = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
                        dtype=np.float32)


def _blocks(raw, block_bytes):
    raw = np.ascontiguousarray(raw, dtype=np.uint8)
    lead = raw.shape[:-1]
    row_bytes = raw.shape[-1]
    if row_bytes % block_bytes:
        raise ValueError(f"row of {row_bytes} bytes is not whole {block_bytes}-byte blocks")
    return raw.reshape(-1, block_bytes), lead, row_bytes // block_bytes


def _f16(b, at):
    """f16 field at byte `at` of each block -> float32 column (n_blocks, 1)."""
    return b[:, at:at + 2].copy().view("<f2").astype(np.float32)


def _finish(y, lead, n_blocks_per_row, qk):
    return y.reshape(lead + (n_blocks_per_row * qk,))


def deq_f32(raw):
    raw = np.ascontiguousarray(raw)
    return raw.view("<f4").reshape(raw.shape[:-1] + (raw.shape[-1] // 4,))


def deq_f16(raw):
    raw = np.ascontiguousarray(raw)
    return raw.view("<f2").astype(np.float32).reshape(raw.shape[:-1] + (raw.shape[-1] // 2,))


def deq_bf16(raw):
    raw = np.ascontiguousarray(raw)
    bits = raw.view("<u2").astype(np.uint32) << 16
    return bits.view(np.float32).reshape(raw.shape[:-1] + (raw.shape[-1] // 2,))


def deq_q8_0(raw):
    b, lead, nb = _blocks(raw, 34)
    d = _f16(b, 0)
    q = b[:, 2:34].view(np.int8).astype(np.float32)
    return _finish(q * d, lead, nb, 32)


def _nibbles32(qs):
    """16 bytes -> 32 values: element j is the low nibble of qs[j], j+16 the high nibble."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.int32)


def _qh_bits32(qh_bytes):
    """4 bytes of a little-endian u32 -> 32 bits, bit j for element j."""
    return np.unpackbits(qh_bytes, axis=1, bitorder="little").astype(np.int32)


def deq_q4_0(raw):
    b, lead, nb = _blocks(raw, 18)
    d = _f16(b, 0)
    q = (_nibbles32(b[:, 2:18]) - 8).astype(np.float32)
    return _finish(q * d, lead, nb, 32)


def deq_q4_1(raw):
    b, lead, nb = _blocks(raw, 20)
    d, m = _f16(b, 0), _f16(b, 2)
    q = _nibbles32(b[:, 4:20]).astype(np.float32)
    return _finish(q * d + m, lead, nb, 32)


def deq_q5_0(raw):
    b, lead, nb = _blocks(raw, 22)
    d = _f16(b, 0)
    q = _nibbles32(b[:, 6:22]) | (_qh_bits32(b[:, 2:6]) << 4)
    return _finish((q - 16).astype(np.float32) * d, lead, nb, 32)


def deq_q5_1(raw):
    b, lead, nb = _blocks(raw, 24)
    d, m = _f16(b, 0), _f16(b, 2)
    q = _nibbles32(b[:, 8:24]) | (_qh_bits32(b[:, 4:8]) << 4)
    return _finish(q.astype(np.float32) * d + m, lead, nb, 32)


def _k_scales_mins(scales):
    """12 bytes -> (sc[8], m[8]) 6-bit values of the 8 sub-blocks of Q4_K / Q5_K.

    Sub-blocks 0..3: sc = bytes[s] & 63, m = bytes[s+4] & 63.
    Sub-blocks 4..7: low 4 bits from bytes[s+4] (sc low nibble, m high nibble),
                     high 2 bits from the top bits of bytes[s-4] (sc) and bytes[s] (m).
    """
    s = scales.astype(np.int32)
    sc = np.empty((s.shape[0], 8), np.int32)
    m = np.empty((s.shape[0], 8), np.int32)
    sc[:, :4] = s[:, 0:4] & 63
    m[:, :4] = s[:, 4:8] & 63
    sc[:, 4:] = (s[:, 8:12] & 0x0F) | ((s[:, 0:4] >> 6) << 4)
    m[:, 4:] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
    return sc.astype(np.float32), m.astype(np.float32)


def _k_quants_4bit(qs):
    """128 bytes -> (n, 8, 32) 4-bit values: sub-block 2g low nibbles of qs[32g:32g+32],
    sub-block 2g+1 the high nibbles."""
    q = qs.reshape(-1, 4, 32)
    return np.stack([q & 0x0F, q >> 4], axis=2).reshape(-1, 8, 32).astype(np.int32)


def deq_q4_k(raw):
    b, lead, nb = _blocks(raw, 144)
    d, dmin = _f16(b, 0), _f16(b, 2)
    sc, m = _k_scales_mins(b[:, 4:16])
    q = _k_quants_4bit(b[:, 16:144]).astype(np.float32)
    y = (d * sc)[:, :, None] * q - (dmin * m)[:, :, None]
    return _finish(y, lead, nb, QK_K)


def deq_q5_k(raw):
    b, lead, nb = _blocks(raw, 176)
    d, dmin = _f16(b, 0), _f16(b, 2)
    sc, m = _k_scales_mins(b[:, 4:16])
    qh = b[:, 16:48]  # (n, 32): bit s of qh[l] is the 5th bit of element l of sub-block s
    high = np.unpackbits(qh[:, :, None], axis=2, bitorder="little")  # (n, 32 l, 8 s)
    q = _k_quants_4bit(b[:, 48:176]) | (high.transpose(0, 2, 1).astype(np.int32) << 4)
    y = (d * sc)[:, :, None] * q.astype(np.float32) - (dmin * m)[:, :, None]
    return _finish(y, lead, nb, QK_K)


def deq_q6_k(raw):
    b, lead, nb = _blocks(raw, 210)
    ql = b[:, 0:128].reshape(-1, 2, 2, 32).astype(np.int32)   # (n, half, ql half, l)
    qh = b[:, 128:192].reshape(-1, 2, 32).astype(np.int32)    # (n, half, l)
    sc = b[:, 192:208].view(np.int8).astype(np.float32).reshape(-1, 2, 8)
    d = _f16(b, 208)
    q = np.empty((b.shape[0], 2, 4, 32), np.int32)            # (n, half, k, l)
    for k in range(4):
        low = ql[:, :, k & 1, :]
        low = (low & 0x0F) if k < 2 else (low >> 4)
        q[:, :, k, :] = low | (((qh >> (2 * k)) & 3) << 4)
    q -= 32
    # scale of element (half, k, l) is sc[half, l // 16 + 2k]
    s_idx = (np.arange(4)[:, None] * 2 + np.arange(32)[None, :] // 16)  # (k, l)
    scale = d[:, :, None, None] * sc[:, :, s_idx]                        # (n, half, k, l)
    return _finish(scale * q.astype(np.float32), lead, nb, QK_K)


def deq_mxfp4(raw):
    b, lead, nb = _blocks(raw, 17)
    scale = np.ldexp(np.float32(1.0), b[:, 0:1].astype(np.int32) - 128).astype(np.float32)
    codes = np.concatenate([b[:, 1:17] & 0x0F, b[:, 1:17] >> 4], axis=1)
    return _finish(_MXFP4_TABLE[codes] * scale, lead, nb, 32)


def _low2(qs):
    """64 bytes -> (n, 256) 2-bit fields of Q2_K / Q3_K: element 128n + 32k + l is
    (qs[32n + l] >> 2k) & 3."""
    q = qs.reshape(-1, 2, 1, 32).astype(np.int32)               # (n, half, 1, l)
    shifts = (2 * np.arange(4)).reshape(1, 1, 4, 1)             # k
    return ((q >> shifts) & 3).reshape(-1, QK_K)


def deq_q2_k(raw):
    b, lead, nb = _blocks(raw, 84)
    sc = (b[:, 0:16] & 0x0F).astype(np.float32)
    m = (b[:, 0:16] >> 4).astype(np.float32)
    d, dmin = _f16(b, 80), _f16(b, 82)
    q = _low2(b[:, 16:80]).reshape(-1, 16, 16).astype(np.float32)  # (n, sub-block, 16)
    y = (d * sc)[:, :, None] * q - (dmin * m)[:, :, None]
    return _finish(y, lead, nb, QK_K)


def deq_q3_k(raw):
    b, lead, nb = _blocks(raw, 110)
    hmask = b[:, 0:32]
    high = np.unpackbits(hmask[:, None, :], axis=1, bitorder="little")  # (n, bit e//32, e%32)
    q = _low2(b[:, 32:96]) | (high.reshape(-1, QK_K).astype(np.int32) << 2)
    s = b[:, 96:108].astype(np.int32)
    j = np.arange(16)
    low = np.where(j < 8, s[:, j % 8] & 0x0F, s[:, j % 8] >> 4)
    sc = (low | (((s[:, 8 + j % 4] >> (2 * (j // 4))) & 3) << 4)) - 32
    d = _f16(b, 108)
    y = (d * sc.astype(np.float32))[:, :, None] * (q - 4).reshape(-1, 16, 16).astype(np.float32)
    return _finish(y, lead, nb, QK_K)


def deq_iq4_nl(raw):
    b, lead, nb = _blocks(raw, 18)
    d = _f16(b, 0)
    return _finish(_IQ4NL_TABLE[_nibbles32(b[:, 2:18])] * d, lead, nb, 32)


def deq_iq4_xs(raw):
    b, lead, nb = _blocks(raw, 136)
    d = _f16(b, 0)
    sh = b[:, 2:4].copy().view("<u2").astype(np.int32)          # (n, 1)
    sl = b[:, 4:8].astype(np.int32)
    j = np.arange(8)
    ls = ((sl[:, j // 2] >> (4 * (j % 2))) & 0x0F) | (((sh >> (2 * j)) & 3) << 4)
    codes = _nibbles32(b[:, 8:136].reshape(-1, 16)).reshape(-1, 8, 32)
    y = (d * (ls - 32).astype(np.float32))[:, :, None] * _IQ4NL_TABLE[codes]
    return _finish(y, lead, nb, QK_K)


DEQUANT = {
    "F32": deq_f32, "F16": deq_f16, "BF16": deq_bf16, "Q8_0": deq_q8_0, "Q4_0": deq_q4_0,
    "Q4_1": deq_q4_1, "Q5_0": deq_q5_0, "Q5_1": deq_q5_1, "Q4_K": deq_q4_k,
    "Q5_K": deq_q5_k, "Q6_K": deq_q6_k, "MXFP4": deq_mxfp4, "Q2_K": deq_q2_k,
    "Q3_K": deq_q3_k, "IQ4_NL": deq_iq4_nl, "IQ4_XS": deq_iq4_xs,
}
DEQUANT.update(DEQUANT_IQ)  # IQ2_XXS ... IQ1_M: dequant_iq.py


def dequantize(type_name, raw):
    """raw: uint8 (..., row_bytes) of one ggml type -> float32 (..., n_per_row)."""
    if type_name not in DEQUANT:
        raise ValueError(f"no reference dequantizer for ggml type {type_name}")
    return DEQUANT[type_name](raw)


def tensor_f32(gguf, name):
    """Dequantized tensor `name` of a GGUFFile as float32 with numpy shape reversed(ne)."""
    t = gguf.tensors[name]
    return dequantize(t.type_name, gguf.raw(name)).reshape(t.shape)


def tensor_rows_f32(gguf, name, rows):
    """Rows `rows` (indices into the slowest axis) of a 2-D tensor, dequantized."""
    t = gguf.tensors[name]
    return dequantize(t.type_name, np.asarray(gguf.raw(name))[np.asarray(rows)])
