// The first half of every matrix-multiply shader (mm_<type>.comp): bindings, push constants
// and the readers of the weight bytes. A shader defines BLOCK_SIZE (elements per block),
// BLOCK_BYTES (bytes per block) and CHUNK (elements one DequantChunk call gives, a divisor of
// BLOCK_SIZE), includes this file, defines DequantChunk and then includes mm_main.glsl.
//
// Y[n, m] = X[n, k] . W[m, k]^T: W is raw GGUF blocks, read as uint32 words and unpacked by
// hand (no 8- or 16-bit storage features needed); X and Y are f32.
#extension GL_GOOGLE_include_directive : enable

layout(std430, binding = 0) readonly buffer WeightBuffer { uint w[]; };    // GGUF blocks
layout(std430, binding = 1) readonly buffer InputBuffer { float x[]; };    // (n, x_stride)
layout(std430, binding = 2) writeonly buffer OutputBuffer { float y[]; };  // (n, y_stride)

layout(push_constant) uniform Params {
  uint w_offset;   // bytes: row 0 of W in the weight binding
  uint row_bytes;  // bytes per row of W: k / BLOCK_SIZE * BLOCK_BYTES
  uint m;          // rows of W = columns of Y
  uint k;          // columns of W and X (a multiple of BLOCK_SIZE)
  uint n;          // rows of X and Y (tokens)
  uint x_offset;   // floats: X[0, 0] in the input binding
  uint x_stride;   // floats between rows of X
  uint y_offset;   // floats: Y[0, 0] in the output binding
  uint y_stride;   // floats between rows of Y
  uint row_threads;  // threads per row of W: a power of 2 from TOKENS to WG (mm_main.glsl)
  uint heads;         // products of this shape a dispatch (gpu/matmul.h MatMulArgs::heads)
  uint w_head_bytes;  // bytes between consecutive heads' W
  uint x_head;        // floats between consecutive heads' X
  uint y_head;        // floats between consecutive heads' Y
} p;

// Byte b of the weight binding (any alignment), little-endian as GGUF stores it.
uint Byte(uint b) { return (w[b >> 2] >> ((b & 3u) << 3)) & 0xFFu; }
int SignedByte(uint b) { return int(Byte(b) << 24) >> 24; }
uint U16(uint b) { return Byte(b) | (Byte(b + 1u) << 8); }
// Bytes b .. b+3 as one little-endian word (any alignment).
uint U32(uint b) {
  const uint shift = (b & 3u) << 3;
  const uint lo = w[b >> 2];
  if (shift == 0u) return lo;
  return (lo >> shift) | (w[(b >> 2) + 1u] << (32u - shift));
}
float Half(uint b) { return unpackHalf2x16(U16(b)).x; }
