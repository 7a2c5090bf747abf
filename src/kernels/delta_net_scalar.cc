// Scalar variant of DeltaRuleStep (kernels/delta_net.h): per row, sums in index order.
#include "kernels/delta_net.h"

namespace mt::kernels {

void DeltaRuleScalar(const DeltaRuleArgs& a) {
  const int dk = a.dim_k;
  for (int j = 0; j < a.dim_v; ++j) {
    const float* in = a.state_in ? a.state_in + int64_t{j} * dk : nullptr;
    float* row = a.state_out + int64_t{j} * dk;
    float sk = 0;
    for (int i = 0; i < dk; ++i) {
      row[i] = in ? a.decay * in[i] : 0.0f;
      sk += row[i] * a.k[i];
    }
    const float d = (a.v[j] - sk) * a.beta;
    float sq = 0;
    for (int i = 0; i < dk; ++i) {
      row[i] += d * a.k[i];
      sq += row[i] * a.q[i];
    }
    a.out[j] = sq * a.scale;
  }
}

}  // namespace mt::kernels
