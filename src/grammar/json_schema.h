// JSON output as a grammar: GBNF (grammar.h) for "any JSON object" (OpenAI's
// `response_format: {"type": "json_object"}`) and for the documents a JSON Schema accepts
// (`{"type": "json_schema", ...}`), to constrain decoding with a Matcher.
//
// The grammars share one shape:
//   - no whitespace before the root value nor after it ends, so once the document closes the
//     model's only option is to stop;
//   - between tokens at most one space, or a newline and up to 20 spaces or tabs (a
//     pretty-printed document fits; a model cannot pad forever);
//   - strings: "\"" char* "\"", char = any code point but `"`, `\` and U+0000-U+001F, or an
//     escape \" \\ \/ \b \f \n \r \t \uXXXX. A \u escape of a UTF-16 surrogate must be a
//     high one followed by a low one (the pair is one char): what strict JSON parsers take,
//     and what JSON Schema's minLength/maxLength count as one character;
//   - numbers: an integer part of at most 16 digits, no leading zeros, an optional fraction of
//     1-16 digits and an optional exponent of 1-2 digits (so a model cannot run on forever, and
//     no number overflows a double);
//   - object keys are emitted as written (no escapes beyond what JSON requires), enum and
//     const values in their compact JSON form.
//
// Thread-safe: no shared state.
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"

namespace mt::grammar {

// GBNF text (start rule `root`) whose sentences are exactly the JSON objects of the shape
// above: any keys, any nested values. A bare number, string or array is not a sentence.
std::string JsonGbnf();

// GBNF text (start rule `root`) whose every sentence is a JSON document that validates against
// `schema`. It is a subset of the valid documents: properties come in the schema's order (that
// of `ordered_json`; a plain `json` object holds its keys sorted), declared properties are
// never joined by extra ones, and enum/const values take their compact form.
//
// Supported: `type` (a name or an array of names), `properties`, `required`,
// `additionalProperties` (false, true, absent or a schema; without `properties` a schema gives
// an object of string keys to that schema), `items` (a schema), `minItems`/`maxItems`,
// `minLength`/`maxLength` (characters; an escape counts as one), `enum`, `const`, `anyOf`,
// `oneOf` (taken as anyOf), `allOf` with one member, `$ref` to `#/$defs/NAME` or
// `#/definitions/NAME` of `schema` (recursion allowed while each cycle passes through an
// object or array), `{}` and `true`. Without `type`, the types of the keywords present are
// generated (e.g. objects for `properties`); with none, any value. Ignored annotations:
// title, description, $schema, $id, default, examples, $comment, strict, deprecated,
// readOnly, writeOnly, $defs, definitions.
//
// Errors are InvalidArgument, one line, naming the JSON pointer of the schema at fault
// ("/" for the root): "json_schema: unsupported keyword 'pattern' at /properties/name" for
// any other keyword (format, minimum, not, prefixItems, ...); the `false` schema;
// "json_schema: 'required' must be an array of strings at /" and the like for a keyword of
// the wrong type; combinations that would need the intersection of two grammars ($ref,
// anyOf, oneOf or allOf beside a constraining keyword; enum/const beside object or array
// keywords); a $ref that is not local or does not resolve; a $ref cycle that never reaches
// an object or array; nothing left to generate (an enum that none of its values satisfy).
// Limits keep hostile schemas cheap: bounds (minItems, maxItems, minLength, maxLength) up to
// 10000, nesting up to 64 schemas deep, and an output small enough for Grammar::Parse.
Result<std::string> JsonSchemaToGbnf(const nlohmann::ordered_json& schema);
Result<std::string> JsonSchemaToGbnf(const nlohmann::json& schema);

// Several schemas in one grammar (tool calls: one per function's parameters): rule
// `names[i]` matches the documents of `schemas[i]` (each resolves its own $refs), and the
// grammar's start is `root ::= root_body`, which refers to them. The names must be GBNF
// names that are not the shared primitives' (value, object, array, string, char, number,
// integer, boolean, null, ws) and do not start with "s<digits>-" (the schemas' own rules).
// Errors as JsonSchemaToGbnf's, for the first schema at fault.
Result<std::string> JsonSchemasToGbnf(std::span<const nlohmann::ordered_json> schemas,
                                      std::span<const std::string> names,
                                      std::string_view root_body);

}  // namespace mt::grammar
