// Builds the ExpertLayout (experts/expert_layout.h) of a GGUF model in either of its two
// physical layouts, and defines the second one.
//
// Tensor-major (llama.cpp's GGUF): expert e of layer l is slice e of the stacked
// blk.l.ffn_{gate,up,down}_exps tensors, in whichever shard each tensor lives.
//
// Expert-major pack (written by `moetier pack`, src/pack/): a valid GGUF v3 file or split
// set that any GGUF reader can list.
// - Metadata: every key of the source model unchanged (general.*, {arch}.*, tokenizer.*),
//   plus
//     general.alignment         uint32    4096 (kPackAlignment)
//     moetier.expert_layout     string    "expert-major"
//     moetier.expert_checksums  [uint64]  n_layer * n_expert, index layer * n_expert + expert
//     moetier.expert_weights    string    "panels16" or "rows" (absent: "rows")
//   n_expert is the checksum count / n_layer; a layer without experts has zeros there.
// - Tensors: the dense ones first, unchanged (names, types, shapes, bytes, order); then for
//   each layer l, for each expert e, three tensors, with llama.cpp's per-expert names:
//     blk.l.ffn_gate.e.weight  (n_embd, n_ff)   slice e of blk.l.ffn_gate_exps
//     blk.l.ffn_up.e.weight    (n_embd, n_ff)   slice e of blk.l.ffn_up_exps
//     blk.l.ffn_down.e.weight  (n_ff, n_embd)   slice e of blk.l.ffn_down_exps
//   With "rows", each slice's bytes are the stacked tensor's, unchanged (GGUF-native
//   quantized rows). With "panels16", the slices that have a 16-row panel form (Q4_K, Q5_K,
//   Q6_K with rows a multiple of 16: kernels/panel_layout.h) hold it instead, the form the
//   AVX-512 kernels read, so that loading them repacks nothing; other slices are rows.
//   Sizes and offsets are the same either way. The tensor types stay the GGUF ones: a
//   reader other than moetier can list a panels pack but must not compute with it.
// - The record of (l, e) is the bytes from the first byte of its gate tensor to the last
//   byte of its down tensor: gate | zeros | up | zeros | down, the zeros padding each part
//   to the next 4096 multiple (GGUF's own tensor alignment). A record starts 4096-aligned,
//   lies in one shard, and every record of a layer has the same shape. The file continues
//   with zero padding after each record up to the next 4096 multiple, so a read rounded up
//   to 4 KiB never passes the end of a shard.
// - Checksum of a record: XXH3-64, seed 0, of exactly its bytes (padding between parts
//   included, padding after the down part excluded): RecordChecksum in
//   experts/record_checksum.h.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "experts/expert_layout.h"

namespace mt {

class GgufModel;
class GgufMetadata;

inline constexpr std::string_view kKeyExpertLayout = "moetier.expert_layout";
inline constexpr std::string_view kExpertMajor = "expert-major";
inline constexpr std::string_view kKeyExpertChecksums = "moetier.expert_checksums";
inline constexpr std::string_view kKeyExpertWeights = "moetier.expert_weights";
inline constexpr std::string_view kWeightsRows = "rows";
inline constexpr std::string_view kWeightsPanels = "panels16";
inline constexpr uint32_t kPackAlignment = 4096;

// True when the metadata has moetier.expert_layout (ExpertLayoutFromGguf checks its value):
// the routed experts are per-expert tensors, not the stacked ones.
bool IsExpertMajorPack(const GgufMetadata& metadata);

// The layout of either kind, chosen by IsExpertMajorPack, for a model whose layer l has routed
// experts when has_experts[l] (n_layer entries). Errors name the tensor that is
// missing or malformed, the key that is missing or wrong (an unknown layout, a checksum
// array of the wrong type or length), or the layer and expert whose record is misaligned,
// split across files or shaped unlike the layer's expert 0. Checksums are not verified here
// (that reads every byte): see pack/pack.h VerifyPack.
Result<ExpertLayout> ExpertLayoutFromGguf(const GgufModel& model,
                                          const std::vector<bool>& has_experts);

}  // namespace mt
