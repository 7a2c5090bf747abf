// libFuzzer target for the hyperparameter keys: any GGUF metadata gives HParams and the
// model's parts, or a one-line error naming the key; never a crash (DescribeModel's and
// ExpertSelector's checks included). A described model is walked: its tensor list, its
// router on a logit row, its RoPE angles, its summary.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "kernels/ops.h"
#include "model/arch.h"
#include "model/expert_selection.h"
#include "model/hparams.h"

namespace {

volatile uint64_t g_sink = 0;

void Fail(const char* what) {
  std::fprintf(stderr, "hparams_fuzz: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mt::Result<mt::GgufModel> m =
      mt::GgufModel::Parse(std::span<const uint8_t>(data, size), "fuzz.gguf");
  if (!m.ok()) return 0;  // the reader's own target covers this
  mt::Result<mt::HParams> hp = mt::ReadHParams(m->metadata());
  if (!hp.ok()) {
    const std::string& msg = hp.status().message();
    if (msg.empty() || msg.find('\n') != std::string::npos) Fail("error is not one line");
    return 0;
  }
  const mt::ModelParts parts = mt::DescribeModel(hp.value());
  uint64_t sum = 0;
  for (const mt::TensorDesc& t : mt::ArchTensors(parts, hp.value())) {
    if (t.shape.empty()) Fail("a tensor without a shape");
    for (uint64_t d : t.shape) sum += d;
  }
  for (const std::string& line : mt::DescribeParts(parts)) sum += line.size();
  if (hp->n_expert <= 4096) {
    mt::ExpertSelector selector(parts.router);
    std::vector<float> logits(hp->n_expert), bias(hp->n_expert, 0.5f);
    for (uint32_t e = 0; e < hp->n_expert; ++e) logits[e] = std::sin(float(e));
    std::vector<int32_t> ids(hp->n_expert_used);
    std::vector<float> weights(hp->n_expert_used);
    selector.Select(logits.data(), bias.data(), ids.data(), weights.data());
    for (int32_t id : ids) {
      if (id < 0 || static_cast<uint32_t>(id) >= hp->n_expert) Fail("expert id out of range");
    }
  }
  const mt::RopeParts& r = parts.rope;
  if (r.n_rot > 0 && r.n_rot <= 4096) {
    std::vector<float> cs(r.n_rot);
    mt::RopeAngles(
        {r.n_rot, r.freq_base, r.freq_scale, r.ext_factor, r.attn_factor, r.corr_low, r.corr_high},
        1000, cs.data());
    sum += static_cast<uint64_t>(cs[0] == cs[0]);
  }
  g_sink = sum;
  return 0;
}
