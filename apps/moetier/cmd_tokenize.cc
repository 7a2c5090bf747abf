// moetier tokenize -m MODEL (-p TEXT | -f FILE) [--ids] [--no-bos] [--no-parse-special]:
// prints the token ids of the text as llama.cpp's llama-tokenize does: one "%6d -> 'piece'"
// line per token, or with --ids a list "[1, 2, 3]". MODEL is a GGUF file with a tokenizer,
// or a Hugging Face tokenizer.json (then --pre names its pre-tokenizer, default qwen2).

#include "base/file_io.h"
#include "command.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace mt::cli {
namespace {

struct TokenizeFlags {
  std::string model;
  std::string prompt;
  std::string file;
  std::string pre = "qwen2";
  bool has_prompt = false;  // -p was given (possibly empty)
  bool ids = false;
  bool no_bos = false;
  bool no_parse_special = false;
};

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

Result<Tokenizer> LoadTokenizer(const TokenizeFlags& f) {
  if (EndsWith(f.model, ".json")) {
    VocabSpec vocab = MT_TRY(ImportHfTokenizer(f.model, f.pre, 0));
    Result<Tokenizer> t = Tokenizer::Create(std::move(vocab));
    if (!t.ok()) return t.status().WithContext(f.model);
    return t;
  }
  GgufModel model = MT_TRY(GgufModel::Open(f.model));
  Result<Tokenizer> t = Tokenizer::FromMetadata(model.metadata());
  if (!t.ok()) return t.status().WithContext(f.model);
  return t;
}

Result<std::string> ReadText(const TokenizeFlags& f) {
  if (f.file.empty()) return f.prompt;
  return ReadWholeFile(f.file);
}

int Run(const TokenizeFlags& f) {
  if (!f.has_prompt && f.file.empty()) {
    return ReportError(InvalidArgument("tokenize: give the text with -p TEXT or -f FILE"));
  }
  Result<std::string> text = ReadText(f);
  if (!text.ok()) return ReportError(text.status());
  if (text->empty()) return ReportError(InvalidArgument("tokenize: the input text is empty"));
  Result<Tokenizer> tok = LoadTokenizer(f);
  if (!tok.ok()) return ReportError(tok.status());
  Result<std::vector<int32_t>> ids =
      tok->Encode(*text, !f.no_bos && tok->add_bos(), !f.no_parse_special);
  if (!ids.ok()) return ReportError(ids.status());
  std::string out;
  if (f.ids) {
    out = "[";
    for (size_t i = 0; i < ids->size(); ++i) out += (i ? ", " : "") + std::to_string((*ids)[i]);
    out += "]\n";
  } else {
    for (int32_t id : *ids) out += fmt::format("{:6d} -> '{}'\n", id, tok->TokenPiece(id));
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return kExitOk;
}

}  // namespace

CommandMain SetupTokenize(CLI::App& sub) {
  auto f = std::make_shared<TokenizeFlags>();
  sub.add_option("-m,--model", f->model, "GGUF model (or a tokenizer.json)")->required();
  CLI::Option* prompt = sub.add_option("-p,--prompt", f->prompt, "Text to tokenize");
  CLI::Option* file = sub.add_option("-f,--file", f->file, "File whose bytes to tokenize");
  prompt->excludes(file);
  sub.add_option("--pre", f->pre,
                 "Pre-tokenizer for a tokenizer.json model (qwen2, llama-bpe, gpt-2, olmo, "
                 "deepseek-v3, deepseek-llm, gpt-4o)");
  sub.add_flag("--ids", f->ids, "Print only the ids, as a list [1, 2, 3]");
  sub.add_flag("--no-bos", f->no_bos, "Never put BOS first, even if the model asks for it");
  sub.add_flag("--no-parse-special", f->no_parse_special,
               "Treat special-token text such as <|im_end|> as plain text");
  return [f, prompt]() {
    f->has_prompt = prompt->count() > 0;
    return Run(*f);
  };
}

}  // namespace mt::cli
