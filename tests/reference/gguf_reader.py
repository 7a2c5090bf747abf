"""A small GGUF (v2/v3) reader in pure Python + numpy, written from the GGUF spec.

Independent of moetier's C++ reader: the reference forward pass uses it to load weights.

File layout (all little-endian):
    magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
    n_kv x (string key, u32 value_type, value)
    n_tensors x (string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset)
    padding to `general.alignment` (default 32)
    tensor data; each tensor's offset is relative to the start of this section.
A string is u64 length + UTF-8 bytes; an array is u32 element type + u64 count + elements.
ne[0] is the fastest-varying dimension, so a tensor's numpy shape is reversed(ne).

Split sets (PREFIX-00001-of-0000N.gguf, keys split.no / split.count) are merged when the first
shard is opened: every shard carries its own tensor infos and data section.
"""

import re
import struct

import numpy as np

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# Metadata value types.
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL = range(8)
T_STRING, T_ARRAY, T_UINT64, T_INT64, T_FLOAT64 = range(8, 13)

_SCALAR = {
    T_UINT8: "<B", T_INT8: "<b", T_UINT16: "<H", T_INT16: "<h", T_UINT32: "<I",
    T_INT32: "<i", T_FLOAT32: "<f", T_BOOL: "<?", T_UINT64: "<Q", T_INT64: "<q",
    T_FLOAT64: "<d",
}
_SCALAR_NP = {
    T_UINT8: "<u1", T_INT8: "<i1", T_UINT16: "<u2", T_INT16: "<i2", T_UINT32: "<u4",
    T_INT32: "<i4", T_FLOAT32: "<f4", T_BOOL: "<u1", T_UINT64: "<u8", T_INT64: "<i8",
    T_FLOAT64: "<f8",
}

# ggml types: id -> (name, elements per block, bytes per block).
GGML_TYPES = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2),
    39: ("MXFP4", 32, 17),
}


class GGUFError(Exception):
    pass


class TensorInfo:
    """One tensor: name, ne (ggml order, fastest first), type id, absolute file offset, nbytes."""

    def __init__(self, name, ne, type_id, offset, nbytes, data):
        self.name = name
        self.ne = ne
        self.type_id = type_id
        self.offset = offset
        self.nbytes = nbytes
        self.data = data  # uint8 view of the tensor's bytes (memory-mapped)

    @property
    def type_name(self):
        return GGML_TYPES[self.type_id][0]

    @property
    def shape(self):
        """numpy shape of the element array: reversed(ne)."""
        return tuple(reversed(self.ne))

    def __repr__(self):
        return f"TensorInfo({self.name}, ne={self.ne}, {self.type_name}, off={self.offset})"


class _Cursor:
    def __init__(self, buf, path):
        self.buf = buf
        self.pos = 0
        self.path = path

    def take(self, n):
        if n < 0 or self.pos + n > len(self.buf):
            raise GGUFError(f"{self.path}: truncated at offset {self.pos} (need {n} bytes)")
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def scalar(self, fmt):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self):
        n = self.scalar("<Q")
        return bytes(self.take(n)).decode("utf-8", errors="replace")

    def strings(self, n):
        # A tight loop: vocabularies hold hundreds of thousands of strings.
        buf, pos, end = self.buf, self.pos, len(self.buf)
        unpack = struct.Struct("<Q").unpack_from
        out = []
        for _ in range(n):
            if pos + 8 > end:
                raise GGUFError(f"{self.path}: truncated string array at offset {pos}")
            length = unpack(buf, pos)[0]
            pos += 8
            if length > end - pos:
                raise GGUFError(f"{self.path}: string of {length} bytes at offset {pos} "
                                "runs past the end")
            out.append(str(buf[pos:pos + length], "utf-8", "replace"))
            pos += length
        self.pos = pos
        return out

    def value(self, vtype):
        if vtype in _SCALAR:
            return self.scalar(_SCALAR[vtype])
        if vtype == T_STRING:
            return self.string()
        if vtype == T_ARRAY:
            etype = self.scalar("<I")
            n = self.scalar("<Q")
            if etype in _SCALAR_NP:
                dt = np.dtype(_SCALAR_NP[etype])
                arr = np.frombuffer(self.take(n * dt.itemsize), dtype=dt)
                return arr.astype(bool) if etype == T_BOOL else arr
            if etype == T_STRING:
                return self.strings(n)
            if etype == T_ARRAY:
                return [self.value(etype) for _ in range(n)]
            raise GGUFError(f"{self.path}: bad array element type {etype} at {self.pos}")
        raise GGUFError(f"{self.path}: bad value type {vtype} at offset {self.pos}")


class GGUFFile:
    """A GGUF file (or a split set opened from its first shard).

    metadata: dict key -> value (numbers, str, numpy arrays for numeric arrays, lists otherwise).
    tensors: dict name -> TensorInfo (in file order).
    """

    def __init__(self, path, follow_splits=True):
        self.path = path
        self.metadata = {}
        self.tensors = {}
        self._maps = []
        self._read_one(path, first=True)
        n_split = int(self.metadata.get("split.count", 1))
        if follow_splits and n_split > 1:
            m = re.match(r"^(.*)-(\d{5})-of-(\d{5})\.gguf$", path)
            if not m or int(m.group(2)) != 1:
                raise GGUFError(f"{path}: split set must be opened from its first shard")
            for i in range(2, n_split + 1):
                self._read_one(f"{m.group(1)}-{i:05d}-of-{n_split:05d}.gguf", first=False)

    def _read_one(self, path, first):
        mm = np.memmap(path, dtype=np.uint8, mode="r")
        self._maps.append(mm)
        cur = _Cursor(memoryview(mm), path)
        if bytes(cur.take(4)) != GGUF_MAGIC:
            raise GGUFError(f"{path}: not a GGUF file (bad magic)")
        version = cur.scalar("<I")
        if version not in (2, 3):
            raise GGUFError(f"{path}: unsupported GGUF version {version}")
        n_tensors = cur.scalar("<Q")
        n_kv = cur.scalar("<Q")
        if n_tensors > len(mm) or n_kv > len(mm):
            raise GGUFError(f"{path}: implausible counts {n_tensors} tensors / {n_kv} keys")
        meta = {}
        for _ in range(n_kv):
            key = cur.string()
            vtype = cur.scalar("<I")
            meta[key] = cur.value(vtype)
        if first:
            self.version = version
            self.metadata.update(meta)
        infos = []
        for _ in range(n_tensors):
            name = cur.string()
            n_dims = cur.scalar("<I")
            if n_dims > 4:
                raise GGUFError(f"{path}: tensor {name} has {n_dims} dims")
            ne = [cur.scalar("<Q") for _ in range(n_dims)]
            type_id = cur.scalar("<I")
            offset = cur.scalar("<Q")
            infos.append((name, ne, type_id, offset))
        alignment = int(meta.get("general.alignment", DEFAULT_ALIGNMENT))
        data_start = (cur.pos + alignment - 1) // alignment * alignment
        for name, ne, type_id, offset in infos:
            if type_id not in GGML_TYPES:
                raise GGUFError(f"{path}: tensor {name} has unknown type {type_id}")
            _, blck, tsize = GGML_TYPES[type_id]
            if ne[0] % blck:
                raise GGUFError(f"{path}: tensor {name} row of {ne[0]} not a multiple of {blck}")
            nbytes = int(np.prod(ne, dtype=np.int64)) // blck * tsize
            start = data_start + offset
            if offset % alignment or start + nbytes > len(mm):
                raise GGUFError(f"{path}: tensor {name} at {start}+{nbytes} outside the file")
            if name in self.tensors:
                raise GGUFError(f"{path}: duplicate tensor {name}")
            self.tensors[name] = TensorInfo(name, ne, type_id, start, nbytes,
                                            mm[start:start + nbytes])
        self.alignment = alignment if first else self.alignment
        if first:
            self.data_offset = data_start

    # Convenience accessors.
    def get(self, key, default=None):
        return self.metadata.get(key, default)

    def raw(self, name):
        """The tensor's bytes as uint8 rows: shape reversed(ne)[:-1] + (row_bytes,)."""
        t = self.tensors[name]
        _, blck, tsize = GGML_TYPES[t.type_id]
        row_bytes = t.ne[0] // blck * tsize
        return t.data.reshape(tuple(reversed(t.ne[1:])) + (row_bytes,))


def open_gguf(path):
    return GGUFFile(path)


if __name__ == "__main__":
    import sys

    g = GGUFFile(sys.argv[1])
    print(f"GGUF v{g.version}, {len(g.metadata)} keys, {len(g.tensors)} tensors, "
          f"alignment {g.alignment}, data at {g.data_offset}")
    for k, v in g.metadata.items():
        s = repr(v) if not isinstance(v, (list, np.ndarray)) else f"[{len(v)} items]"
        print(f"  {k} = {s[:80]}")
    for t in g.tensors.values():
        print(f"  {t.name:40s} {t.type_name:6s} ne={t.ne}")
