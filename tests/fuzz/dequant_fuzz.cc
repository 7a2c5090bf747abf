// libFuzzer target for the weight formats: random bytes as the blocks of every type that
// CanDequantize (quant/dequant.h) accepts, fed to DequantizeRow and to MatMul (kernels/matmul.h)
// on every ISA variant this CPU runs, rows and (where the active variant reads them) 16-row
// panels. No crash and no out-of-bounds read (ASan sees the buffers exactly as big as the
// format says), and the contract holds for any bytes:
//  - batch invariance: each token's results alone are bit-identical to those in the batch,
//    and the panel form gives the rows' bits (a NaN being any NaN);
//  - non-finite scales are handled as the engine expects (it checks the logits for NaN): a
//    row whose dequantized weights hold a NaN (a NaN scale, or an infinite one times a zero)
//    gives a NaN or an infinity, and a row of finite weights gives a finite result (the
//    activations are bounded, |x| < 8, so nothing overflows below 1e30 of sum |w x|). Rows
//    with infinities but no NaN are not judged: MXFP4's largest exponent overflows in the
//    dequantizer but not in the kernels' scale products.
//
// Input: byte 0 picks the type by ggml id (the next dequantizable id at or after it, cyclic,
// so seeds stay valid as types are added); byte 1 the rows (1..33: partial and whole panels),
// byte 2 the blocks per row, byte 3 the tokens (1..9) and the activations' seed; the rest is
// the weight bytes, repeated to fill the matrix.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "quant/dequant.h"
#include "quant/ggml_type.h"

namespace {

void Fail(const char* what, mt::GgmlType type, mt::Isa isa) {
  std::fprintf(stderr, "dequant_fuzz: %s (type %s, %s)\n", what,
               std::string(mt::TypeName(type)).c_str(), std::string(mt::IsaName(isa)).c_str());
  std::abort();
}

// The same float, bit for bit; any two NaNs count as the same (which operand's NaN an x86
// instruction passes on depends on the operand order the compiler chose, so a NaN's sign and
// payload are not part of the contract).
bool Same(float a, float b) {
  uint32_t ua, ub;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  return ua == ub || (std::isnan(a) && std::isnan(b));
}

// The dequantizable type at or after ggml id `id` (cyclic over 0..63).
mt::GgmlType PickType(uint8_t id) {
  for (int k = 0; k < 64; ++k) {
    const uint32_t t = (id + k) % 64;
    if (mt::TraitsOfTypeId(t).has_value() && mt::CanDequantize(static_cast<mt::GgmlType>(t))) {
      return static_cast<mt::GgmlType>(t);
    }
  }
  std::abort();  // F32 at least is always there
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const mt::GgmlType type = PickType(data[0]);
  const mt::GgmlTypeTraits& tr = mt::TraitsOf(type);
  const int64_t rows = 1 + data[1] % 33;
  const int64_t blocks = tr.block_size >= 256 ? 1 + data[2] % 3
                         : tr.block_size > 1  ? 1 + data[2] % 20
                                              : 1 + data[2] % 96;
  const int64_t cols = blocks * tr.block_size;
  const int64_t n_tok = 1 + data[3] % 9;
  const uint64_t row_bytes = mt::RowBytes(type, static_cast<uint64_t>(cols));

  // The matrix, exactly as big as the format says (ASan catches any read past it).
  std::vector<uint8_t> w(rows * row_bytes);
  const uint8_t* body = data + 4;
  const size_t body_size = size - 4;
  for (size_t i = 0; i < w.size(); ++i) w[i] = body_size > 0 ? body[i % body_size] : 0;

  // Dequantize every row; note which hold a NaN, which an infinity.
  std::vector<float> deq(cols);
  std::vector<bool> row_nan(rows, false), row_finite(rows, true);
  std::vector<double> row_absmax(rows, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    mt::DequantizeRow(type, w.data() + r * row_bytes, deq.data(), cols);
    for (float v : deq) {
      if (std::isnan(v)) row_nan[r] = true;
      if (!std::isfinite(v)) {
        row_finite[r] = false;
      } else {
        row_absmax[r] = std::max(row_absmax[r], static_cast<double>(std::fabs(v)));
      }
    }
  }

  // Activations: bounded, with zeros and exact small integers mixed in, from byte 3.
  std::vector<float> x(n_tok * cols);
  uint32_t state = 0x9E3779B9u ^ data[3];
  for (float& v : x) {
    state = state * 1664525u + 1013904223u;
    const uint32_t r = state >> 8;
    v = r % 7 == 0 ? 0.0f : static_cast<float>(static_cast<int32_t>(r % 2001) - 1000) / 128.0f;
  }

  const mt::WeightMatrix wm{type, w.data(), rows, cols, row_bytes, mt::WeightLayout::kRows};
  const mt::ActFormat format = mt::ActFormatFor(type);
  for (mt::Isa isa : mt::kAllIsas) {
    if (!mt::IsaSupported(isa)) continue;
    mt::Activations a;
    a.Prepare(format, n_tok, cols);
    a.QuantizeTokens(isa, x.data(), cols, 0, n_tok);
    std::vector<float> y(n_tok * rows);
    mt::MatMul(isa, wm, a, y.data(), rows, 0, rows);

    for (int64_t t = 0; t < n_tok; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        const float v = y[t * rows + r];
        if (row_nan[r] && std::isfinite(v)) Fail("finite result from NaN weights", type, isa);
        // sum |w x| < cols * absmax * 8: below 1e30, nothing may overflow.
        if (row_finite[r] && row_absmax[r] * 8.0 * static_cast<double>(cols) < 1e30 &&
            !std::isfinite(v)) {
          Fail("non-finite result from finite weights", type, isa);
        }
      }
    }

    // Each token alone gives the batch's bits (and split rows too).
    for (int64_t t = 0; t < n_tok; ++t) {
      mt::Activations one;
      one.Prepare(format, 1, cols);
      one.QuantizeTokens(isa, x.data() + t * cols, cols, 0, 1);
      std::vector<float> y1(rows, -1.0f);
      const int64_t cut = rows / 2;
      mt::MatMul(isa, wm, one, y1.data(), rows, 0, cut);
      mt::MatMul(isa, wm, one, y1.data(), rows, cut, rows);
      for (int64_t r = 0; r < rows; ++r) {
        if (!Same(y1[r], y[t * rows + r])) Fail("not batch invariant", type, isa);
      }
    }

    // The panel form, where this variant reads it, gives the rows' bits.
    if (isa == mt::ActiveIsa() && mt::PanelsPreferred(type, rows)) {
      std::vector<uint8_t> panels(w.size());
      mt::RepackToPanels(type, rows, cols, w.data(), panels.data());
      mt::WeightMatrix pm = wm;
      pm.data = panels.data();
      pm.layout = mt::WeightLayout::kPanels;
      std::vector<float> yp(n_tok * rows);
      mt::MatMul(isa, pm, a, yp.data(), rows, 0, rows);
      for (size_t i = 0; i < yp.size(); ++i) {
        if (!Same(yp[i], y[i])) Fail("panels differ from rows", type, isa);
      }
    }
  }
  return 0;
}
