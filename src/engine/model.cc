#include "engine/model.h"

#include <cstring>

#include "model/expert_layout_gguf.h"
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

Model::Model(std::string path, GgufModel gguf) : path_(std::move(path)), gguf_(std::move(gguf)) {}
Model::~Model() = default;

Result<std::unique_ptr<Model>> Model::Load(const std::string& path, const LoadOptions& options) {
  Result<GgufModel> gguf = GgufModel::Open(path);
  if (!gguf.ok()) return gguf.status();
  std::unique_ptr<Model> m(new Model(path, std::move(gguf.value())));
  auto fail = [&](const Status& s) { return s.WithContext(path); };

  Result<HParams> hp = ReadHParams(m->gguf_.metadata());
  if (!hp.ok()) return fail(hp.status());
  m->hp_ = hp.value();
  m->arch_ = FindArch(m->hp_.arch);
  const GgufTensor* embd = m->gguf_.FindTensor("token_embd.weight");
  if (embd == nullptr || embd->shape.size() != 2) {
    return fail(NotFound("missing tensor token_embd.weight"));
  }
  if (m->hp_.n_vocab == 0) m->hp_.n_vocab = static_cast<uint32_t>(embd->shape[1]);

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

  TensorBinder binder(m->gguf_);
  m->layers_.resize(m->hp_.n_layer);
  // A pack holds each routed expert as tensors of its own instead of the table's stacked
  // ones; ExpertLayoutFromGguf finds them and the check after it compares them.
  const bool pack = IsExpertMajorPack(md);
  for (const TensorDesc& desc : ArchTensors(*m->arch_, m->hp_)) {
    using R = TensorRole;
    if (pack && (desc.role == R::kFfnGateExps || desc.role == R::kFfnUpExps ||
                 desc.role == R::kFfnDownExps)) {
      continue;
    }
    Result<const GgufTensor*> found = binder.Find(desc);
    if (!found.ok()) return fail(found.status());
    const GgufTensor* t = found.value();
    const bool bias = desc.suffix == TensorSuffix::kBias;
    if (desc.layer < 0) {
      switch (desc.role) {
        case R::kTokenEmbd: m->token_embd_ = MatrixOf(*t); break;
        case R::kOutputNorm: m->output_norm_ = ToFloats(t); break;
        case R::kOutput: m->output_ = t ? MatrixOf(*t) : m->token_embd_; break;
        default: break;
      }
      continue;
    }
    LayerWeights& L = m->layers_[desc.layer];
    switch (desc.role) {
      case R::kAttnNorm: L.attn_norm = ToFloats(t); break;
      case R::kAttnQ: bias ? void(L.bq = ToFloats(t)) : void(L.wq = MatrixOf(*t)); break;
      case R::kAttnK: bias ? void(L.bk = ToFloats(t)) : void(L.wk = MatrixOf(*t)); break;
      case R::kAttnV: bias ? void(L.bv = ToFloats(t)) : void(L.wv = MatrixOf(*t)); break;
      case R::kAttnOutput: L.wo = MatrixOf(*t); break;
      case R::kAttnQNorm: L.attn_q_norm = ToFloats(t); break;
      case R::kAttnKNorm: L.attn_k_norm = ToFloats(t); break;
      case R::kFfnNorm: L.ffn_norm = ToFloats(t); break;
      case R::kFfnGateInp: L.router = ToFloats(t); break;
      case R::kFfnGateInpShexp: L.shexp_gate_inp = ToFloats(t); break;
      case R::kFfnGateShexp: L.shexp_gate = MatrixOf(*t); break;
      case R::kFfnUpShexp: L.shexp_up = MatrixOf(*t); break;
      case R::kFfnDownShexp: L.shexp_down = MatrixOf(*t); break;
      default: break;
    }
  }
  Result<ExpertLayout> layout = ExpertLayoutFromGguf(m->gguf_, m->hp_.n_layer);
  if (!layout.ok()) return fail(layout.status());
  m->expert_layout_ = std::make_unique<ExpertLayout>(std::move(layout.value()));
  const HParams& want = m->hp_;
  for (uint32_t il = 0; il < want.n_layer; ++il) {
    const ExpertSpec& s = m->expert_layout_->spec(il);
    if (m->expert_layout_->n_expert() != want.n_expert || s.n_embd != want.n_embd ||
        s.n_ff != want.n_ff_exp) {
      return fail(InvalidArgument("layer {}: {} experts of {}x{}, the hyperparameters say {} of "
                                  "{}x{}", il, m->expert_layout_->n_expert(), s.n_embd, s.n_ff,
                                  want.n_expert, want.n_embd, want.n_ff_exp));
    }
    for (GgmlType type : {s.gate_type, s.up_type, s.down_type}) {
      if (!CanDequantize(type)) {
        return fail(Unimplemented("layer {}: experts of type {}, which moetier cannot compute "
                                  "with yet", il, TypeName(type)));
      }
    }
  }
  if (Status s = m->CopyDenseWeights(); !s.ok()) return fail(s);
  return m;
}

// Moves every dense matrix out of the mapping into its own buffer (vectors are already
// copies), in the layout the kernels read fastest where they prefer another (the numbers do
// not change). The token embedding keeps its rows (looked up by row); a tied head shares
// them.
Status Model::CopyDenseWeights() {
  auto copy = [&](WeightMatrix& w) -> Status {
    if (w.data == nullptr) return Status::Ok();
    const uint64_t bytes = w.row_bytes * static_cast<uint64_t>(w.rows);
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
    for (WeightMatrix* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.shexp_gate, &L.shexp_up,
                            &L.shexp_down}) {
      MT_RETURN_IF_ERROR(copy(*w));
    }
    for (const std::vector<float>* v : {&L.attn_norm, &L.bq, &L.bk, &L.bv, &L.attn_q_norm,
                                        &L.attn_k_norm, &L.ffn_norm, &L.router,
                                        &L.shexp_gate_inp}) {
      dense_bytes_ += v->size() * sizeof(float);
    }
  }
  dense_bytes_ += output_norm_.size() * sizeof(float);
  return Status::Ok();
}

}  // namespace mt
