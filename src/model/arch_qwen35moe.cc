// qwen35moe (Qwen3.5 MoE: Qwen3.5-35B-A3B, -122B-A10B, -397B-A17B) as qwen3next
// (arch_qwen3next.cc), but with b and a from tensors of their own (ssm_beta, ssm_alpha), the
// value heads reordered by the converter so that value head h reads key head h % H_k, and an
// interleaved M-RoPE (rope.dimension_sections). For text every section's position is the
// token's, so where the sections cover the rotated pairs that RoPE is plain NEOX.
#include "gguf/gguf.h"
#include "model/arch.h"

namespace mt {
namespace {

Status ReadQwen35MoeKeys(const HParamsKeys& keys, HParams& hp) {
  MT_RETURN_IF_ERROR(keys.UintArray("rope.dimension_sections", hp.rope_sections, 4096));
  // ggml's interleaved M-RoPE takes pair i's angle from section (i % sections) % 3 while that
  // section still has pairs; the rest from the 4th, whose text position is 0. Text equals
  // NEOX only if no pair falls there.
  const uint32_t* s = hp.rope_sections.data();
  const uint32_t sections = s[0] + s[1] + s[2] + s[3];
  if (sections == 0) return NotFound("missing key {}", keys.Key("rope.dimension_sections"));
  for (uint32_t pair = 0; pair < hp.n_rot / 2; ++pair) {
    const uint32_t sector = pair % sections;
    const uint32_t axis = sector % 3;
    if (sector >= 3 * s[axis]) {
      return Unimplemented(
          "{} [{}, {}, {}, {}]: rotated pair {} takes the 4th section's angle, which "
          "moetier does not compute",
          keys.Key("rope.dimension_sections"), s[0], s[1], s[2], s[3], pair);
    }
  }
  return ReadHybridDeltaNetKeys(keys, hp);
}

ModelParts DescribeQwen35Moe(const HParams& hp) {
  return DescribeHybridDeltaNet(hp, KeyHeadOrder::kTiled, /*separate_beta_alpha=*/true);
}

void WriteQwen35MoeKeys(const HParams& hp, GgufMetadata& md) {
  WriteHybridDeltaNetKeys(hp, md);
  std::vector<int32_t> sections(hp.rope_sections.begin(), hp.rope_sections.end());
  md.Set(fmt::format("{}.rope.dimension_sections", hp.arch), GgufValue::Int32Array(sections));
}

}  // namespace

extern const ArchDef kArchQwen35Moe = {
    .name = "qwen35moe",
    .read_keys = ReadQwen35MoeKeys,
    .describe = DescribeQwen35Moe,
    .write_keys = WriteQwen35MoeKeys,
};

}  // namespace mt
