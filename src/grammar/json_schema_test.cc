// JSON Schema to GBNF: the grammar of a schema, compiled and run by a Matcher, takes valid
// documents whole and refuses invalid ones; unsupported or malformed schemas are errors that
// name the keyword and where it is.
#include "grammar/json_schema.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "grammar/grammar.h"

namespace mt::grammar {
namespace {

using OrderedJson = nlohmann::ordered_json;

std::shared_ptr<const Grammar> Compile(const std::string& gbnf) {
  auto g = Grammar::Parse(gbnf);
  EXPECT_TRUE(g.ok()) << g.status().message() << "\n" << gbnf;
  return g.ok() ? *g : nullptr;
}

// The compiled grammar of `schema` (JSON text, keys in written order); null on failure.
std::shared_ptr<const Grammar> FromSchema(std::string_view schema) {
  Result<std::string> gbnf = JsonSchemaToGbnf(OrderedJson::parse(schema));
  EXPECT_TRUE(gbnf.ok()) << gbnf.status().message();
  return gbnf.ok() ? Compile(*gbnf) : nullptr;
}

// Whether `doc` is a whole sentence, fed one byte at a time (so UTF-8 splits too).
bool Accepts(const std::shared_ptr<const Grammar>& g, std::string_view doc) {
  if (!g) return false;
  Matcher m(g);
  for (char c : doc) {
    if (!m.Accept(std::string_view(&c, 1))) return false;
  }
  return m.IsComplete();
}

// Whether `doc` can be fed (it may be an unfinished prefix).
bool AcceptsPrefix(const std::shared_ptr<const Grammar>& g, std::string_view doc) {
  if (!g) return false;
  Matcher m(g);
  return m.Accept(doc);
}

std::string SchemaError(std::string_view schema) {
  Result<std::string> gbnf = JsonSchemaToGbnf(OrderedJson::parse(schema));
  if (gbnf.ok()) return "(converted)";
  EXPECT_EQ(gbnf.status().code(), StatusCode::kInvalidArgument);
  return gbnf.status().message();
}

TEST(JsonSchema, Strings) {
  auto g = FromSchema(R"({"type": "string"})");
  EXPECT_TRUE(Accepts(g, R"("")"));
  EXPECT_TRUE(Accepts(g, R"("plain text")"));
  EXPECT_TRUE(Accepts(g, R"("a\"b\\c\/d\b\f\n\r\t")"));
  EXPECT_TRUE(Accepts(g, "\"h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80\""));  // raw UTF-8
  EXPECT_TRUE(Accepts(g, R"("\u00e9\u20AC\ud83d\ude00")"));                   // a surrogate pair
  EXPECT_FALSE(Accepts(g, R"("unterminated)"));
  EXPECT_FALSE(Accepts(g, "\"raw\nnewline\""));
  EXPECT_FALSE(Accepts(g, R"("\x41")"));          // not a JSON escape
  EXPECT_FALSE(Accepts(g, R"("\u12")"));          // too few hex digits
  EXPECT_FALSE(Accepts(g, R"("\ud83d")"));        // a high surrogate alone
  EXPECT_FALSE(Accepts(g, R"("\ude00")"));        // a low surrogate alone
  EXPECT_FALSE(Accepts(g, R"("\ud83d\u0041")"));  // a high one before a non-surrogate
  EXPECT_FALSE(Accepts(g, R"("\ud83d\ud83d")"));  // a high one before a high one
  EXPECT_FALSE(Accepts(g, R"("a" )"));            // nothing after the document
  EXPECT_FALSE(Accepts(g, R"( "a")"));            // nor before it
  EXPECT_FALSE(Accepts(g, "1"));
}

TEST(JsonSchema, IntegersAndNumbers) {
  auto integer = FromSchema(R"({"type": "integer"})");
  for (const char* ok : {"0", "-0", "7", "-12", "1234567890123456"}) {
    EXPECT_TRUE(Accepts(integer, ok)) << ok;
  }
  for (const char* bad : {"01", "1.5", "1e3", "+1", "-", "12345678901234567", "\"1\"", "true"}) {
    EXPECT_FALSE(Accepts(integer, bad)) << bad;
  }
  auto number = FromSchema(R"({"type": "number"})");
  for (const char* ok :
       {"0", "-3", "1.5", "-0.25e+10", "1E3", "2e-99", "9.5E+99", "0.0000000000000001"}) {
    EXPECT_TRUE(Accepts(number, ok)) << ok;
  }
  for (const char* bad :
       {"01", ".5", "1.", "+1", "1e", "1e100", "1.00000000000000001", "NaN", "null"}) {
    EXPECT_FALSE(Accepts(number, bad)) << bad;
  }
}

TEST(JsonSchema, BooleansNullAndTypeArrays) {
  auto boolean = FromSchema(R"({"type": "boolean"})");
  EXPECT_TRUE(Accepts(boolean, "true"));
  EXPECT_TRUE(Accepts(boolean, "false"));
  EXPECT_FALSE(Accepts(boolean, "null"));
  EXPECT_FALSE(Accepts(boolean, "True"));
  auto null = FromSchema(R"({"type": "null"})");
  EXPECT_TRUE(Accepts(null, "null"));
  EXPECT_FALSE(Accepts(null, "false"));
  auto either = FromSchema(R"({"type": ["string", "null"], "maxLength": 2})");
  EXPECT_TRUE(Accepts(either, "null"));
  EXPECT_TRUE(Accepts(either, R"("ab")"));
  EXPECT_FALSE(Accepts(either, R"("abc")"));
  EXPECT_FALSE(Accepts(either, "0"));
  auto numeric = FromSchema(R"({"type": ["integer", "number"]})");
  EXPECT_TRUE(Accepts(numeric, "1.5"));  // number covers integer
  EXPECT_TRUE(Accepts(numeric, "2"));
}

TEST(JsonSchema, EmptySchemaAndTrueTakeAnyValue) {
  for (const char* schema : {"{}", "true", R"({"description": "anything", "title": "x"})"}) {
    auto g = FromSchema(schema);
    for (const char* ok : {"1", "\"s\"", "null", "[1, {\"a\": [true]}]", "{}", "-0.5e3"}) {
      EXPECT_TRUE(Accepts(g, ok)) << schema << " " << ok;
    }
    EXPECT_FALSE(Accepts(g, "[1,]")) << schema;
    EXPECT_FALSE(Accepts(g, "{'a': 1}")) << schema;
  }
}

TEST(JsonSchema, NestedObjectsAndArrays) {
  auto g = FromSchema(R"({
    "type": "object",
    "properties": {
      "name": {"type": "string"},
      "points": {"type": "array", "items": {
        "type": "object",
        "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
        "required": ["x", "y"]}},
      "meta": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    },
    "required": ["name", "points", "meta"]})");
  EXPECT_TRUE(Accepts(g, R"({"name":"a","points":[],"meta":{"ok":true}})"));
  EXPECT_TRUE(Accepts(g, R"({"name": "a", "points": [{"x": 1, "y": 2.5}, {"x": -1, "y": 0}],)"
                         R"( "meta": {"ok": false}})"));
  EXPECT_TRUE(Accepts(g,
                      "{\n  \"name\": \"a\",\n  \"points\": [\n    {\"x\": 1, \"y\": 2}\n"
                      "  ],\n  \"meta\": {\"ok\": true}\n}"));
  EXPECT_FALSE(Accepts(g, R"({"name":"a","points":[{"x":1}],"meta":{"ok":true}})"));
  EXPECT_FALSE(Accepts(g, R"({"name":"a","points":[{"x":1,"y":"2"}],"meta":{"ok":true}})"));
  EXPECT_FALSE(Accepts(g, R"({"name":"a","points":{},"meta":{"ok":true}})"));
  EXPECT_FALSE(Accepts(g, R"({"name":"a","points":[],"meta":{"ok":1}})"));
  EXPECT_FALSE(Accepts(g, R"({"name":"a","points":[],"meta":{"ok":true},"extra":1})"));
}

// Properties a (optional), b (required), c, d (optional): every subset with b, in order.
TEST(JsonSchema, OptionalPropertiesInEveryCombination) {
  auto g = FromSchema(R"({"type": "object", "properties": {
      "a": {"type": "integer"}, "b": {"type": "integer"},
      "c": {"type": "integer"}, "d": {"type": "integer"}},
    "required": ["b"]})");
  const char* names[] = {"a", "b", "c", "d"};
  for (int mask = 0; mask < 16; ++mask) {
    std::string doc = "{";
    for (int i = 0; i < 4; ++i) {
      if (!(mask & (1 << i))) continue;
      if (doc.size() > 1) doc += ", ";
      doc += std::string("\"") + names[i] + "\": " + std::to_string(i);
    }
    doc += "}";
    EXPECT_EQ(Accepts(g, doc), (mask & 2) != 0) << doc;
  }
  EXPECT_FALSE(Accepts(g, R"({"b":1,"a":0})"));  // out of order
  EXPECT_FALSE(Accepts(g, R"({"b":1,})"));       // trailing comma
  EXPECT_FALSE(Accepts(g, R"({,"b":1})"));       // leading comma
  EXPECT_FALSE(Accepts(g, R"({"a":0,,"b":1})"));
  EXPECT_FALSE(Accepts(g, R"({"a":0 "b":1})"));  // missing comma
  EXPECT_FALSE(Accepts(g, R"({"b":1,"b":1})"));

  auto all_optional = FromSchema(R"({"properties": {
      "a": {"type": "null"}, "b": {"type": "null"}, "c": {"type": "null"}}})");
  for (int mask = 0; mask < 8; ++mask) {
    std::string doc = "{";
    for (int i = 0; i < 3; ++i) {
      if (!(mask & (1 << i))) continue;
      if (doc.size() > 1) doc += ",";
      doc += std::string("\"") + names[i] + "\":null";
    }
    doc += "}";
    EXPECT_TRUE(Accepts(all_optional, doc)) << doc;
  }
  EXPECT_FALSE(Accepts(all_optional, R"({"c":null,"a":null})"));
  EXPECT_FALSE(Accepts(all_optional, "null"));  // `properties` alone: objects are generated
}

TEST(JsonSchema, PropertiesFollowTheKeyOrderOfTheJsonType) {
  const char* schema =
      R"({"properties": {"zeta": {"type": "integer"}, "alpha": {"type": "integer"}},
          "required": ["zeta", "alpha"]})";
  auto ordered = Compile(JsonSchemaToGbnf(OrderedJson::parse(schema)).value());
  EXPECT_TRUE(Accepts(ordered, R"({"zeta":1,"alpha":2})"));
  EXPECT_FALSE(Accepts(ordered, R"({"alpha":2,"zeta":1})"));
  auto sorted = Compile(JsonSchemaToGbnf(nlohmann::json::parse(schema)).value());
  EXPECT_TRUE(Accepts(sorted, R"({"alpha":2,"zeta":1})"));
  EXPECT_FALSE(Accepts(sorted, R"({"zeta":1,"alpha":2})"));
}

TEST(JsonSchema, AdditionalProperties) {
  auto closed = FromSchema(R"({"type": "object", "additionalProperties": false})");
  EXPECT_TRUE(Accepts(closed, "{}"));
  EXPECT_TRUE(Accepts(closed, "{ }"));
  EXPECT_FALSE(Accepts(closed, R"({"a":1})"));

  auto open = FromSchema(R"({"type": "object"})");
  EXPECT_TRUE(Accepts(open, R"({"a": [1, {"b": null}], "c": "d"})"));
  EXPECT_FALSE(Accepts(open, "[]"));

  auto map = FromSchema(R"({"type": "object", "additionalProperties": {"type": "integer"}})");
  EXPECT_TRUE(Accepts(map, "{}"));
  EXPECT_TRUE(Accepts(map, R"({"x": 1, "y\"z": -2})"));
  EXPECT_FALSE(Accepts(map, R"({"x": 1.5})"));
  EXPECT_FALSE(Accepts(map, R"({"x": "1"})"));

  // A required name that is not declared takes additionalProperties' schema.
  auto named = FromSchema(R"({"required": ["id"], "additionalProperties": {"type": "string"}})");
  EXPECT_TRUE(Accepts(named, R"({"id": "x"})"));
  EXPECT_FALSE(Accepts(named, R"({"id": 1})"));
  EXPECT_FALSE(Accepts(named, "{}"));
}

TEST(JsonSchema, EnumAndConstWithQuotesAndUnicode) {
  auto g = FromSchema(
      R"({"enum": ["plain", "say \"hi\"", "back\\slash", "caf\u00e9", "日本", 42, -1.5, true,
                   null, [1, "x"], {"k": {"n": null}}]})");
  for (const char* ok : {R"("plain")", R"("say \"hi\"")", R"("back\\slash")", "\"caf\xc3\xa9\"",
                         "\"\xe6\x97\xa5\xe6\x9c\xac\"", "42", "-1.5", "true", "null", R"([1,"x"])",
                         R"({"k":{"n":null}})"}) {
    EXPECT_TRUE(Accepts(g, ok)) << ok;
  }
  for (const char* bad :
       {R"("Plain")", R"("say "hi"")", "43", "false", R"("plain" )", "{}", R"("日")"}) {
    EXPECT_FALSE(Accepts(g, bad)) << bad;
  }
  auto c = FromSchema(R"({"const": "x\ny"})");
  EXPECT_TRUE(Accepts(c, R"("x\ny")"));
  EXPECT_FALSE(Accepts(c, "\"x\ny\""));  // a raw newline is not JSON
  // The other keywords filter the values: type, and the bounds of their type.
  auto typed = FromSchema(R"({"type": "string", "maxLength": 3, "enum": ["a", 1, "abcd", "é"]})");
  EXPECT_TRUE(Accepts(typed, R"("a")"));
  EXPECT_TRUE(Accepts(typed, "\"\xc3\xa9\""));
  EXPECT_FALSE(Accepts(typed, "1"));
  EXPECT_FALSE(Accepts(typed, R"("abcd")"));
  auto long_enough = FromSchema(R"({"enum": ["", "ab", 7], "minLength": 1})");
  EXPECT_FALSE(Accepts(long_enough, R"("")"));
  EXPECT_TRUE(Accepts(long_enough, R"("ab")"));
  EXPECT_TRUE(Accepts(long_enough, "7"));  // minLength speaks of strings only
  auto both = FromSchema(R"({"enum": ["a", "b"], "const": "b"})");
  EXPECT_TRUE(Accepts(both, R"("b")"));
  EXPECT_FALSE(Accepts(both, R"("a")"));
}

TEST(JsonSchema, AnyOfOneOfAndAllOf) {
  auto any = FromSchema(R"({"anyOf": [
      {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}},
       "required": ["kind", "r"], "additionalProperties": false},
      {"type": "object", "properties": {"kind": {"const": "square"}, "side": {"type": "number"}},
       "required": ["kind", "side"]},
      {"type": "null"}]})");
  EXPECT_TRUE(Accepts(any, R"({"kind":"circle","r":1})"));
  EXPECT_TRUE(Accepts(any, R"({"kind":"square","side":2})"));
  EXPECT_TRUE(Accepts(any, "null"));
  EXPECT_FALSE(Accepts(any, R"({"kind":"circle","side":2})"));
  EXPECT_FALSE(Accepts(any, R"({"kind":"square","r":1})"));
  auto one = FromSchema(R"({"oneOf": [{"type": "integer"}, {"type": "string"}]})");
  EXPECT_TRUE(Accepts(one, "1"));
  EXPECT_TRUE(Accepts(one, R"("1")"));
  EXPECT_FALSE(Accepts(one, "true"));
  auto all = FromSchema(R"({"allOf": [{"type": "boolean"}], "description": "wrapped"})");
  EXPECT_TRUE(Accepts(all, "false"));
  EXPECT_FALSE(Accepts(all, "0"));
}

TEST(JsonSchema, RecursiveRefsMakeATree) {
  for (const std::string defs : {"$defs", "definitions"}) {
    std::string schema = R"({"$ref": "#/DEFS/node", "DEFS": {"node": {"type": "object",
        "properties": {"value": {"type": "integer"},
                       "children": {"type": "array", "items": {"$ref": "#/DEFS/node"}}},
        "required": ["value"], "additionalProperties": false}}})";
    for (size_t at; (at = schema.find("DEFS")) != std::string::npos;) {
      schema.replace(at, 4, defs);
    }
    auto g = FromSchema(schema);
    EXPECT_TRUE(Accepts(g, R"({"value":1})")) << defs;
    EXPECT_TRUE(Accepts(g, R"({"value":1,"children":[]})"));
    EXPECT_TRUE(Accepts(g, R"({"value":1,"children":[{"value":2,"children":[{"value":3}]},)"
                           R"({"value":4}]})"));
    EXPECT_FALSE(Accepts(g, R"({"value":1,"children":[{"children":[]}]})"));
    EXPECT_FALSE(Accepts(g, R"({"value":1,"children":[{"value":2,"children":[{"value":"3"}]}]})"));
  }
  // Mutual recursion through $defs that themselves only alias.
  auto g = FromSchema(R"({"$ref": "#/$defs/a", "$defs": {
      "a": {"anyOf": [{"$ref": "#/$defs/b"}, {"type": "null"}]},
      "b": {"type": "array", "items": {"$ref": "#/$defs/a"}}}})");
  EXPECT_TRUE(Accepts(g, "[[null, []], null]"));
  EXPECT_FALSE(Accepts(g, "[[1]]"));
}

TEST(JsonSchema, DefinitionsWhoseNamesLookAlikeStayApart) {
  // "a b", "a-b" and "a/b" all make the rule name def-a-b; each keeps its own schema.
  auto g = FromSchema(R"({"type": "array", "items": {"anyOf": [
      {"$ref": "#/$defs/a b"}, {"$ref": "#/$defs/a-b"}, {"$ref": "#/$defs/a~1b"}]},
    "$defs": {"a b": {"type": "integer"}, "a-b": {"type": "boolean"}, "a/b": {"const": "s"},
              "": {"type": "null"}}})");
  EXPECT_TRUE(Accepts(g, R"([1, true, "s"])"));
  EXPECT_FALSE(Accepts(g, R"(["t"])"));
  EXPECT_FALSE(Accepts(g, "[null]"));
}

TEST(JsonSchema, ItemBounds) {
  auto g = FromSchema(R"({"type": "array", "items": {"type": "integer"},
                          "minItems": 2, "maxItems": 3})");
  EXPECT_FALSE(Accepts(g, "[]"));
  EXPECT_FALSE(Accepts(g, "[1]"));
  EXPECT_TRUE(Accepts(g, "[1,2]"));
  EXPECT_TRUE(Accepts(g, "[1, 2, 3]"));
  EXPECT_FALSE(Accepts(g, "[1,2,3,4]"));
  EXPECT_FALSE(AcceptsPrefix(g, "[1,2,3,"));
  auto none = FromSchema(R"({"type": "array", "maxItems": 0})");
  EXPECT_TRUE(Accepts(none, "[]"));
  EXPECT_FALSE(Accepts(none, "[1]"));
  auto at_least_one = FromSchema(R"({"type": "array", "minItems": 1})");
  EXPECT_FALSE(Accepts(at_least_one, "[]"));
  EXPECT_TRUE(Accepts(at_least_one, R"([1, "a", [], {}])"));
  auto exactly_one = FromSchema(R"({"type": "array", "minItems": 1, "maxItems": 1})");
  EXPECT_TRUE(Accepts(exactly_one, "[true]"));
  EXPECT_FALSE(Accepts(exactly_one, "[true,true]"));
}

TEST(JsonSchema, LengthBoundsCountEscapesAsOneCharacter) {
  auto g = FromSchema(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  EXPECT_FALSE(Accepts(g, R"("")"));
  EXPECT_FALSE(Accepts(g, R"("a")"));
  EXPECT_TRUE(Accepts(g, R"("ab")"));
  EXPECT_TRUE(Accepts(g, R"("abc")"));
  EXPECT_FALSE(Accepts(g, R"("abcd")"));
  EXPECT_TRUE(Accepts(g, R"("\n\"")"));                     // 2 escapes: 2 characters
  EXPECT_TRUE(Accepts(g, R"("\u00e9\ud83d\ude00x")"));      // a surrogate pair is one
  EXPECT_TRUE(Accepts(g, "\"\xc3\xa9\xf0\x9f\x98\x80\""));  // 2 code points, 6 bytes
  EXPECT_FALSE(Accepts(g, R"("\u0041")"));                  // 1 character
  EXPECT_FALSE(Accepts(g, R"("\\\\\\\\")"));                // 4 characters
  auto empty = FromSchema(R"({"type": "string", "maxLength": 0})");
  EXPECT_TRUE(Accepts(empty, R"("")"));
  EXPECT_FALSE(Accepts(empty, R"(" ")"));
  auto at_least = FromSchema(R"({"minLength": 3})");  // no type: strings
  EXPECT_FALSE(Accepts(at_least, R"("ab")"));
  EXPECT_TRUE(Accepts(at_least, R"("abcdefghijklmnopqrstuvwxyz")"));
}

TEST(JsonSchema, WhitespaceIsBoundedAndNeverTrails) {
  auto g = FromSchema(R"({"type": "object", "properties": {"a": {"type": "array"}}})");
  EXPECT_TRUE(Accepts(g, "{\n\t\"a\" : [ 1 ,\n\t\t2 ]\n}"));
  EXPECT_TRUE(Accepts(g, "{\n" + std::string(20, ' ') + "\"a\": []}"));
  EXPECT_FALSE(Accepts(g, "{\n" + std::string(21, ' ') + "\"a\": []}"));
  EXPECT_FALSE(Accepts(g, "{  \"a\": []}"));  // two spaces without a newline
  EXPECT_FALSE(Accepts(g, "{\"a\": []}\n"));
  Matcher m(g);
  ASSERT_TRUE(m.Accept("{\"a\": [ ]}"));
  EXPECT_TRUE(m.IsComplete());
  EXPECT_FALSE(m.CanContinue());  // the document closed: the only option is to stop
}

TEST(JsonSchema, JsonObjectGrammar) {
  auto g = Compile(JsonGbnf());
  for (const char* ok : {"{}", R"({"a":1})", R"({"a": {"b": [1, 2.5, "c", null, true]}})",
                         "{\n  \"x\": [\n    {}\n  ]\n}", R"({"":""})"}) {
    EXPECT_TRUE(Accepts(g, ok)) << ok;
  }
  for (const char* bad : {"1", "[]", "[{}]", R"("s")", "null", R"({"a":})", R"({"a":1,})",
                          R"({a:1})", " {}", "{} "}) {
    EXPECT_FALSE(Accepts(g, bad)) << bad;
  }
  Matcher m(g);
  EXPECT_FALSE(m.CanAccept("["));
  EXPECT_TRUE(m.CanAccept("{"));
}

TEST(JsonSchema, ErrorsNameTheKeywordAndWhere) {
  EXPECT_EQ(SchemaError(R"({"type": "object", "properties": {
                "name": {"type": "string", "pattern": "^a"}}})"),
            "json_schema: unsupported keyword 'pattern' at /properties/name");
  EXPECT_EQ(SchemaError(R"({"type": "array", "items": {"type": "integer", "minimum": 0}})"),
            "json_schema: unsupported keyword 'minimum' at /items");
  EXPECT_EQ(SchemaError(R"({"properties": {"a/b~c": {"format": "date"}}})"),
            "json_schema: unsupported keyword 'format' at /properties/a~1b~0c");
  EXPECT_EQ(SchemaError(R"({"required": "a"})"),
            "json_schema: 'required' must be an array of strings at /");
  EXPECT_EQ(SchemaError(R"({"anyOf": [{}, {"type": "strin"}]})"),
            "json_schema: unknown type 'strin' at /anyOf/1");
  EXPECT_EQ(SchemaError(R"({"type": "array", "minItems": 5, "maxItems": 3})"),
            "json_schema: minItems 5 > maxItems 3 at /");
  EXPECT_EQ(SchemaError(R"({"type": "string", "minLength": -1})"),
            "json_schema: 'minLength' must be a non-negative integer at /");
  EXPECT_EQ(SchemaError(R"({"type": "string", "maxLength": 100000})"),
            "json_schema: 'maxLength' 100000 is above the limit 10000 at /");
  EXPECT_EQ(SchemaError(R"({"$ref": "#/$defs/missing", "$defs": {}})"),
            "json_schema: $ref '#/$defs/missing' does not resolve at /");
  EXPECT_EQ(SchemaError(R"({"items": {"$ref": "https://example.com/s.json"}})"),
            "json_schema: $ref 'https://example.com/s.json' is not supported (only "
            "#/$defs/NAME and #/definitions/NAME) at /items");
  EXPECT_EQ(SchemaError(R"({"properties": {"a": false}})"),
            "json_schema: the false schema (no value) is not supported at /properties/a");
  EXPECT_EQ(SchemaError(R"({"type": "object", "anyOf": [{"type": "object"}]})"),
            "json_schema: 'anyOf' alongside 'type' is not supported at /");
  EXPECT_EQ(SchemaError(R"({"allOf": [{}, {}]})"),
            "json_schema: 'allOf' with 2 members is not supported (only one) at /");
  EXPECT_EQ(SchemaError(R"({"enum": [1, 2], "type": "string"})"),
            "json_schema: no value of 'enum' satisfies the schema at /");
  EXPECT_EQ(SchemaError(R"({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}})"),
            "json_schema: $ref cycle through '#/$defs/a' that never enters an object or array "
            "at /$defs/a");
  EXPECT_EQ(SchemaError(R"({"required": ["a"], "additionalProperties": false})"),
            "json_schema: required property 'a' is not in 'properties' and "
            "additionalProperties is false at /");
  EXPECT_EQ(SchemaError("3"), "json_schema: a schema must be an object or a boolean at /");
  for (const char* unsupported : {"not", "if", "prefixItems", "multipleOf", "uniqueItems",
                                  "patternProperties", "exclusiveMinimum", "maximum"}) {
    const std::string schema =
        std::string(R"({"properties": {"p": {")") + unsupported + R"(": 1}}})";
    EXPECT_EQ(SchemaError(schema), std::string("json_schema: unsupported keyword '") + unsupported +
                                       "' at /properties/p");
  }
}

TEST(JsonSchema, HostileSchemasStayCheap) {
  // Deep nesting: an error, not a stack overflow.
  std::string deep;
  for (int i = 0; i < 5000; ++i) deep += R"({"items":)";
  deep += "{}";
  for (int i = 0; i < 5000; ++i) deep += "}";
  EXPECT_NE(SchemaError(deep).find("nested deeper than 64"), std::string::npos);
  // Many large bounds: an error before the grammar would be too large to compile.
  std::string wide = R"({"type": "object", "properties": {)";
  for (int i = 0; i < 20; ++i) {
    wide += (i ? "," : "") + std::string("\"p") + std::to_string(i) +
            R"(": {"type": "string", "maxLength": 10000})";
  }
  wide += "}}";
  EXPECT_NE(SchemaError(wide).find("too large"), std::string::npos);
  // Just inside the limits: compiles.
  auto big = FromSchema(R"({"type": "array", "maxItems": 10000, "items":
                              {"type": "string", "maxLength": 10000}})");
  EXPECT_TRUE(Accepts(big, R"(["a","b"])"));
  // An unguarded $ref cycle through anyOf would be left recursion: refused up front.
  EXPECT_NE(SchemaError(R"({"$ref": "#/$defs/a", "$defs": {
                "a": {"anyOf": [{"$ref": "#/$defs/b"}, {"type": "null"}]},
                "b": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "string"}]}}})")
                .find("$ref cycle"),
            std::string::npos);
}

// Walks the grammar at random over a small alphabet until a document completes, then checks
// the document with an independent reading: nlohmann's parser and the schema's rules by hand.
TEST(JsonSchema, SeveralSchemasInOneGrammar) {
  // Two schemas with a definition of the same name each: their rules stay apart.
  const std::vector<nlohmann::ordered_json> schemas = {
      nlohmann::ordered_json::parse(R"({"$defs": {"v": {"type": "integer"}},
          "type": "object", "properties": {"x": {"$ref": "#/$defs/v"}}, "required": ["x"]})"),
      nlohmann::ordered_json::parse(R"({"$defs": {"v": {"type": "boolean"}},
          "type": "array", "items": {"$ref": "#/$defs/v"}, "maxItems": 2})"),
  };
  const std::vector<std::string> names = {"first", "second"};
  Result<std::string> gbnf = JsonSchemasToGbnf(schemas, names, R"("A" first | "B" second)");
  ASSERT_TRUE(gbnf.ok()) << gbnf.status().message();
  auto g = Compile(*gbnf);
  ASSERT_NE(g, nullptr) << *gbnf;
  EXPECT_TRUE(Accepts(g, R"(A{"x": 5})"));
  EXPECT_TRUE(Accepts(g, "B[true, false]"));
  EXPECT_FALSE(Accepts(g, R"(A{"x": true})"));
  EXPECT_FALSE(Accepts(g, "B[1]"));
  EXPECT_FALSE(Accepts(g, "B[true, true, true]"));
  // An error names the schema's own pointer.
  const std::vector<nlohmann::ordered_json> bad = {
      nlohmann::ordered_json::parse(R"({"type": "string", "format": "date"})")};
  Result<std::string> e = JsonSchemasToGbnf(bad, std::vector<std::string>{"a"}, "a");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().message(), "json_schema: unsupported keyword 'format' at /");
}

TEST(JsonSchema, RandomDocumentsValidate) {
  auto g = FromSchema(R"({"type": "object", "properties": {
      "id": {"type": "integer"},
      "name": {"type": "string", "minLength": 1, "maxLength": 4},
      "tags": {"type": "array", "items": {"enum": ["a", "b\"c"]}, "maxItems": 3},
      "child": {"$ref": "#/$defs/node"},
      "score": {"type": ["number", "null"]}},
    "required": ["name", "tags"], "additionalProperties": false,
    "$defs": {"node": {"type": "object", "properties": {
      "v": {"type": "boolean"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["v"]}}})");
  ASSERT_TRUE(g);
  const std::string alphabet = "{}[]\",: \n-.0123456789eabcdefghiklmnorstuv\\/\xc3\xa9";
  const std::vector<std::string> symbols = [&] {
    std::vector<std::string> s;
    for (size_t i = 0; i < alphabet.size(); ++i) {
      if (static_cast<unsigned char>(alphabet[i]) >= 0xc0) {
        s.push_back(alphabet.substr(i, 2));
        ++i;
      } else {
        s.push_back(alphabet.substr(i, 1));
      }
    }
    return s;
  }();
  auto count_code_points = [](const std::string& s) {
    size_t n = 0;
    for (char c : s) n += (static_cast<unsigned char>(c) & 0xc0) != 0x80;
    return n;
  };
  std::function<bool(const nlohmann::json&)> valid_node = [&](const nlohmann::json& n) {
    if (!n.is_object() || !n.contains("v") || !n["v"].is_boolean()) return false;
    if (n.contains("kids")) {
      if (!n["kids"].is_array()) return false;
      for (const auto& k : n["kids"]) {
        if (!valid_node(k)) return false;
      }
    }
    return true;
  };
  std::mt19937 rng(1234);
  int completed = 0;
  for (int walk = 0; walk < 60; ++walk) {
    Matcher m(g);
    std::string doc;
    for (int step = 0; step < 300 && m.CanContinue(); ++step) {
      std::vector<const std::string*> allowed;
      for (const std::string& s : symbols) {
        if (m.CanAccept(s)) allowed.push_back(&s);
      }
      ASSERT_FALSE(allowed.empty()) << "dead end after: " << doc;
      // Later in the walk, prefer what closes strings, arrays and objects.
      const std::string* pick = allowed[rng() % allowed.size()];
      if (step > 40 && rng() % 4 != 0) {
        for (const char* closer : {"\"", "]", "}"}) {
          for (const std::string* a : allowed) {
            if (*a == closer) pick = a;
          }
        }
      }
      ASSERT_TRUE(m.Accept(*pick));
      doc += *pick;
    }
    if (!m.IsComplete()) continue;
    ++completed;
    const nlohmann::json j = nlohmann::json::parse(doc, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << doc;
    ASSERT_TRUE(j.is_object()) << doc;
    for (const auto& [key, value] : j.items()) {
      EXPECT_TRUE(key == "id" || key == "name" || key == "tags" || key == "child" || key == "score")
          << doc;
    }
    ASSERT_TRUE(j.contains("name") && j["name"].is_string()) << doc;
    const size_t length = count_code_points(j["name"].get<std::string>());
    EXPECT_TRUE(length >= 1 && length <= 4) << doc;
    ASSERT_TRUE(j.contains("tags") && j["tags"].is_array()) << doc;
    EXPECT_LE(j["tags"].size(), 3u) << doc;
    for (const auto& t : j["tags"]) EXPECT_TRUE(t == "a" || t == "b\"c") << doc;
    if (j.contains("id")) EXPECT_TRUE(j["id"].is_number_integer()) << doc;
    if (j.contains("score")) EXPECT_TRUE(j["score"].is_number() || j["score"].is_null()) << doc;
    if (j.contains("child")) EXPECT_TRUE(valid_node(j["child"])) << doc;
  }
  EXPECT_GT(completed, 20);
}

}  // namespace
}  // namespace mt::grammar
