// Independent oracle for moetier's tokenizer tests: encodes strings with js-tiktoken (npm
// js-tiktoken, OpenAI's tiktoken in JavaScript with its own copy of the encodings' ranks,
// installed by scripts/setup.sh into tools/oracle/node_modules). Never used by the engine.
//
// Usage: node tools/oracle/tiktoken.mjs ENCODING INPUT.json
//   ENCODING is a tiktoken encoding (o200k_base, cl100k_base, ...). INPUT.json is a JSON array
//   of strings. Prints one JSON array with the token ids of each string, as plain text:
//   special-token text in the input is encoded as ordinary text.
import { readFileSync } from "node:fs";

if (process.argv.length !== 4) {
  console.error("usage: node tiktoken.mjs ENCODING INPUT.json");
  process.exit(2);
}
const [encoding, input] = process.argv.slice(2);
const texts = JSON.parse(readFileSync(input, "utf8"));
if (!Array.isArray(texts) || texts.some((t) => typeof t !== "string")) {
  console.error(`${input}: expected a JSON array of strings`);
  process.exit(2);
}
const { getEncoding } = await import("js-tiktoken");
const enc = getEncoding(encoding);
// allowedSpecial none, disallowedSpecial none: special-token text is plain text.
const ids = texts.map((t) => Array.from(enc.encode(t, [], [])));
process.stdout.write(JSON.stringify(ids) + "\n");
