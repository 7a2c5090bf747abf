// Fuzzes constrained decoding's grammars (src/grammar/). The first byte picks the mode by its
// value mod 4 (the seeds start with '0' to '3') and the size of the pieces text is fed in
// (its value / 3 mod 8, plus 1):
//   0  the rest is "GBNF\0text" (no NUL: the GBNF is its own text): compile it with
//      Grammar::Parse and, if it compiles, feed the text to a Matcher piece by piece;
//   1  the rest is a JSON Schema: JsonSchemaToGbnf must give an error of one line or GBNF
//      that Grammar::Parse compiles (the converter's own output failing is a bug);
//   2  the rest is text for the json_object grammar (JsonGbnf): whatever it takes whole must
//      be a JSON object to nlohmann's parser;
//   3  the rest is a byte choosing where the grammar starts (LazyStart: at once, after a
//      trigger, after a leading block, both, inside the block), then text the model writes,
//      tokenized with a small byte-level BPE: a GrammarFilter for the json_object grammar
//      takes each token exactly when it allows it, and marks in bulk what it allows one by
//      one (MarkAllowed).
// Any bytes must give an error or a result, never a crash, a hang or a broken invariant.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/token_filter.h"
#include "tokenizer/vocab_spec.h"

namespace {

using mt::grammar::Grammar;
using mt::grammar::Matcher;

// Feeds `text` in pieces of `piece` bytes, checking the Matcher's invariants as it goes.
// Returns whether every piece was taken.
bool Feed(const std::shared_ptr<const Grammar>& g, std::string_view text, size_t piece) {
  Matcher m(g);
  for (size_t at = 0; at < text.size(); at += piece) {
    const std::string_view chunk = text.substr(at, piece);
    const bool can = m.CanAccept(chunk);
    const bool complete = m.IsComplete();
    const bool more = m.CanContinue();
    const bool took = m.Accept(chunk);
    if (took != can) __builtin_trap();
    if (!took) {
      // A refused piece leaves the matcher as it was.
      if (m.IsComplete() != complete || m.CanContinue() != more) __builtin_trap();
      if (m.CanAccept(chunk)) __builtin_trap();
      return false;
    }
    // Something was taken: some parse is alive, finished or not.
    if (!m.IsComplete() && !m.CanContinue()) __builtin_trap();
    // The empty piece is always taken.
    if (!m.Accept("")) __builtin_trap();
  }
  return m.IsComplete();
}

void FuzzGbnf(std::string_view rest, size_t piece) {
  const size_t nul = rest.find('\0');
  const std::string_view gbnf = rest.substr(0, nul);
  const std::string_view text = nul == std::string_view::npos ? rest : rest.substr(nul + 1);
  auto g = Grammar::Parse(gbnf);
  if (!g.ok()) {
    const std::string& msg = g.status().message();
    if (msg.rfind("grammar: ", 0) != 0 || msg.find('\n') != std::string::npos) __builtin_trap();
    return;
  }
  (void)Feed(*g, text, piece);
}

template <typename Json>
void FuzzSchema(std::string_view rest) {
  const Json schema = Json::parse(rest, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return;
  mt::Result<std::string> gbnf = mt::grammar::JsonSchemaToGbnf(schema);
  if (!gbnf.ok()) {
    const std::string& msg = gbnf.status().message();
    if (msg.rfind("json_schema: ", 0) != 0 || msg.find('\n') != std::string::npos) {
      __builtin_trap();
    }
    return;
  }
  auto g = Grammar::Parse(*gbnf);
  if (!g.ok()) __builtin_trap();  // the converter wrote GBNF its own compiler refuses
  // Every document is a non-empty JSON text: a fresh matcher is neither done nor stuck.
  Matcher m(*g);
  if (m.IsComplete() || !m.CanContinue()) __builtin_trap();
}

const std::shared_ptr<const Grammar>& JsonObject() {
  static const std::shared_ptr<const Grammar> g = [] {
    auto parsed = Grammar::Parse(mt::grammar::JsonGbnf());
    if (!parsed.ok()) __builtin_trap();
    return *parsed;
  }();
  return g;
}

void FuzzJsonObject(std::string_view rest, size_t piece) {
  if (!Feed(JsonObject(), rest, piece)) return;
  const nlohmann::json j = nlohmann::json::parse(rest, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) __builtin_trap();
}

void FuzzFilter(std::string_view rest) {
  using mt::grammar::GrammarFilter;
  using mt::grammar::LazyStart;
  static const mt::Tokenizer tok = [] {
    mt::VocabSpec spec = mt::BuiltinBpeVocab(1000, "qwen2", {"<|endoftext|>"});
    spec.eos_id = static_cast<int32_t>(*mt::FindTokenId(spec, "<|endoftext|>"));
    return std::move(mt::Tokenizer::Create(std::move(spec))).value();
  }();
  static const auto vocab = std::make_shared<const mt::grammar::GrammarVocab>(tok);
  if (rest.empty()) return;
  const LazyStart starts[] = {{},
                              {"<@"},
                              {"", "<t>", "</t>"},
                              {"<@", "<t>", "</t>"},
                              {"<@", "<t>", "</t>", true},
                              {"", "<t>", "</t>", true}};
  GrammarFilter f(JsonObject(), vocab, starts[static_cast<uint8_t>(rest[0]) % 6]);
  auto ids = tok.Encode(rest.substr(1), /*add_bos=*/false, /*parse_special=*/false);
  if (!ids.ok()) return;
  std::vector<uint8_t> marked(tok.n_vocab());
  const int32_t eos = *tok.eos_id();
  int steps = 0;
  for (int32_t id : *ids) {
    if (++steps > 48) break;
    f.MarkAllowed(marked);
    for (int32_t t = 0; t < tok.n_vocab(); ++t) {
      if (marked[t] != f.Allows(t)) __builtin_trap();
    }
    if (f.Allows(eos) != f.IsComplete()) __builtin_trap();
    const bool allowed = f.Allows(id);
    if (f.Accept(id) != allowed) __builtin_trap();  // a refused token changes nothing
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t piece = data[0] / 3 % 8 + 1;
  switch (data[0] % 4) {
    case 0:
      FuzzGbnf(rest, piece);
      break;
    case 1:
      if (data[0] & 0x80) {
        FuzzSchema<nlohmann::json>(rest);
      } else {
        FuzzSchema<nlohmann::ordered_json>(rest);
      }
      break;
    case 2:
      FuzzJsonObject(rest, piece);
      break;
    default:
      FuzzFilter(rest);
      break;
  }
  return 0;
}
