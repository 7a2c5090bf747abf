#include "engine/model.h"

#include <algorithm>
#include <cstring>

#include "model/expert_layout_gguf.h"
#include "model/tensor_names.h"
#include "quant/dequant.h"

namespace mt {
namespace {

std::string ShapeString(const std::vector<uint64_t>& shape) {
  std::string s;
  for (uint64_t d : shape) s += (s.empty() ? "" : "x") + std::to_string(d);
  return s;
}

WeightMatrix MatrixOf(const GgufTensor& t) {
  WeightMatrix w;
  w.type = t.type;
  w.data = t.data;
  w.cols = static_cast<int64_t>(t.shape[0]);
  w.rows = static_cast<int64_t>(t.n_elements / t.shape[0]);
  w.row_bytes = RowBytes(t.type, t.shape[0]);
  return w;
}

// Finds the tensors the architecture needs and checks their shapes and types.
class TensorBinder {
 public:
  explicit TensorBinder(const GgufModel& gguf) : gguf_(gguf) {}

  // The tensor for `desc`, or nullptr when it is optional and absent.
  Result<const GgufTensor*> Find(const TensorDesc& desc) const {
    std::string name = TensorName(desc.role, desc.layer, desc.suffix);
    const GgufTensor* t = gguf_.FindTensor(name);
    if (t == nullptr) {
      if (!desc.required) return static_cast<const GgufTensor*>(nullptr);
      return NotFound("missing tensor {}", name);
    }
    if (t->shape != desc.shape) {
      return InvalidArgument("tensor {} has shape {}, expected {}", name, ShapeString(t->shape),
                             ShapeString(desc.shape));
    }
    if (!CanDequantize(t->type)) {
      return Unimplemented("tensor {} has type {}, which moetier cannot compute with yet", name,
                           TypeName(t->type));
    }
    return t;
  }

 private:
  const GgufModel& gguf_;
};

std::vector<float> ToFloats(const GgufTensor* t) {
  if (t == nullptr) return {};
  std::vector<float> v(t->n_elements);
  const uint64_t row = t->shape[0];
  const uint64_t row_bytes = RowBytes(t->type, row);
  for (uint64_t r = 0; r < t->n_elements / row; ++r) {
    DequantizeRow(t->type, t->data + r * row_bytes, v.data() + r * row, static_cast<int64_t>(row));
  }
  return v;
}

}  // namespace

std::vector<WeightMatrix*> LayerWeights::matrices() {
  return {&wq,      &wk,       &wv,     &wo,        &wq_a,       &wq_b,     &wkv_a,
          &wk_b,    &wv_b,     &wqkv,   &wqkv_gate, &ssm_ba,     &ssm_beta, &ssm_alpha,
          &ssm_out, &ffn_gate, &ffn_up, &ffn_down,  &shexp_gate, &shexp_up, &shexp_down};
}

std::vector<const WeightMatrix*> LayerWeights::matrices() const {
  std::vector<WeightMatrix*> m = const_cast<LayerWeights*>(this)->matrices();
  return {m.begin(), m.end()};
}

std::vector<const std::vector<float>*> LayerWeights::vectors() const {
  return {&attn_norm,   &bq,          &bk,          &bv,        &bo,          &attn_sinks,
          &attn_q_norm, &attn_k_norm, &q_a_norm,    &kv_a_norm, &ffn_norm,    &router,
          &router_b,    &exp_probs_b, &gate_exps_b, &up_exps_b, &down_exps_b, &shexp_gate_inp,
          &ssm_conv1d,  &ssm_dt,      &ssm_a,       &ssm_norm};
}

Model::Model(std::string path, GgufModel gguf) : path_(std::move(path)), gguf_(std::move(gguf)) {}
Model::~Model() = default;

Result<std::unique_ptr<Model>> Model::Load(const std::string& path, const LoadOptions& options) {
  GgufModel gguf = MT_TRY(GgufModel::Open(path));
  std::unique_ptr<Model> m(new Model(path, std::move(gguf)));
  auto fail = [&](const Status& s) { return s.WithContext(path); };

  Result<HParams> hp = ReadHParams(m->gguf_.metadata());
  if (!hp.ok()) return fail(hp.status());
  m->hp_ = hp.value();
  const GgufTensor* embd = m->gguf_.FindTensor("token_embd.weight");
  if (embd == nullptr || embd->shape.size() != 2) {
    return fail(NotFound("missing tensor token_embd.weight"));
  }
  if (m->hp_.n_vocab == 0) m->hp_.n_vocab = static_cast<uint32_t>(embd->shape[1]);
  m->parts_ = DescribeModel(m->hp_);

  const GgufMetadata& md = m->gguf_.metadata();
  if (md.Contains("tokenizer.ggml.tokens")) {
    Result<Tokenizer> tok = Tokenizer::FromMetadata(md);
    if (!tok.ok()) return fail(tok.status());
    if (tok->n_vocab() != static_cast<int32_t>(m->hp_.n_vocab)) {
      return fail(InvalidArgument("the tokenizer has {} tokens but token_embd has {} rows",
                                  tok->n_vocab(), m->hp_.n_vocab));
    }
    m->tokenizer_ = std::make_unique<Tokenizer>(std::move(tok.value()));
  } else if (options.require_tokenizer) {
    return fail(NotFound("the file has no tokenizer (tokenizer.ggml.tokens is missing)"));
  }

  if (Status s = m->BindTensors(); !s.ok()) return fail(s);
  Result<ExpertLayout> layout = ExpertLayoutFromGguf(m->gguf_, ExpertLayers(m->parts_));
  if (!layout.ok()) return fail(layout.status());
  m->expert_layout_ = std::make_unique<ExpertLayout>(std::move(layout.value()));
  const HParams& want = m->hp_;
  for (uint32_t il = 0; il < want.n_layer; ++il) {
    if (!m->parts_.layers[il].has_experts()) continue;
    const ExpertSpec& s = m->expert_layout_->spec(il);
    const uint32_t n_ff = m->parts_.layers[il].ffn.n_ff;
    if (m->expert_layout_->n_expert() != want.n_expert || s.n_embd != want.n_embd ||
        s.n_ff != n_ff) {
      return fail(InvalidArgument(
          "layer {}: {} experts of {}x{}, the hyperparameters say {} of "
          "{}x{}",
          il, m->expert_layout_->n_expert(), s.n_embd, s.n_ff, want.n_expert, want.n_embd, n_ff));
    }
    for (GgmlType type : {s.gate_type, s.up_type, s.down_type}) {
      if (!CanDequantize(type)) {
        return fail(
            Unimplemented("layer {}: experts of type {}, which moetier cannot compute "
                          "with yet",
                          il, TypeName(type)));
      }
    }
  }
  std::vector<const WeightMatrix*> left;
  if (options.left_to_device) left = options.left_to_device(*m);
  if (Status s = m->CopyDenseWeights(left); !s.ok()) return fail(s);
  return m;
}

// Finds every tensor the parts call for, checks its shape and type, and points the weights
// at it (the routed experts are the ExpertLayout's).
Status Model::BindTensors() {
  TensorBinder binder(gguf_);
  layers_.resize(hp_.n_layer);
  // A pack holds each routed expert as tensors of its own instead of the table's stacked
  // ones; ExpertLayoutFromGguf finds them and Load compares them.
  const bool pack = IsExpertMajorPack(gguf_.metadata());
  for (const TensorDesc& desc : ArchTensors(parts_, hp_)) {
    using R = TensorRole;
    if ((desc.role == R::kFfnGateExps || desc.role == R::kFfnUpExps ||
         desc.role == R::kFfnDownExps) &&
        desc.suffix == TensorSuffix::kWeight) {
      if (pack) continue;
      // Bound by ExpertLayoutFromGguf; checked here for shape and presence.
    }
    const GgufTensor* t = MT_TRY(binder.Find(desc));
    const bool bias = desc.suffix == TensorSuffix::kBias;
    if (desc.layer < 0) {
      switch (desc.role) {
        case R::kTokenEmbd:
          token_embd_ = MatrixOf(*t);
          break;
        case R::kOutputNorm:
          output_norm_ = ToFloats(t);
          break;
        case R::kOutput:
          output_ = t ? MatrixOf(*t) : token_embd_;
          break;
        default:
          break;
      }
      continue;
    }
    LayerWeights& L = layers_[desc.layer];
    switch (desc.role) {
      case R::kAttnNorm:
        L.attn_norm = ToFloats(t);
        break;
      case R::kAttnQ:
        bias ? void(L.bq = ToFloats(t)) : void(L.wq = MatrixOf(*t));
        break;
      case R::kAttnK:
        bias ? void(L.bk = ToFloats(t)) : void(L.wk = MatrixOf(*t));
        break;
      case R::kAttnV:
        bias ? void(L.bv = ToFloats(t)) : void(L.wv = MatrixOf(*t));
        break;
      case R::kAttnOutput:
        bias ? void(L.bo = ToFloats(t)) : void(L.wo = MatrixOf(*t));
        break;
      case R::kAttnSinks:
        L.attn_sinks = ToFloats(t);
        break;
      case R::kAttnQNorm:
        L.attn_q_norm = ToFloats(t);
        break;
      case R::kAttnKNorm:
        L.attn_k_norm = ToFloats(t);
        break;
      case R::kAttnQA:
        L.wq_a = MatrixOf(*t);
        break;
      case R::kAttnQANorm:
        L.q_a_norm = ToFloats(t);
        break;
      case R::kAttnQB:
        L.wq_b = MatrixOf(*t);
        break;
      case R::kAttnKvAMqa:
        L.wkv_a = MatrixOf(*t);
        break;
      case R::kAttnKvANorm:
        L.kv_a_norm = ToFloats(t);
        break;
      // The per-head tensors (N, L, n_head) and (L, V, n_head) read as n_head*L rows of N and
      // n_head*V rows of L: head h's rows are consecutive.
      case R::kAttnKB:
        L.wk_b = MatrixOf(*t);
        break;
      case R::kAttnVB:
        L.wv_b = MatrixOf(*t);
        break;
      case R::kAttnKvB:
        MT_RETURN_IF_ERROR(SplitKvB(desc.layer, *t));
        break;
      case R::kAttnQkv:
        L.wqkv = MatrixOf(*t);
        break;
      case R::kAttnGate:
        L.wqkv_gate = MatrixOf(*t);
        break;
      case R::kSsmConv1d:
        L.ssm_conv1d = ToFloats(t);
        break;
      case R::kSsmDt:
        L.ssm_dt = ToFloats(t);
        break;
      case R::kSsmA:
        L.ssm_a = ToFloats(t);
        break;
      case R::kSsmBetaAlpha:
        L.ssm_ba = MatrixOf(*t);
        break;
      case R::kSsmBeta:
        L.ssm_beta = MatrixOf(*t);
        break;
      case R::kSsmAlpha:
        L.ssm_alpha = MatrixOf(*t);
        break;
      case R::kSsmNorm:
        L.ssm_norm = ToFloats(t);
        break;
      case R::kSsmOut:
        L.ssm_out = MatrixOf(*t);
        break;
      case R::kFfnNorm:
      case R::kAttnPostNorm:
        L.ffn_norm = ToFloats(t);
        break;
      case R::kFfnGate:
        L.ffn_gate = MatrixOf(*t);
        break;
      case R::kFfnUp:
        L.ffn_up = MatrixOf(*t);
        break;
      case R::kFfnDown:
        L.ffn_down = MatrixOf(*t);
        break;
      case R::kFfnGateInp:
        (bias ? L.router_b : L.router) = ToFloats(t);
        break;
      // gpt-oss's per-expert biases: small, so they stay resident with the dense weights.
      case R::kFfnGateExps:
        if (bias) L.gate_exps_b = ToFloats(t);
        break;
      case R::kFfnUpExps:
        if (bias) L.up_exps_b = ToFloats(t);
        break;
      case R::kFfnDownExps:
        if (bias) L.down_exps_b = ToFloats(t);
        break;
      case R::kFfnExpProbsB:
        L.exp_probs_b = ToFloats(t);
        break;
      case R::kFfnGateInpShexp:
        L.shexp_gate_inp = ToFloats(t);
        break;
      case R::kFfnGateShexp:
        L.shexp_gate = MatrixOf(*t);
        break;
      case R::kFfnUpShexp:
        L.shexp_up = MatrixOf(*t);
        break;
      case R::kFfnDownShexp:
        L.shexp_down = MatrixOf(*t);
        break;
      default:
        break;
    }
  }
  return Status::Ok();
}

// attn_kv_b (L, n_head*(N+V)) holds, per head, N rows of k_b then V rows of v_b, each of the
// L latent dims. The absorbed attention needs k_b transposed (L rows of N per head): it is
// dequantized exactly into f32 (4 bytes a weight where the file had about 1: on DeepSeek-V3,
// 61 x 128 x 512 x 128 weights, 2 GiB, still far below what the legacy per-head KV cache
// llama.cpp computes these files with takes at 4096 positions); v_b's rows are copied as
// they are.
Status Model::SplitKvB(int il, const GgufTensor& kv_b) {
  const MlaParts& mla = parts_.layers[il].attention.mla;
  const int64_t L = mla.kv_lora_rank, N = mla.head_dim_nope, V = mla.head_dim_v;
  const int64_t H = hp_.n_head;
  const WeightMatrix src = MatrixOf(kv_b);
  Result<AlignedBuffer> kb = AlignedBuffer::Allocate(uint64_t(H * L * N) * sizeof(float));
  Result<AlignedBuffer> vb = AlignedBuffer::Allocate(uint64_t(H * V) * src.row_bytes);
  if (!kb.ok()) return kb.status().WithContext("attn_kv_b split");
  if (!vb.ok()) return vb.status().WithContext("attn_kv_b split");
  auto* k = reinterpret_cast<float*>(kb->data());
  std::vector<float> row(L);
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t i = 0; i < N; ++i) {  // k_b row i of head h -> column i of its transpose
      DequantizeRow(src.type, src.row(h * (N + V) + i), row.data(), L);
      for (int64_t j = 0; j < L; ++j) k[(h * L + j) * N + i] = row[j];
    }
    std::memcpy(vb->data() + h * V * src.row_bytes, src.row(h * (N + V) + N), V * src.row_bytes);
  }
  LayerWeights& w = layers_[il];
  w.wk_b = {GgmlType::kF32, kb->data(), H * L, N, RowBytes(GgmlType::kF32, N)};
  w.wv_b = {src.type, vb->data(), H * V, L, src.row_bytes};
  split_.push_back(std::move(kb.value()));  // copied like the others, then freed
  split_.push_back(std::move(vb.value()));
  return Status::Ok();
}

// Moves every dense matrix out of the mapping into its own buffer (vectors are already
// copies), in the layout the kernels read fastest where they prefer another (the numbers do
// not change). The token embedding keeps its rows (looked up by row); a tied head shares
// them. The matrices left to a device stay where they are, in rows, unless SplitKvB made them
// (its buffers are freed here).
void Model::ReleaseCopiedPages() const {
  for (const std::span<const uint8_t> s : copied_from_) gguf_.ReleasePages(s.data(), s.size());
}

Status Model::CopyDenseWeights(const std::vector<const WeightMatrix*>& left_to_device) {
  auto in_split = [&](const WeightMatrix& w) {
    return std::any_of(split_.begin(), split_.end(),
                       [&](const AlignedBuffer& b) { return b.data() == w.data; });
  };
  auto copy = [&](WeightMatrix& w) -> Status {
    if (w.data == nullptr) return Status::Ok();
    const uint64_t bytes = w.row_bytes * static_cast<uint64_t>(w.rows);
    if (&w != &token_embd_ && !in_split(w) &&
        std::find(left_to_device.begin(), left_to_device.end(), &w) != left_to_device.end()) {
      left_to_device_bytes_ += bytes;
      return Status::Ok();
    }
    Result<AlignedBuffer> buf = AlignedBuffer::Allocate(bytes);
    if (!buf.ok()) return buf.status().WithContext("dense weights");
    if (&w == &token_embd_) {
      std::memcpy(buf->data(), w.data, bytes);
    } else {
      w.layout = CopyForKernels(w, buf->data());
    }
    w.data = buf->data();
    dense_copies_.push_back(std::move(buf.value()));
    dense_bytes_ += bytes;
    return Status::Ok();
  };
  const bool tied = output_.data == token_embd_.data;
  MT_RETURN_IF_ERROR(copy(token_embd_));
  if (tied) {
    output_.data = token_embd_.data;
  } else {
    MT_RETURN_IF_ERROR(copy(output_));
  }
  for (LayerWeights& L : layers_) {
    for (WeightMatrix* w : L.matrices()) MT_RETURN_IF_ERROR(copy(*w));
    for (const std::vector<float>* v : L.vectors()) dense_bytes_ += v->size() * sizeof(float);
  }
  dense_bytes_ += output_norm_.size() * sizeof(float);
  split_.clear();
  // Every tensor but the routed experts' and those left to a device is read from a copy now
  // (the matrices above, vectors and routers at load): the process need not map them too.
  for (const GgufTensor& t : gguf_.tensors()) {
    const bool left = std::any_of(left_to_device.begin(), left_to_device.end(),
                                  [&](const WeightMatrix* w) { return w->data == t.data; });
    if (!left && !IsRoutedExpertTensorName(t.name)) copied_from_.emplace_back(t.data, t.n_bytes);
  }
  ReleaseCopiedPages();
  return Status::Ok();
}

}  // namespace mt
