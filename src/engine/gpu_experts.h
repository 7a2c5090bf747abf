// The device tier of the routed experts (--gpu-expert-cache, issue 42): some experts live in
// GPU memory, uploaded once from the file mapping (a pack's record checksums checked first)
// and computed there (gpu/expert_ffn.h); the CPU tiers never load them. Each layer, MoeStep
// hands the tier the device-owned experts the router picked, with their tokens; the tier
// gathers the inputs, submits, and the CPU runs its own experts meanwhile; after Finish the
// caller weights each output and adds the token's slots in slot order, as for an expert the
// CPU ran. The GPU sums in an order of its own, so an expert's output agrees with the CPU's
// within float rounding (docs/gpu.md); for a given device and placement, every run gives the
// same bits.
//
// Which experts: the hottest of a routing profile by activations per byte (as the stream
// tier places them), else the same number from every layer, lowest ids first. The choice is
// made once, at start.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/gpu_backend.h"
#include "engine/model.h"
#include "engine/routing_stats.h"

namespace mt {

class ExpertStore;

struct GpuExpertOptions {
  int device = -1;                      // --device vulkan:N; -1: no device asked for
  std::optional<uint64_t> cache_bytes;  // --gpu-expert-cache BYTES
  std::optional<double> cache_pct;      // --gpu-expert-cache N% (of all the experts' bytes)
  bool wanted() const { return device >= 0 || experts_wanted(); }
  bool experts_wanted() const { return cache_bytes || cache_pct; }
};

// Parses --device "cpu", "vulkan" (device 0) or "vulkan:N", and --gpu-expert-cache
// "BYTES|N%". Errors name the flag value.
Status ParseDevice(const std::string& s, GpuExpertOptions* o);
Status ParseGpuExpertCache(const std::string& s, GpuExpertOptions* o);

class GpuExpertTier {
 public:
  // Uploads the experts options.experts_wanted() asks for to `gpu`'s device (which
  // outlives the tier). `profile` (may be null) ranks them; `n_rows` is the most (token,
  // slot) rows a layer can route (n_batch x n_expert_used); `device_used` the device bytes
  // other parts already hold. kResourceExhausted when the cache does not fit the device's
  // memory; kUnimplemented for a weight type without a shader or a pack in the panel layout.
  static Result<std::unique_ptr<GpuExpertTier>> Create(const Model& model, GpuBackend& gpu,
                                                       const GpuExpertOptions& options,
                                                       uint32_t n_rows, const RoutingStats* profile,
                                                       uint64_t device_used);
  ~GpuExpertTier();

  bool Owns(uint32_t layer, uint32_t expert) const {
    return slot_of_[size_t{layer} * n_expert_ + expert] >= 0;
  }

  // Starts layer il's device experts: `experts` (each owned), expert e over the rows
  // rows[start[e] .. start[e + 1]) (token * k + slot), whose inputs are xn's rows row / k.
  // Returns once the work is submitted.
  Status Start(uint32_t il, std::span<const int32_t> experts, const int32_t* start,
               const int32_t* rows, int k, const float* xn);
  // Waits for the submitted work. Then output(j) is the j-th started expert's (m_j, n_embd)
  // outputs, before the down bias and the router weight (the caller may add them in place).
  Status Finish();
  float* output(size_t j) { return out_rows_ + out_start_[j] * n_embd_; }

  // LFU at a fixed point: in each layer, while the most-routed expert the device lacks was
  // routed more often (`counts`) than the least-routed one it holds, the two change places:
  // the slot takes the first (read from the mapping, a pack's records of both checked first;
  // its pages then released) and `store` takes the second back (ExpertStore::HandOver).
  // Returns the swaps made. Between forward passes only: from then on those experts sum in
  // the other tier's order, so results depend on when this ran.
  Result<uint32_t> Promote(const RoutingStats& counts, ExpertStore& store);

  std::string device_name() const;
  uint32_t n_experts() const { return n_owned_; }  // experts held, over all layers
  uint64_t weight_bytes() const { return weight_bytes_; }
  // (n_layer * n_expert) 1 for an expert the device holds; and their bytes as the file has
  // them (what the host tiers no longer keep).
  std::vector<uint8_t> OwnedFlags() const;
  uint64_t payload_bytes() const { return payload_bytes_; }
  uint64_t scratch_bytes() const { return scratch_bytes_; }
  // Expert runs (one expert over its tokens in one layer) on the device so far.
  uint64_t runs() const { return runs_; }
  uint64_t promotions() const { return promotions_; }
  void ResetStats() { runs_ = 0; }

 private:
  struct Impl;
  explicit GpuExpertTier(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
  uint32_t n_expert_ = 0;
  int64_t n_embd_ = 0;
  std::vector<int32_t> slot_of_;  // (n_layer * n_expert) index into the layer's slots, or -1
  uint32_t n_owned_ = 0;
  uint64_t promotions_ = 0;         // experts swapped in by Promote so far
  uint64_t weight_bytes_ = 0;       // device memory for the experts
  uint64_t payload_bytes_ = 0;      // their bytes in the file
  uint64_t scratch_bytes_ = 0;      // device and host-visible memory for one layer's rows
  float* out_rows_ = nullptr;       // (n_rows, n_embd) in the host-visible output buffer
  std::vector<int64_t> out_start_;  // (started experts) first output row of each
  uint64_t runs_ = 0;
};

}  // namespace mt
