// The two stores without a cache: resident (all experts copied into RAM once) and mmap
// (kernels read experts straight from the read-only file mapping; the page cache is the
// cache).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "base/aligned_buffer.h"
#include "experts/expert_store.h"
#include "io/file_watch.h"

namespace mt {

class ThreadPool;

// Hands out experts in request order; every request is a hit.
class InMemoryStore : public ExpertStore {
 public:
  void BeginLayer(uint32_t layer, std::span<const int32_t> experts) override;
  Result<std::optional<ReadyExpert>> NextReady(bool wait = true,
                                               bool defer_checks = false) override;
  bool Pending() const override { return next_ < pending_.size(); }
  const TierStats& stats() const override { return stats_; }
  void ResetStats() override;

 protected:
  InMemoryStore(const ExpertLayout& layout, std::string tier);
  virtual ExpertMatrices Matrices(uint32_t layer, uint32_t expert) const = 0;

  const ExpertLayout& layout_;
  TierStats stats_;
  uint32_t layer_ = 0;
  std::vector<int32_t> pending_;  // (<= n_expert) experts of the layer not handed out yet
  size_t next_ = 0;
};

// Copies every expert into anonymous memory at creation (the speed baseline).
class ResidentStore final : public InMemoryStore {
 public:
  // Reads the experts from the mapping; memory is the layout's total_bytes(). For an
  // expert-major pack every record is checked against its checksum as it is copied: a
  // mismatch is an error naming the file, layer, expert and offset, and nothing is loaded.
  // With a pool, its threads copy a layer's experts in parallel (the copy is mostly page
  // faults: the file's pages in, zeroed pages out; they scale with cores). `skip` (empty, or
  // n_layer x n_expert flags) names experts another tier owns (the device): they get no
  // copy, and must never be asked for. `copied` (may be empty) is called with each part's
  // mapped bytes once every expert is copied: the engine hands their pages back, so that the
  // process does not hold the experts twice (the copy and the mapped file).
  using CopiedFn = std::function<void(const uint8_t* mapped, uint64_t bytes)>;
  static Result<std::unique_ptr<ResidentStore>> Create(const ExpertLayout& layout,
                                                       ThreadPool* pool = nullptr,
                                                       std::span<const uint8_t> skip = {},
                                                       CopiedFn copied = {});
  std::string name() const override { return "resident"; }
  Status HandOver(uint32_t layer, uint32_t to_device, uint32_t from_device) override;

 private:
  explicit ResidentStore(const ExpertLayout& layout) : InMemoryStore(layout, "resident") {}
  ExpertMatrices Matrices(uint32_t layer, uint32_t expert) const override;
  // Copies expert e of layer il from the mapping into its place (position_), repacked.
  void Copy(uint32_t il, uint32_t e);
  // Calls copied_ with expert e's mapped parts.
  void ReleaseSource(uint32_t il, uint32_t e) const;
  CopiedFn copied_;
  std::vector<std::array<AlignedBuffer, 3>> copies_;  // (n_layer) gate/up/down of the kept experts
  std::vector<int32_t> position_;  // (n_layer * n_expert) an expert's place in copies_, or -1
};

// Points kernels into the file mapping. Expert ranges get MADV_RANDOM (no readahead of
// neighbours). With `warm`, a background thread pre-faults every expert page at low
// priority, without delaying the first token.
// Pack checksums are not checked here: the page cache may fetch any page at any time, so
// there is no one moment the record is read (checking at start-up would read the whole
// file, which mmap mode exists to avoid). `moetier pack --verify` checks a pack.
class MmapStore final : public InMemoryStore {
 public:
  static Result<std::unique_ptr<MmapStore>> Create(const ExpertLayout& layout, bool warm);
  ~MmapStore() override;
  Status CheckFiles() override;
  std::string name() const override { return "mmap"; }

 private:
  explicit MmapStore(const ExpertLayout& layout) : InMemoryStore(layout, "mmap") {}
  ExpertMatrices Matrices(uint32_t layer, uint32_t expert) const override;
  void Warm();

  FileWatch watch_;  // a truncated file would fault (SIGBUS) in the mapping: check first
  std::atomic<bool> stop_warm_{false};
  std::thread warm_thread_;
};

}  // namespace mt
