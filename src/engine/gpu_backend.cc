#include "engine/gpu_backend.h"

#include <cstring>

#include "gguf/gguf.h"
#include "kernels/panel_layout.h"

namespace mt {

Result<std::unique_ptr<GpuBackend>> GpuBackend::Open(int index, ThreadPool& pool) {
  auto b = std::make_unique<GpuBackend>();
  b->pool = &pool;
  b->device = MT_TRY(gpu::Device::Create(index));
  b->matmul = MT_TRY(gpu::MatMul::Create(b->device.get()));
  b->ffn = MT_TRY(gpu::ExpertFfn::Create(b->device.get(), b->matmul.get()));
  b->ops = MT_TRY(gpu::AttentionOps::Create(b->device.get()));
  return b;
}

std::string NoShaderFor(std::span<const GgmlType> types, int layer, std::string_view what) {
  for (const GgmlType t : types) {
    if (!gpu::GpuCanMatMul(t)) {
      return fmt::format("layer {}'s {} {}, which the device cannot compute with", layer, what,
                         TypeName(t));
    }
  }
  return "";
}

void GpuBackend::ReleaseUploadedPages(const GgufModel& file) {
  for (const std::span<const uint8_t> s : uploaded_from) file.ReleasePages(s.data(), s.size());
  uploaded_from.clear();
}

bool GpuBackend::shares_host_memory() const {
  const std::string& type = device->info().type;
  return type == "cpu" || type == "integrated";
}

uint8_t* GpuWeightPack::Reserve(uint64_t n) {
  const uint64_t at = (bytes_.size() + kAlign - 1) / kAlign * kAlign;
  bytes_.resize(at + n);
  return bytes_.data() + at;
}

uint64_t GpuWeightPack::Add(const WeightMatrix& w) {
  const uint64_t n = w.row_bytes * static_cast<uint64_t>(w.rows);
  sources_.emplace_back(w.data, n);
  uint8_t* dst = Reserve(n);
  if (w.layout == WeightLayout::kPanels) {
    PanelsToRows(w.type, w.rows, w.cols, w.data, dst);
  } else {
    std::memcpy(dst, w.data, n);
  }
  return static_cast<uint64_t>(dst - bytes_.data());
}

uint64_t GpuWeightPack::Add(const std::vector<float>& v) {
  uint8_t* dst = Reserve(v.size() * sizeof(float));
  std::memcpy(dst, v.data(), v.size() * sizeof(float));
  return static_cast<uint64_t>(dst - bytes_.data());
}

Result<gpu::Buffer> GpuWeightPack::Upload(GpuBackend& gpu) const {
  gpu::Buffer buffer = MT_TRY(gpu.device->CreateBuffer(std::max<uint64_t>(bytes_.size(), 16)));
  MT_RETURN_IF_ERROR(gpu.device->Upload(buffer, 0, bytes_));
  gpu.uploaded_from.insert(gpu.uploaded_from.end(), sources_.begin(), sources_.end());
  return buffer;
}

}  // namespace mt
