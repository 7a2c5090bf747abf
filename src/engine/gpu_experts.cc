#include "engine/gpu_experts.h"

#include <algorithm>
#include <cstring>
#include <tuple>
#include <utility>

#include "base/units.h"
#include "engine/storage.h"
#include "gpu/device.h"
#include "gpu/expert_ffn.h"
#include "gpu/matmul.h"
#include "kernels/panel_layout.h"

namespace mt {

Status ParseDevice(const std::string& s, GpuExpertOptions* o) {
  if (s == "cpu" || s == "none") {
    o->device = -1;
    return Status::Ok();
  }
  if (s == "vulkan") {
    o->device = 0;
    return Status::Ok();
  }
  if (s.rfind("vulkan:", 0) == 0 && s.size() > 7 && s.size() < 11 &&
      s.find_first_not_of("0123456789", 7) == std::string::npos) {
    o->device = std::stoi(s.substr(7));
    return Status::Ok();
  }
  return InvalidArgument("--device: '{}' is not one of cpu, vulkan, vulkan:N", Printable(s));
}

Status ParseGpuExpertCache(const std::string& s, GpuExpertOptions* o) {
  const BytesOrPercent size = MT_TRY(ParseBytesOrPercent("--gpu-expert-cache", s));
  o->cache_bytes = size.bytes;
  o->cache_pct = size.percent;
  return Status::Ok();
}

namespace {

constexpr uint64_t kPartAlign = 256;  // bytes: where each matrix starts in a layer's buffer

uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

// Where one expert's three matrices start in its layer's device buffer (bytes).
struct DeviceSlot {
  uint64_t gate = 0, up = 0, down = 0;
};

// The bytes of one expert slot in a layer's device buffer.
uint64_t SlotBytes(const ExpertSpec& s) {
  return RoundUp(s.gate_bytes(), kPartAlign) + RoundUp(s.up_bytes(), kPartAlign) +
         RoundUp(s.down_bytes(), kPartAlign);
}

// The experts the device holds, best first, within `budget` bytes of slots: the profile's
// ranking by activations per byte, then (and without a profile) every layer's experts in id
// order, one id across all layers at a time.
std::vector<std::pair<uint32_t, uint32_t>> ChooseExperts(const Model& model, uint64_t budget,
                                                         const RoutingStats* profile) {
  const ExpertLayout& layout = model.expert_layout();
  std::vector<std::pair<uint32_t, uint32_t>> order;
  if (profile != nullptr) order = profile->RankByActivationsPerByte(ExpertBytesPerLayer(model));
  for (uint32_t e = 0; e < layout.n_expert(); ++e) {
    for (uint32_t l = 0; l < layout.n_layer(); ++l) {
      if (layout.has_experts(l)) order.emplace_back(l, e);
    }
  }
  std::vector<uint8_t> taken(size_t{layout.n_layer()} * layout.n_expert(), 0);
  std::vector<std::pair<uint32_t, uint32_t>> chosen;
  uint64_t used = 0;
  for (const auto& [l, e] : order) {
    uint8_t& t = taken[size_t{l} * layout.n_expert() + e];
    const uint64_t bytes = SlotBytes(layout.spec(l));
    if (t || !layout.has_experts(l) || used + bytes > budget) continue;
    t = 1;
    used += bytes;
    chosen.emplace_back(l, e);
  }
  return chosen;
}

}  // namespace

struct GpuExpertTier::Impl {
  GpuBackend* backend = nullptr;  // outlives the tier
  const Model* model = nullptr;   // outlives the tier
  struct Layer {
    ExpertSpec spec;
    gpu::GluActivation activation = gpu::GluActivation::kSwiglu;
    gpu::Buffer weights;            // the layer's slots, SlotBytes(spec) each
    std::vector<DeviceSlot> slots;  // (slots held)
    gpu::Buffer bias;               // (2, n_expert, n_ff) gate then up biases, or empty
  };
  std::vector<Layer> layers;  // (n_layer)
  // A layer's rows. The shaders read and write device-local copies: a shader reading
  // host-visible memory on a discrete GPU would cross the bus once per weight row.
  gpu::Buffer in;          // host-visible (n_rows, n_embd) gathered inputs
  gpu::Buffer in_device;   // (n_rows, n_embd) their copy on the device
  gpu::Buffer hidden;      // (2, n_rows, max n_ff) gate and up rows
  gpu::Buffer out_device;  // (n_rows, n_embd) outputs
  gpu::Buffer out;         // host-visible (n_rows, n_embd) their copy for the host
  ~Impl() {
    if (backend != nullptr) static_cast<void>(backend->device->Wait());
  }
};

GpuExpertTier::GpuExpertTier(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuExpertTier::~GpuExpertTier() = default;

std::string GpuExpertTier::device_name() const { return impl_->backend->name(); }

Result<uint32_t> GpuExpertTier::Promote(const RoutingStats& counts, ExpertStore& store) {
  const Model& model = *impl_->model;
  const ExpertLayout& layout = model.expert_layout();
  const uint32_t E = n_expert_;
  uint32_t swaps = 0;
  for (uint32_t l = 0; l < layout.n_layer(); ++l) {
    Impl::Layer& L = impl_->layers[l];
    if (L.slots.empty() || L.slots.size() == E) continue;  // nothing to trade
    // Held experts coldest first, the others hottest first; ties keep the lower id on the
    // device, so equal counts never trade.
    std::vector<uint32_t> held, others;
    for (uint32_t e = 0; e < E; ++e) (Owns(l, e) ? held : others).push_back(e);
    auto count = [&](uint32_t e) { return counts.count(l, e); };
    std::stable_sort(held.begin(), held.end(), [&](uint32_t a, uint32_t b) {
      return count(a) < count(b) || (count(a) == count(b) && a > b);
    });
    std::stable_sort(others.begin(), others.end(),
                     [&](uint32_t a, uint32_t b) { return count(a) > count(b); });
    for (size_t i = 0; i < std::min(held.size(), others.size()); ++i) {
      const uint32_t out = held[i], in = others[i];
      if (count(in) <= count(out)) break;
      if (layout.has_records()) {  // both, so that neither tier is left without one of them
        for (uint32_t e : {in, out}) MT_RETURN_IF_ERROR(layout.CheckMappedRecord(l, e));
      }
      int32_t& slot = slot_of_[size_t{l} * E + out];
      const DeviceSlot& s = L.slots[static_cast<size_t>(slot)];
      gpu::Device& dev = *impl_->backend->device;
      for (const auto& [part, at, bytes] : {std::tuple{kGate, s.gate, L.spec.gate_bytes()},
                                            std::tuple{kUp, s.up, L.spec.up_bytes()},
                                            std::tuple{kDown, s.down, L.spec.down_bytes()}}) {
        const uint8_t* from = layout.mapped(l, in, part);
        MT_RETURN_IF_ERROR(dev.Upload(L.weights, at, {from, bytes}));
        model.gguf().ReleasePages(from, bytes);
      }
      MT_RETURN_IF_ERROR(store.HandOver(l, in, out));
      slot_of_[size_t{l} * E + in] = std::exchange(slot, -1);
      ++swaps;
    }
  }
  promotions_ += swaps;
  return swaps;
}

Result<std::unique_ptr<GpuExpertTier>> GpuExpertTier::Create(const Model& model, GpuBackend& gpu,
                                                             const GpuExpertOptions& options,
                                                             uint32_t n_rows,
                                                             const RoutingStats* profile,
                                                             uint64_t device_used) {
  const ExpertLayout& layout = model.expert_layout();
  const int64_t D = model.hparams().n_embd;
  uint32_t max_ff = 0;
  for (uint32_t l = 0; l < layout.n_layer(); ++l) {
    if (!layout.has_experts(l)) continue;
    const ExpertSpec& s = layout.spec(l);
    max_ff = std::max(max_ff, s.n_ff);
    const GgmlType types[] = {s.gate_type, s.up_type, s.down_type};
    if (std::string why = NoShaderFor(types, static_cast<int>(l), "experts are"); !why.empty()) {
      return Unimplemented("--gpu-expert-cache: {}", why);
    }
    if (layout.weight_layout() == WeightLayout::kPanels &&
        (HasPanelForm(s.gate_type, s.n_ff) || HasPanelForm(s.down_type, s.n_embd))) {
      return Unimplemented(
          "--gpu-expert-cache: the pack keeps its experts as 16-row panels, which the device "
          "does not read: pack with --rows");
    }
  }
  if (max_ff == 0) return InvalidArgument("--gpu-expert-cache: the model has no routed experts");

  auto impl = std::make_unique<Impl>();
  impl->backend = &gpu;
  impl->model = &model;
  gpu::Device& dev = *gpu.device;

  // One layer's rows: inputs and outputs host-visible and on the device, gate and up rows.
  const uint64_t row_floats = uint64_t{n_rows} * static_cast<uint64_t>(D);
  const uint64_t scratch = 4 * row_floats * 4 + 2 * uint64_t{n_rows} * max_ff * 4;
  const uint64_t memory = dev.info().device_local_bytes;
  uint64_t budget = options.cache_bytes
                        ? *options.cache_bytes
                        : static_cast<uint64_t>(options.cache_pct.value_or(0) / 100 *
                                                static_cast<double>(layout.total_bytes()));
  budget = std::min(budget,
                    layout.total_bytes() + layout.n_layer() * 3 * layout.n_expert() * kPartAlign);
  if (device_used + budget + scratch > memory) {
    return Status(
        StatusCode::kResourceExhausted,
        fmt::format("--gpu-expert-cache: {} of experts and {} for a batch's rows do not "
                    "fit the {} of device memory of {}{}",
                    HumanBytes(budget), HumanBytes(scratch), HumanBytes(memory), dev.info().name,
                    device_used
                        ? fmt::format(" beside the dense part's {}", HumanBytes(device_used))
                        : ""));
  }
  impl->in = MT_TRY(dev.CreateHostBuffer(row_floats * 4));
  impl->in_device = MT_TRY(dev.CreateBuffer(row_floats * 4));
  impl->out_device = MT_TRY(dev.CreateBuffer(row_floats * 4));
  impl->out = MT_TRY(dev.CreateHostBuffer(row_floats * 4));
  impl->hidden = MT_TRY(dev.CreateBuffer(2 * uint64_t{n_rows} * max_ff * 4));

  std::unique_ptr<GpuExpertTier> tier(new GpuExpertTier(std::move(impl)));
  Impl& im = *tier->impl_;
  tier->n_expert_ = layout.n_expert();
  tier->n_embd_ = D;
  tier->slot_of_.assign(size_t{layout.n_layer()} * layout.n_expert(), -1);
  tier->scratch_bytes_ = scratch;
  tier->out_rows_ = reinterpret_cast<float*>(im.out.host_data());
  im.layers.resize(layout.n_layer());
  std::vector<std::vector<uint32_t>> per_layer(layout.n_layer());
  for (const auto& [l, e] : ChooseExperts(model, budget, profile)) per_layer[l].push_back(e);
  std::vector<uint8_t> staged;
  for (uint32_t l = 0; l < layout.n_layer(); ++l) {
    Impl::Layer& L = im.layers[l];
    L.spec = layout.spec(l);
    L.activation = model.parts().layers[l].ffn.activation == FfnActivation::kSwigluOai
                       ? gpu::GluActivation::kSwigluOai
                       : gpu::GluActivation::kSwiglu;
    if (per_layer[l].empty()) continue;
    // The layer's experts, checked (a pack's records) and laid out host-side, then one upload.
    const uint64_t slot_bytes = SlotBytes(L.spec);
    staged.assign(slot_bytes * per_layer[l].size(), 0);
    for (uint32_t e : per_layer[l]) {
      if (layout.has_records()) MT_RETURN_IF_ERROR(layout.CheckMappedRecord(l, e));
      DeviceSlot s;
      s.gate = slot_bytes * L.slots.size();
      s.up = s.gate + RoundUp(L.spec.gate_bytes(), kPartAlign);
      s.down = s.up + RoundUp(L.spec.up_bytes(), kPartAlign);
      std::memcpy(staged.data() + s.gate, layout.mapped(l, e, kGate), L.spec.gate_bytes());
      std::memcpy(staged.data() + s.up, layout.mapped(l, e, kUp), L.spec.up_bytes());
      std::memcpy(staged.data() + s.down, layout.mapped(l, e, kDown), L.spec.down_bytes());
      tier->slot_of_[size_t{l} * layout.n_expert() + e] = static_cast<int32_t>(L.slots.size());
      L.slots.push_back(s);
      tier->payload_bytes_ += L.spec.bytes();
    }
    L.weights = MT_TRY(dev.CreateBuffer(staged.size()));
    MT_RETURN_IF_ERROR(dev.Upload(L.weights, 0, staged));
    for (uint32_t e : per_layer[l]) {  // their pages of the mapping go back after every upload
      for (const auto& [part, bytes] :
           {std::pair{kGate, L.spec.gate_bytes()}, std::pair{kUp, L.spec.up_bytes()},
            std::pair{kDown, L.spec.down_bytes()}}) {
        gpu.uploaded_from.emplace_back(layout.mapped(l, e, part), bytes);
      }
    }
    tier->weight_bytes_ += staged.size();
    tier->n_owned_ += static_cast<uint32_t>(L.slots.size());
    const LayerWeights& lw = model.layer(static_cast<int>(l));
    if (!lw.gate_exps_b.empty()) {
      std::vector<float> bias(lw.gate_exps_b);
      bias.insert(bias.end(), lw.up_exps_b.begin(), lw.up_exps_b.end());
      L.bias = MT_TRY(dev.CreateBuffer(bias.size() * 4));
      MT_RETURN_IF_ERROR(
          dev.Upload(L.bias, 0, {reinterpret_cast<const uint8_t*>(bias.data()), bias.size() * 4}));
    }
  }
  return tier;
}

Status GpuExpertTier::Start(uint32_t il, std::span<const int32_t> experts, const int32_t* start,
                            const int32_t* rows, int k, const float* xn) {
  Impl& im = *impl_;
  const Impl::Layer& L = im.layers[il];
  float* in = reinterpret_cast<float*>(im.in.host_data());
  out_start_.clear();
  int64_t row = 0;
  for (int32_t e : experts) {
    out_start_.push_back(row);
    for (int32_t i = start[e]; i < start[e + 1]; ++i, ++row) {
      std::memcpy(in + row * n_embd_, xn + (rows[i] / k) * n_embd_, n_embd_ * sizeof(float));
    }
  }
  Status recorded;
  const uint64_t row_bytes = static_cast<uint64_t>(row * n_embd_) * sizeof(float);
  Status submitted = im.backend->device->Submit([&](gpu::CommandRecorder& rec) {
    rec.Copy(im.in, 0, im.in_device, 0, row_bytes);
    rec.Barrier();
    for (size_t j = 0; j < experts.size() && recorded.ok(); ++j) {
      const int32_t e = experts[j];
      const DeviceSlot& s = L.slots[slot_of_[size_t{il} * n_expert_ + e]];
      gpu::ExpertFfnArgs a;
      a.gate_type = L.spec.gate_type;
      a.up_type = L.spec.up_type;
      a.down_type = L.spec.down_type;
      a.weights = &L.weights;
      a.gate_offset = s.gate;
      a.up_offset = s.up;
      a.down_offset = s.down;
      a.n_embd = n_embd_;
      a.n_ff = L.spec.n_ff;
      a.m = start[e + 1] - start[e];
      a.x = &im.in_device;
      a.x_offset = static_cast<uint64_t>(out_start_[j] * n_embd_);
      a.hidden = &im.hidden;
      a.hidden_offset = static_cast<uint64_t>(2 * out_start_[j] * L.spec.n_ff);
      a.y = &im.out_device;
      a.y_offset = a.x_offset;
      if (L.bias.size() > 0) {
        a.bias = &L.bias;
        a.gate_bias_offset = uint64_t{static_cast<uint32_t>(e)} * L.spec.n_ff;
        a.up_bias_offset = (uint64_t{n_expert_} + static_cast<uint32_t>(e)) * L.spec.n_ff;
      }
      a.activation = L.activation;
      recorded = im.backend->ffn->Record(rec, a);
    }
    rec.Barrier();
    rec.Copy(im.out_device, 0, im.out, 0, row_bytes);
  });
  if (!recorded.ok()) {
    static_cast<void>(im.backend->device->Wait());  // what was recorded before the error
    return recorded;
  }
  MT_RETURN_IF_ERROR(submitted);
  runs_ += experts.size();
  return Status::Ok();
}

std::vector<uint8_t> GpuExpertTier::OwnedFlags() const {
  std::vector<uint8_t> flags(slot_of_.size());
  for (size_t i = 0; i < slot_of_.size(); ++i) flags[i] = slot_of_[i] >= 0;
  return flags;
}

Status GpuExpertTier::Finish() { return impl_->backend->Wait(); }

}  // namespace mt
