// moetier inspect FILE [--json]: architecture, hyperparameters, tokenizer, tensor table and
// the memory plan (dense vs routed-expert bytes, bytes touched per decoded token).
#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/units.h"
#include "command.h"
#include "gguf/gguf.h"
#include "model/arch.h"
#include "model/hparams.h"
#include "model/memory_plan.h"
#include "model/tensor_names.h"
#include "synth/file_type.h"

namespace mt::cli {
namespace {

using nlohmann::json;

std::string ShapeString(const std::vector<uint64_t>& shape) {
  std::string s;
  for (uint64_t d : shape) s += (s.empty() ? "" : " x ") + std::to_string(d);
  return s;
}

json HParamsJson(const HParams& hp) {
  return {{"arch", hp.arch},
          {"n_vocab", hp.n_vocab},
          {"n_ctx_train", hp.n_ctx_train},
          {"n_embd", hp.n_embd},
          {"n_layer", hp.n_layer},
          {"n_head", hp.n_head},
          {"n_head_kv", hp.n_head_kv},
          {"head_dim_k", hp.head_dim_k},
          {"head_dim_v", hp.head_dim_v},
          {"n_rot", hp.n_rot},
          {"n_ff", hp.n_ff},
          {"n_expert", hp.n_expert},
          {"n_expert_used", hp.n_expert_used},
          {"n_ff_exp", hp.n_ff_exp},
          {"n_ff_shexp", hp.n_ff_shexp},
          {"rope_freq_base", hp.rope_freq_base},
          {"rms_eps", hp.rms_eps}};
}

// The tokenizer keys, summarised without building a tokenizer.
json TokenizerJson(const GgufMetadata& md) {
  json j = json::object();
  if (const std::string* m = md.FindString("tokenizer.ggml.model")) j["model"] = *m;
  if (const std::string* p = md.FindString("tokenizer.ggml.pre")) j["pre"] = *p;
  if (const GgufArray* t = md.FindArray("tokenizer.ggml.tokens")) j["n_tokens"] = t->items.size();
  if (const GgufArray* m = md.FindArray("tokenizer.ggml.merges")) j["n_merges"] = m->items.size();
  for (const char* key : {"bos", "eos", "eot", "unknown", "padding"}) {
    std::string k = fmt::format("tokenizer.ggml.{}_token_id", key);
    if (std::optional<uint64_t> id = md.FindUint(k)) j[std::string(key) + "_id"] = *id;
  }
  if (std::optional<bool> b = md.FindBool("tokenizer.ggml.add_bos_token")) j["add_bos"] = *b;
  if (const std::string* t = md.FindString("tokenizer.chat_template")) {
    j["chat_template_bytes"] = t->size();
  }
  return j;
}

json PlanJson(const MemoryPlan& p) {
  json layers = json::array();
  for (size_t i = 0; i < p.layers.size(); ++i) {
    const LayerMemory& l = p.layers[i];
    layers.push_back({{"layer", i},
                      {"dense_bytes", l.dense_bytes},
                      {"expert_bytes", l.expert_bytes},
                      {"n_expert", l.n_expert},
                      {"bytes_per_expert", l.bytes_per_expert}});
  }
  return {{"total_bytes", p.total_bytes},
          {"unused_bytes", p.unused_bytes},
          {"dense_bytes", p.dense_bytes},
          {"expert_bytes", p.expert_bytes},
          {"global_dense_bytes", p.global_dense_bytes},
          {"n_expert_used", p.n_expert_used},
          {"bytes_per_token", p.bytes_per_token()},
          {"dense_bytes_per_token", p.dense_bytes_per_token},
          {"expert_bytes_per_token", p.expert_bytes_per_token},
          {"layers", layers}};
}

// Scalars as JSON values; arrays summarised (a vocab is 150k strings).
json MetadataJson(const GgufMetadata& md) {
  json j = json::object();
  for (const auto& e : md.entries()) {
    const GgufValue& v = e.value;
    if (const GgufArray* a = v.AsArray()) {
      j[e.key] = {{"array_of", GgufTypeName(a->element_type)}, {"length", a->items.size()}};
    } else if (const std::string* s = v.AsString()) {
      j[e.key] = *s;
    } else if (std::optional<bool> b = v.AsBool()) {
      j[e.key] = *b;
    } else if (std::optional<int64_t> i = v.AsInt()) {
      j[e.key] = *i;
    } else if (std::optional<uint64_t> u = v.AsUint()) {
      j[e.key] = *u;
    } else if (std::optional<double> d = v.AsDouble()) {
      j[e.key] = *d;
    }
  }
  return j;
}

double Pct(uint64_t part, uint64_t whole) { return whole ? 100.0 * part / whole : 0.0; }

// Bytes and tensors per weight type, most bytes first: what a low-bit mix is made of.
struct TypeShare {
  GgmlType type;
  uint64_t bytes = 0;
  int tensors = 0;
};
std::vector<TypeShare> TypeShares(const GgufModel& model) {
  std::vector<TypeShare> shares;
  for (const GgufTensor& t : model.tensors()) {
    auto it = std::find_if(shares.begin(), shares.end(),
                           [&](const TypeShare& s) { return s.type == t.type; });
    if (it == shares.end()) it = shares.insert(shares.end(), TypeShare{t.type});
    it->bytes += t.n_bytes;
    ++it->tensors;
  }
  std::stable_sort(shares.begin(), shares.end(),
                   [](const TypeShare& a, const TypeShare& b) { return a.bytes > b.bytes; });
  return shares;
}

// general.file_type with the name synth gives it ("31 (iq1_m)"), or "" if absent.
std::string FileTypeLabel(const GgufMetadata& md) {
  const std::optional<uint64_t> id = md.FindUint("general.file_type");
  if (!id) return "";
  const FileType* ft = *id <= UINT32_MAX ? FindFileTypeById(static_cast<uint32_t>(*id)) : nullptr;
  return ft ? fmt::format("{} ({})", *id, ft->name) : std::to_string(*id);
}

void PrintText(const GgufModel& model, const Result<HParams>& hp, const MemoryPlan& plan) {
  const GgufMetadata& md = model.metadata();
  const auto& shards = model.shards();
  fmt::print("file:          {} ({} file{}, {}), GGUF v{}, alignment {}\n", shards[0].path,
             shards.size(), shards.size() == 1 ? "" : "s", HumanBytes(model.total_file_bytes()),
             model.version(), shards[0].alignment);
  const std::string* arch = md.FindString("general.architecture");
  const std::string* name = md.FindString("general.name");
  fmt::print("architecture:  {}{}\n", arch ? *arch : "(none)",
             name ? fmt::format("  ({})", *name) : "");
  if (hp.ok()) {
    const HParams& h = hp.value();
    fmt::print("hyperparameters:\n");
    fmt::print("  n_layer {}  n_embd {}  n_head {}  n_head_kv {}  head_dim {}  n_ctx_train {}\n",
               h.n_layer, h.n_embd, h.n_head, h.n_head_kv, h.head_dim_k, h.n_ctx_train);
    fmt::print("  n_expert {}  n_expert_used {}  n_ff_exp {}{}  rope.freq_base {}  rms_eps {}\n",
               h.n_expert, h.n_expert_used, h.n_ff_exp,
               h.n_ff_shexp ? fmt::format("  n_ff_shexp {}", h.n_ff_shexp) : "", h.rope_freq_base,
               h.rms_eps);
    for (const std::string& line : DescribeParts(DescribeModel(h))) fmt::print("  {}\n", line);
  } else {
    fmt::print("hyperparameters: not runnable by moetier: {}\n", hp.status().message());
  }
  json tok = TokenizerJson(md);
  if (tok.empty()) {
    fmt::print("tokenizer:     none\n");
  } else {
    std::string s;
    for (auto& [k, v] : tok.items()) s += fmt::format("{}{}={}", s.empty() ? "" : " ", k, v.dump());
    fmt::print("tokenizer:     {}\n", s);
  }
  std::string weights;
  for (const TypeShare& s : TypeShares(model)) {
    weights +=
        fmt::format("{}{} {} ({:.1f}%, {} tensor{})", weights.empty() ? "" : ", ", TypeName(s.type),
                    HumanBytes(s.bytes), Pct(s.bytes, model.total_file_bytes()), s.tensors,
                    s.tensors == 1 ? "" : "s");
  }
  const std::string file_type = FileTypeLabel(md);
  fmt::print("weights:       {}{}\n", weights,
             file_type.empty() ? "" : fmt::format("; file type {}", file_type));
  fmt::print("metadata:      {} keys\n", md.entries().size());
  for (const auto& e : md.entries()) {
    if (e.key.starts_with("tokenizer.")) continue;
    fmt::print("  {:<48} {}\n", e.key, e.value.ToShortString());
  }

  fmt::print("\ntensors: {}\n", model.tensors().size());
  fmt::print("  {:<34} {:<6} {:<22} {:>14} {:>5} {:>14}\n", "name", "type", "shape", "bytes",
             "file", "offset");
  for (const GgufTensor& t : model.tensors()) {
    fmt::print("  {:<34} {:<6} {:<22} {:>14} {:>5} {:>14}\n", t.name, TypeName(t.type),
               ShapeString(t.shape), t.n_bytes, t.shard, t.file_offset);
  }

  fmt::print("\nmemory plan:\n");
  fmt::print("  total           {:>12}\n", HumanBytes(plan.total_bytes));
  fmt::print(
      "  dense           {:>12}  {:5.1f}%  (resident: embeddings, attention, norms, "
      "routers, shared experts, head)\n",
      HumanBytes(plan.dense_bytes), Pct(plan.dense_bytes, plan.total_bytes));
  fmt::print("  routed experts  {:>12}  {:5.1f}%  (tiered)\n", HumanBytes(plan.expert_bytes),
             Pct(plan.expert_bytes, plan.total_bytes));
  if (plan.unused_bytes > 0) {
    fmt::print("  unused          {:>12}          (NextN/MTP layers: never loaded or streamed)\n",
               HumanBytes(plan.unused_bytes));
  }
  fmt::print("  per layer:\n  {:>7} {:>12} {:>12} {:>8} {:>14}\n", "layer", "dense", "experts",
             "n_expert", "bytes/expert");
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    const LayerMemory& l = plan.layers[i];
    fmt::print("  {:>7} {:>12} {:>12} {:>8} {:>14}\n", i, HumanBytes(l.dense_bytes),
               HumanBytes(l.expert_bytes), l.n_expert, l.bytes_per_expert);
  }
  const auto moe_layers = std::count_if(plan.layers.begin(), plan.layers.end(),
                                        [](const LayerMemory& l) { return l.n_expert > 0; });
  fmt::print("  per decoded token: {} = dense {} + experts {} (top-{} in each of {} layers{})\n",
             HumanBytes(plan.bytes_per_token()), HumanBytes(plan.dense_bytes_per_token),
             HumanBytes(plan.expert_bytes_per_token), plan.n_expert_used, moe_layers,
             moe_layers < static_cast<long>(plan.layers.size()) ? " with experts" : "");
}

}  // namespace

CommandMain SetupInspect(CLI::App& sub) {
  auto path = std::make_shared<std::string>();
  auto as_json = std::make_shared<bool>(false);
  sub.add_option("file", *path, "GGUF file, or the first shard of a split set")->required();
  sub.add_flag("--json", *as_json, "Print JSON instead of text");
  return [path, as_json]() {
    Result<GgufModel> model = GgufModel::Open(*path);
    if (!model.ok()) return ReportError(model.status());
    Result<HParams> hp = ReadHParams(model->metadata());
    Result<MemoryPlan> plan = ComputeMemoryPlan(model.value());
    if (!plan.ok()) return ReportError(plan.status().WithContext(*path));
    if (!*as_json) {
      PrintText(model.value(), hp, plan.value());
      return kExitOk;
    }
    json j;
    j["files"] = json::array();
    for (const GgufShard& s : model->shards()) {
      j["files"].push_back({{"path", s.path},
                            {"bytes", s.file_size},
                            {"version", s.version},
                            {"alignment", s.alignment},
                            {"data_offset", s.data_offset}});
    }
    const std::string* arch = model->metadata().FindString("general.architecture");
    j["architecture"] = arch ? *arch : "";
    if (hp.ok())
      j["hparams"] = HParamsJson(hp.value());
    else
      j["hparams_error"] = hp.status().message();
    j["tokenizer"] = TokenizerJson(model->metadata());
    j["metadata"] = MetadataJson(model->metadata());
    j["weight_types"] = json::array();
    for (const TypeShare& s : TypeShares(model.value())) {
      j["weight_types"].push_back(
          {{"type", TypeName(s.type)}, {"bytes", s.bytes}, {"tensors", s.tensors}});
    }
    j["file_type"] = FileTypeLabel(model->metadata());
    j["tensors"] = json::array();
    for (const GgufTensor& t : model->tensors()) {
      j["tensors"].push_back({{"name", t.name},
                              {"type", TypeName(t.type)},
                              {"shape", t.shape},
                              {"bytes", t.n_bytes},
                              {"file", t.shard},
                              {"offset", t.file_offset}});
    }
    j["memory_plan"] = PlanJson(plan.value());
    fmt::print("{}\n", j.dump(2));
    return kExitOk;
  };
}

}  // namespace mt::cli
