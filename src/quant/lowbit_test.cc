// Q2_K, Q3_K, IQ4_NL and IQ4_XS (quant/lowbit.h) through the public entry points: golden
// blocks written by hand from the ggml format definitions, and the quantizers against bytes
// that llama.cpp's own quantizer (ggml_quantize_chunk, no importance matrix) wrote for a fixed
// input.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "quant/blocks.h"
#include "quant/dequant.h"
#include "quant/quant_test_util.h"
#include "quant/quantize.h"

namespace mt {
namespace {

using testing_quant::Dequant;
using testing_quant::Put16;

TEST(LowBitLayout, SizesAndTable) {
  // ggml-common.h: q2_K 2*2 + 256/16 + 256/4 = 84; q3_K 2 + 256/4 + 256/8 + 12 = 110;
  // iq4_nl 2 + 16 = 18 per 32; iq4_xs 2 + 2 + 256/64 + 256/2 = 136.
  EXPECT_EQ(sizeof(BlockQ2_K), TraitsOf(GgmlType::kQ2_K).type_size);
  EXPECT_EQ(sizeof(BlockQ3_K), TraitsOf(GgmlType::kQ3_K).type_size);
  EXPECT_EQ(sizeof(BlockIQ4_NL), TraitsOf(GgmlType::kIQ4_NL).type_size);
  EXPECT_EQ(sizeof(BlockIQ4_XS), TraitsOf(GgmlType::kIQ4_XS).type_size);
  EXPECT_EQ(RowBytes(GgmlType::kQ2_K, 256), 84u);
  EXPECT_EQ(RowBytes(GgmlType::kQ3_K, 256), 110u);
  EXPECT_EQ(RowBytes(GgmlType::kIQ4_NL, 256), 144u);
  EXPECT_EQ(RowBytes(GgmlType::kIQ4_XS, 256), 136u);
  for (GgmlType t : {GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kIQ4_NL, GgmlType::kIQ4_XS}) {
    EXPECT_TRUE(CanDequantize(t)) << TypeName(t);
    EXPECT_TRUE(CanQuantize(t)) << TypeName(t);
  }
  // kvalues_iq4nl: increasing, from -127 to 113.
  EXPECT_EQ(kIq4nlValues[0], -127);
  EXPECT_EQ(kIq4nlValues[8], 1);
  EXPECT_EQ(kIq4nlValues[15], 113);
  for (int i = 1; i < 16; ++i) EXPECT_LT(kIq4nlValues[i - 1], kIq4nlValues[i]);
}

TEST(LowBitGolden, Q2_K) {
  // scales at 0, qs at 16, d at 80 (1.0 = 0x3C00), dmin at 82 (0.5 = 0x3800).
  // x = (d * sc) * q - (dmin * m), scales[j] = sc | m << 4, j = e / 16.
  // qs[0] = 0xE4 = 0b11'10'01'00: element 0 (shift 0) q = 0, element 32 (shift 2) q = 1,
  //   element 64 (shift 4) q = 2, element 96 (shift 6) q = 3.
  //   e0:  scales[0] = 0x21 (sc 1, m 2): 1 * 0 - 0.5 * 2 = -1
  //   e32: scales[2] = 0x12 (sc 2, m 1): 2 * 1 - 0.5 = 1.5
  //   e64: scales[4] = 0x05 (sc 5, m 0): 5 * 2 = 10
  //   e96: scales[6] = 0x37 (sc 7, m 3): 7 * 3 - 1.5 = 19.5
  // e80: half 0, shift 2 * 2 = 4, l = 16 -> (qs[16] >> 4) & 3; qs[16] = 0x30 -> 3;
  //   scales[5] = 0x3F (sc 15, m 3): 15 * 3 - 1.5 = 43.5
  // e161: half 1, shift 2, l = 1 -> (qs[32 + 1] >> 2) & 3; qs[33] = 0x08 -> 2;
  //   scales[10] = 0xF1 (sc 1, m 15): 1 * 2 - 7.5 = -5.5
  // e1: q 0, sub-block 0: -1.  e48: sub-block 3, scales[3] = 0: 0.
  std::array<uint8_t, 84> b{};
  b[0] = 0x21, b[2] = 0x12, b[4] = 0x05, b[5] = 0x3F, b[6] = 0x37, b[10] = 0xF1;
  b[16 + 0] = 0xE4, b[16 + 16] = 0x30, b[16 + 33] = 0x08;
  Put16(b, 80, 0x3C00);
  Put16(b, 82, 0x3800);
  const auto y = Dequant(GgmlType::kQ2_K, b);
  EXPECT_EQ(y[0], -1.0f);
  EXPECT_EQ(y[32], 1.5f);
  EXPECT_EQ(y[64], 10.0f);
  EXPECT_EQ(y[96], 19.5f);
  EXPECT_EQ(y[80], 43.5f);
  EXPECT_EQ(y[161], -5.5f);
  EXPECT_EQ(y[1], -1.0f);
  EXPECT_EQ(y[48], 0.0f);
}

TEST(LowBitGolden, Q3_K) {
  // hmask at 0, qs at 32, scales at 96, d at 108 (0.5 = 0x3800). All-zero scale bytes stand
  // for sc = 0 - 32 = -32.
  // sc0 = 35 - 32 = 3: low 4 bits 3 in scales[0], high 2 bits 2 in bits 0-1 of scales[8].
  // sc15 = 63 - 32 = 31: low 4 bits = scales[7] >> 4 = 15, high = (scales[11] >> 6) & 3 = 3.
  // e0: low = qs[0] & 3 = 1, high = bit 0 of hmask[0] = 1 -> q 5 -> 0.5 * 3 * (5 - 4) = 1.5
  // e1: qs[1] = 0, hmask[1] = 0 -> q 0 -> 0.5 * 3 * -4 = -6
  // e144 (sub-block 9, sc -32): half 1, shift 0, l = 16: qs[48] & 3 = 3, bit 144 / 32 = 4 of
  //   hmask[144 % 32 = 16] = 1 -> q 7 -> 0.5 * -32 * 3 = -48
  // e255 (sub-block 15): half 1, shift 6, l = 31: (qs[63] >> 6) & 3 = 1, bit 7 of hmask[31]
  //   = 0 -> q 1 -> 0.5 * 31 * -3 = -46.5
  std::array<uint8_t, 110> b{};
  b[0] = 0x01, b[32 + 0] = 0x01;
  b[16] = 0x10, b[32 + 48] = 0x03;
  b[32 + 63] = 0x40;
  b[96 + 0] = 0x03, b[96 + 8] = 0x02, b[96 + 7] = 0xF0, b[96 + 11] = 0xC0;
  Put16(b, 108, 0x3800);
  const auto y = Dequant(GgmlType::kQ3_K, b);
  EXPECT_EQ(y[0], 1.5f);
  EXPECT_EQ(y[1], -6.0f);
  EXPECT_EQ(y[144], -48.0f);
  EXPECT_EQ(y[255], -46.5f);
}

TEST(LowBitGolden, IQ4_NL) {
  // d = 2 (0x4000). qs[0] = 0xF0: e0 = 2 * v[0] = -254, e16 = 2 * v[15] = 226.
  // qs[3] = 0x78: e3 = 2 * v[8] = 2, e19 = 2 * v[7] = -20. Block 1: d = -0.5 (0xB800),
  // qs[0] = 0x0C: e32 = -0.5 * v[12] = -26.5, e48 = -0.5 * v[0] = 63.5.
  std::array<uint8_t, 36> b{};
  Put16(b, 0, 0x4000);
  b[2 + 0] = 0xF0, b[2 + 3] = 0x78;
  Put16(b, 18, 0xB800);
  b[20] = 0x0C;
  const auto y = Dequant(GgmlType::kIQ4_NL, b);
  EXPECT_EQ(y[0], -254.0f);
  EXPECT_EQ(y[16], 226.0f);
  EXPECT_EQ(y[3], 2.0f);
  EXPECT_EQ(y[19], -20.0f);
  EXPECT_EQ(y[32], -26.5f);
  EXPECT_EQ(y[48], 63.5f);
}

TEST(LowBitGolden, IQ4_XS) {
  // d at 0 (0.25 = 0x3400), scales_h at 2, scales_l at 4, qs at 8.
  // ls0 = 36 (sc 4): scales_l[0] low nibble 4, scales_h bits 0-1 = 2.
  // ls7 = 63 (sc 31): scales_l[3] high nibble 15, scales_h bits 14-15 = 3. ls5 = 0 (sc -32).
  // e0 = low nibble of qs[0] = 0x9F: 0.25 * 4 * v[15] = 113; e16 = high nibble: v[9] = 13.
  // e161 (sub-block 5, l = 1): low nibble of qs[16 * 5 + 1] = 0x30 -> v[0]:
  //   0.25 * -32 * -127 = 1016; e177: high nibble v[3] = -65 -> 520.
  // e255 (sub-block 7): high nibble of qs[127] = 0x80 -> v[8] = 1 -> 0.25 * 31 = 7.75.
  std::array<uint8_t, 136> b{};
  Put16(b, 0, 0x3400);
  Put16(b, 2, 0xC002);
  b[4 + 0] = 0x04, b[4 + 3] = 0xF0;
  b[8 + 0] = 0x9F, b[8 + 81] = 0x30, b[8 + 127] = 0x80;
  const auto y = Dequant(GgmlType::kIQ4_XS, b);
  EXPECT_EQ(y[0], 113.0f);
  EXPECT_EQ(y[16], 13.0f);
  EXPECT_EQ(y[161], 1016.0f);
  EXPECT_EQ(y[177], 520.0f);
  EXPECT_EQ(y[255], 7.75f);
}

// The input of the golden quantizations: exact in float, sub-blocks of different scales, a
// zero sub-block (elements 80..95) and a shifted stretch (128..255).
std::vector<float> GoldenInput() {
  std::vector<float> x(512);
  for (int i = 0; i < 512; ++i) {
    const float v = static_cast<float>((i * 37 + 11) % 97 - 48) / 16.0f;
    x[i] = i / 16 == 5 ? 0.0f
                       : v * static_cast<float>(1 << ((i / 32) % 4)) + (i / 128 == 1 ? 1.5f : 0.0f);
  }
  return x;
}

std::string Hex(const std::vector<uint8_t>& bytes) {
  std::string s;
  char buf[3];
  for (uint8_t b : bytes) {
    std::snprintf(buf, sizeof(buf), "%02x", b);
    s += buf;
  }
  return s;
}

// What ggml_quantize_chunk (llama.cpp 3f545be, no importance matrix) wrote for GoldenInput().
TEST(LowBitQuantize, SameBytesAsLlamaCpp) {
  const struct {
    GgmlType type;
    const char* hex;
  } cases[] = {
      {GgmlType::kQ2_K,
       "222244337700eede021223346757ceffa43a93e54e94394ee43a93e94e943953"
       "c50e83c94e840a43c54e800943c40e8392e84da43952e40d92f84ea43d52e84d"
       "943943e57a93e94e943a83e54e94294e663ba03d222234446787defe22223334"
       "7777deff4ea43a93e54a903943e53a93e54e943a93e54e94395ee43a93f94ea4"
       "3953e54e0e93f94ea43a53e54e90394ee43e93e94aa03953e54a93f54ea43a93"
       "e54a90396c3bbd3d"},
      {GgmlType::kQ3_K,
       "6e11cf3a85ee30c56a01cf3a85ee11cf718ae0338a611bc8338ae13bc8718bc8"
       "85582ff2b5581fe2b5481fe3f6895c2f4e8bc8054e8fc805428fcbc5428ec805"
       "d82c72b5cb1960b6c41f61b1cb196c7685db297086d42c62b1db1960b6c5df61"
       "a4ac787811f01f0156191d124f328c23598e73dca7798e73d88673dca779ab5e"
       "f18a74a10e75ab5ef18e75ab5ef172b7c81d22b7cbdc6e76cbdc217687d82fd2"
       "95782fe295783fe295893c2fd68987fc2d528bf83d5297cbed6297f83d615e8f"
       "f425528bf8215e8ff425628bcbf5ccc4989811f1130ed59e112d4a32"},
      {GgmlType::kIQ4_NL,
       "2ea6de6801bc35ef8a13ce57f1ac24ef791272aa9b24de6912bd46e08a23de57"
       "f1ac35efbfad87818c848f89828e86808b838f88818d22b223de6801bc35ef8a"
       "13ce57f1ac24ef7973a8b057129a45017823a056128a34b16723f3aaac35e079"
       "23cd57019b34d06812bc4601e6ae7923cd57019b34de6812bc46e18a23ce20b2"
       "46f09b23de6801bc35e08a13ce57f1ac1c26ed32b90f64db2197fe42ca1f75ec"
       "31a81baaf09b23de6801bc35ef8a13ce57f1ac247daecd57f19b34de6912bd46"
       "e08a23de57f11c3285ed32b90f64db2197fe42ca1f75ec311ea646f09b23de68"
       "01bc35ef8a13ce57f1acbba912ce46f0ac24ef6901bd35f08b13de57172e1085"
       "ed32b90f64db2197fe42ca1f75ec1fb2cd46f09b23de6801bc35ef8a13ce57f1"},
      {GgmlType::kIQ4_XS,
       "221e15058c017a0ede6801bc35ef8a13ce57f1ac24ef79129b24df6912bd45f0"
       "8a23de57f1ac35ef87818c848f89828e86808b838f88818d23de6801bc35ef8a"
       "13ce57f1ac24ef79b057129a45017823a056128a34b16723ac35e07923cd5701"
       "9b34d06812bc46017923cd57019b34de6812bc46e18a23ce46f09b23de6801bc"
       "35e08a13ce57f1ac1f1ec63584ff9c00ed32b90f64db2197fe42ca1f75ec31a8"
       "f09b23de6801bc35ef8a13ce57f1ac24cd57f19b34de6912bd46e08a23de57f1"
       "85ed32b90f64dc2096fe42ca1f75ec2146f09b23de6801bc35ef8a13ce57f1ac"
       "02de46f0ac23ef6901cd35f08b12df571085ed32b90f64db2197fe42ca1f75ec"
       "cd46f09b23de6801bc35ef8a13ce57f1"},
  };
  const std::vector<float> x = GoldenInput();
  for (const auto& c : cases) {
    for (QuantEffort effort : {QuantEffort::kBest, QuantEffort::kFast}) {
      std::vector<uint8_t> q(RowBytes(c.type, x.size()));
      QuantizeRow(c.type, x.data(), q.data(), static_cast<int64_t>(x.size()), effort);
      EXPECT_EQ(Hex(q), c.hex) << TypeName(c.type);
    }
  }
}

// Pseudo-random input in four kinds of 256-element stretches: uniform, heavy-tailed (u^3),
// small and of one sign, and sub-blocks of 16 scaled by 2^-4 .. 2^3 with leading zeros. Exact
// integer arithmetic up to the float operations, which are the same everywhere.
std::vector<float> RandomInput(int64_t n) {
  std::vector<float> x(n);
  uint32_t state = 12345;
  for (int64_t i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;
    const float u = static_cast<float>(static_cast<int32_t>(state >> 8) - 8388608) / 8388608.0f;
    switch ((i / 256) % 4) {
      case 0:
        x[i] = u;
        break;
      case 1:
        x[i] = u * u * u * 4.0f;
        break;
      case 2:
        x[i] = u * 0.01f + 0.005f;
        break;
      default:
        x[i] = i % 16 < 3 ? 0.0f : u * static_cast<float>(1 << ((i / 16) % 8)) / 16.0f;
        break;
    }
  }
  return x;
}

uint64_t Fnv1a(const std::vector<uint8_t>& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (uint8_t c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// 16 rows of 4096 of RandomInput: the FNV-1a hash of the bytes that ggml_quantize_chunk
// (llama.cpp 3f545be, no importance matrix) wrote. A quantizer that differs in any search
// step or rounding changes some of these 64k codes.
TEST(LowBitQuantize, SameBytesAsLlamaCppOnRandomRows) {
  const struct {
    GgmlType type;
    uint64_t hash;
  } cases[] = {{GgmlType::kQ2_K, 0x7a5924ec0e530485ull},
               {GgmlType::kQ3_K, 0x06bf19376394a63aull},
               {GgmlType::kIQ4_NL, 0x57851927ecd8e503ull},
               {GgmlType::kIQ4_XS, 0xd51449fc3771f2a2ull}};
  const std::vector<float> x = RandomInput(16 * 4096);
  for (const auto& c : cases) {
    const uint64_t row_bytes = RowBytes(c.type, 4096);
    std::vector<uint8_t> q(16 * row_bytes);
    for (int r = 0; r < 16; ++r) {
      QuantizeRow(c.type, x.data() + 4096 * r, q.data() + r * row_bytes, 4096);
    }
    EXPECT_EQ(Fnv1a(q), c.hash) << TypeName(c.type);
  }
}

// Relative RMS error of the round trip on N(0, 1) data (measured: Q2_K 0.297, Q3_K 0.151,
// IQ4_NL 0.076, IQ4_XS 0.077), against bounds a little above, and a floor that catches a
// round trip that skips the quantization.
TEST(LowBitQuantize, RoundTripError) {
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(64 * 1024);
  for (float& v : x) v = g(rng);
  const struct {
    GgmlType type;
    double bound;
  } cases[] = {{GgmlType::kQ2_K, 0.40},
               {GgmlType::kQ3_K, 0.20},
               {GgmlType::kIQ4_NL, 0.11},
               {GgmlType::kIQ4_XS, 0.11}};
  for (const auto& c : cases) {
    std::vector<uint8_t> q(RowBytes(c.type, x.size()));
    std::vector<float> y(x.size());
    QuantizeRow(c.type, x.data(), q.data(), static_cast<int64_t>(x.size()));
    DequantizeRow(c.type, q.data(), y.data(), static_cast<int64_t>(x.size()));
    double se = 0, sx = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      se += (static_cast<double>(y[i]) - x[i]) * (static_cast<double>(y[i]) - x[i]);
      sx += static_cast<double>(x[i]) * x[i];
    }
    const double rms = std::sqrt(se / sx);
    std::printf("  %-6s relative RMS error %.4f (N(0,1) data)\n",
                std::string(TypeName(c.type)).c_str(), rms);
    EXPECT_LT(rms, c.bound) << TypeName(c.type);
    EXPECT_GT(rms, c.bound / 4) << TypeName(c.type) << ": suspiciously exact";
  }
}

TEST(LowBitQuantize, ZerosGiveZeros) {
  const std::vector<float> x(512, 0.0f);
  for (GgmlType t : {GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kIQ4_NL, GgmlType::kIQ4_XS}) {
    std::vector<uint8_t> q(RowBytes(t, x.size()));
    std::vector<float> y(x.size(), 1.0f);
    QuantizeRow(t, x.data(), q.data(), 512);
    DequantizeRow(t, q.data(), y.data(), 512);
    for (float v : y) ASSERT_EQ(v, 0.0f) << TypeName(t);
  }
}

TEST(LowBitQuantize, NonFiniteInputGivesTheSameValidBlocksEveryTime) {
  // No crash and no undefined behaviour (the sanitizer builds would see it); any bytes are a
  // valid block of these formats, so "valid" is: dequantizable, and deterministic.
  std::vector<float> x = GoldenInput();
  x[3] = NAN;
  x[40] = INFINITY;
  x[300] = -INFINITY;
  x[301] = 3e38f;
  for (GgmlType t : {GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kIQ4_NL, GgmlType::kIQ4_XS}) {
    std::vector<uint8_t> q1(RowBytes(t, x.size())), q2(q1.size());
    QuantizeRow(t, x.data(), q1.data(), 512);
    QuantizeRow(t, x.data(), q2.data(), 512);
    EXPECT_EQ(q1, q2) << TypeName(t);
    std::vector<float> y(x.size());
    DequantizeRow(t, q1.data(), y.data(), 512);
  }
}

}  // namespace
}  // namespace mt
