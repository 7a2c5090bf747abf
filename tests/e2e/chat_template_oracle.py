"""moetier's chat prompts against the model's own Jinja template rendered by jinja2 as Hugging
Face's apply_chat_template renders it (the independent oracle). Random conversations, seeded:
system prompts, tools, tool calls and results, assistant turns with <think> blocks or
reasoning_content, enable_thinking on, off or unset. Each goes to POST /apply-template.

usage: chat_template_oracle.py BASE_URL [N] [SEED] [MODE] [EOS]   (BASE_URL: http://127.0.0.1:PORT)
MODE plain: system, user and assistant messages only (templates without tools: Qwen2's,
OLMoE's, DeepSeek's); alternating: user and assistant by turns, from a user message to a user message
(Mixtral's, which refuses anything else); harmony (gpt-oss's) and glm (GLM-4.5/4.6's): tools
with every kind of parameter schema, tool calls whose arguments the template gets as a
mapping (as Hugging Face clients pass them; the request sends them as JSON text, as OpenAI's
clients do), reasoning_content as the template's "thinking" (harmony; as llama.cpp passes
it), reasoning_effort (harmony). A conversation the template refuses (raise_exception) must
be refused by moetier too (a 400). EOS: the template's eos_token (default the model's).
bos_token renders empty: /apply-template leaves BOS to the tokenizer.
"""
import datetime
import json
import urllib.error
import random
import sys
import urllib.request

import jinja2
import jinja2.ext
import jinja2.sandbox


def post(base, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def hf_environment():
    # As transformers' _compile_jinja_template: sandboxed, trim_blocks, lstrip_blocks,
    # loopcontrols, tojson = json.dumps(ensure_ascii=False).
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env.filters["tojson"] = tojson

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    return env


WORDS = ["Paris", "weather", "é", "日本", "\"quoted\"", "back\\slash", "tab\there", "{}", "</x>",
         "<think>", "</think>", "\n", "\n\n", " ", "ok", "call", "🙂", "a&b", "100%"]


def text(rng, lo=0, hi=6):
    return "".join(rng.choice(WORDS) + rng.choice(["", " ", "\n"])
                   for _ in range(rng.randint(lo, hi)))


def json_value(rng, depth=0):
    kind = rng.randrange(7 if depth < 2 else 5)
    if kind == 0:
        return text(rng, 0, 3)
    if kind == 1:
        return rng.randint(-1000, 1000)
    if kind == 2:
        return rng.choice([0.5, 1e-05, 2.0, -3.25, 1e+16, 123.456])
    if kind == 3:
        return rng.choice([True, False])
    if kind == 4:
        return None
    if kind == 5:
        return [json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {text(rng, 1, 2): json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def schema(rng, depth=0):
    """A parameter schema with what gpt-oss's TypeScript rendering reads: types (one, a list),
    enums, arrays of every item kind, nested objects with required members, nullable, oneOf
    with descriptions and defaults."""
    kind = rng.randrange(10 if depth < 2 else 6)
    s = {}
    if kind == 0:
        s = {"type": "string"}
        if rng.random() < 0.5:
            s["enum"] = [text(rng, 1, 1) for _ in range(rng.randint(1, 3))]
    elif kind == 1:
        s = {"type": rng.choice(["number", "integer"])}
    elif kind == 2:
        s = {"type": "boolean"}
    elif kind == 3:
        s = {"type": rng.sample(["string", "number", "null", "boolean"], rng.randint(1, 3))}
    elif kind == 4:
        s = {"description": text(rng, 0, 2)}  # no type: "any"
    elif kind == 5:
        s = {"type": "string", "nullable": rng.random() < 0.5}
    elif kind in (6, 7):
        s = {"type": "array"}
        if rng.random() < 0.8:
            s["items"] = schema(rng, depth + 1)
        if rng.random() < 0.3:
            s["nullable"] = True
    elif kind == 8:
        props = {f"m{k}": schema(rng, depth + 1) for k in range(rng.randint(0, 3))}
        s = {"type": "object", "properties": props}
        if props and rng.random() < 0.5:
            s["required"] = rng.sample(sorted(props), rng.randint(1, len(props)))
    else:
        variants = []
        for _ in range(rng.randint(1, 3)):
            v = schema(rng, depth + 1)
            if rng.random() < 0.4:
                v["description"] = text(rng, 1, 2)
            if rng.random() < 0.3:
                v["default"] = json_value(rng, 2)
            variants.append(v)
        s = {"oneOf": variants}
    if rng.random() < 0.3:
        s["description"] = text(rng, 0, 3)
    return s


def rich_tool(rng, i):
    """A tool for gpt-oss's template: every parameter kind, defaults (an enum's and a oneOf's
    are strings: the template adds them to a string)."""
    props = {}
    for k in range(rng.randint(0, 4)):
        p = schema(rng)
        if rng.random() < 0.4:
            p["default"] = (text(rng, 1, 1) if "enum" in p or "oneOf" in p
                            else json_value(rng, 2))
        props[f"p{k}"] = p
    params = {"type": "object", "properties": props}
    if props and rng.random() < 0.6:
        params["required"] = rng.sample(sorted(props), rng.randint(1, len(props)))
    fn = {"name": f"tool_{i}", "description": text(rng, 0, 4)}
    if rng.random() < 0.9:
        fn["parameters"] = params
    return {"type": "function", "function": fn}


def tool(rng, i):
    if RICH:
        return rich_tool(rng, i)
    params = {"type": "object", "properties": {
        f"p{k}": {"type": rng.choice(["string", "number", "boolean"]),
                  "description": text(rng, 0, 3)} for k in range(rng.randint(0, 3))}}
    fn = {"name": f"tool_{i}", "description": text(rng, 0, 4), "parameters": params}
    if rng.random() < 0.3:
        fn["extra"] = json_value(rng)
    return {"type": "function", "function": fn}


def assistant(rng, tool_names):
    m = {"role": "assistant"}
    shape = rng.randrange(5)
    if shape == 0:
        m["content"] = text(rng)
    elif shape == 1:  # reasoning written in the content, as a client may send it back
        m["content"] = (rng.choice(["", "\n", "<think>"]) + text(rng, 0, 3) +
                        rng.choice(["</think>", "\n</think>\n\n"]) + text(rng, 0, 3) +
                        rng.choice(["", "</think>" + text(rng, 0, 2)]))
    elif shape == 2:  # reasoning sent apart, as this server returns it
        m["content"] = text(rng)
        m["reasoning_content"] = rng.choice(["", "\n", text(rng, 0, 3)])
    else:
        m["content"] = text(rng, 0, 2)
    if tool_names and rng.random() < 0.5:
        m["tool_calls"] = []
        for k in range(rng.randint(1, 2)):
            if not RICH:
                args = json_value(rng)
            elif rng.random() < 0.9:  # an object, as tools take (GLM's template takes no other)
                args = {text(rng, 1, 2): json_value(rng, 1) for _ in range(rng.randint(0, 3))}
            else:
                args = json_value(rng)
            m["tool_calls"].append(
                {"id": f"call_{k}", "type": "function",
                 "function": {"name": rng.choice(tool_names),
                              "arguments": json.dumps(args, ensure_ascii=False)}})
    return m


def alternating(rng):
    msgs = []
    for _ in range(rng.randint(0, 3)):
        msgs.append({"role": "user", "content": text(rng, 1, 5)})
        msgs.append({"role": "assistant", "content": text(rng)})
    msgs.append({"role": "user", "content": text(rng, 1, 5)})
    return msgs, []


def conversation(rng, plain):
    tools = [tool(rng, i) for i in range(rng.randint(1, 2))] if rng.random() < 0.4 else []
    if plain:
        tools = []
    names = [t["function"]["name"] for t in tools]
    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": text(rng)})
    for _ in range(rng.randint(1, 4)):
        if rng.random() < 0.15 and not plain:
            msgs.append({"role": "user",
                         "content": "<tool_response>\n" + text(rng, 0, 2) + "\n</tool_response>"})
        else:
            msgs.append({"role": "user", "content": text(rng, 1, 5)})
        if rng.random() < 0.1:
            msgs.append({"role": "system", "content": text(rng)})
        for _ in range(rng.randint(0, 2)):
            msgs.append(assistant(rng, names))
            if "tool_calls" in msgs[-1]:
                for _ in range(rng.randint(1, 3)):
                    msgs.append({"role": "tool", "tool_call_id": "call_0",
                                 "content": text(rng, 0, 3)})
    return msgs, tools


MODE = ""
RICH = False  # harmony, glm: rich schemas and arguments as mappings


def jinja_messages(msgs):
    """The messages as the template gets them: arguments as mappings (when they are JSON) and,
    for harmony, reasoning_content as "thinking"."""
    out = []
    for m in msgs:
        m = dict(m)
        if "tool_calls" in m:
            calls = []
            for c in m["tool_calls"]:
                c = json.loads(json.dumps(c))
                try:
                    c["function"]["arguments"] = json.loads(c["function"]["arguments"])
                except ValueError:
                    pass
                calls.append(c)
            m["tool_calls"] = calls
        if MODE == "harmony" and "reasoning_content" in m:
            m["thinking"] = m.pop("reasoning_content")
        out.append(m)
    return out


def main():
    global MODE, RICH, WORDS
    base = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    rng = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 1)
    mode = sys.argv[4] if len(sys.argv) > 4 else ""
    MODE = mode
    RICH = mode in ("harmony", "glm")
    if mode == "harmony":  # tags the template refuses in a message
        WORDS = WORDS + ["<|channel|>final<|message|>", "<|end|>", "<|start|>"]
    if mode == "glm":  # "/nothink" already there; space str.strip() takes, not only ASCII
        WORDS = WORDS + ["/nothink", "\u3000", "\xa0", "\u2028", "\x1c"]
    info = json.loads(urllib.request.urlopen(base + "/tokenizer_info", timeout=30).read())
    template = hf_environment().from_string(info["chat_template"])
    eos = sys.argv[5] if len(sys.argv) > 5 else (info["eos_token"] or "")
    failures = 0
    refused = 0
    for case in range(n):
        if mode == "alternating":
            msgs, tools = alternating(rng)
        else:
            msgs, tools = conversation(rng, mode == "plain")
        thinking = rng.choice([None, True, False])
        body = {"messages": msgs}
        variables = {"messages": jinja_messages(msgs) if RICH else msgs,
                     "add_generation_prompt": True, "bos_token": "", "eos_token": eos}
        if tools:
            body["tools"] = tools
            variables["tools"] = tools
        if thinking is not None:
            body["chat_template_kwargs"] = {"enable_thinking": thinking}
            variables["enable_thinking"] = thinking
        if mode == "harmony" and rng.random() < 0.5:
            effort = rng.choice(["low", "medium", "high"])
            body.setdefault("chat_template_kwargs", {})["reasoning_effort"] = effort
            variables["reasoning_effort"] = effort
        why = ""
        try:
            want = template.render(**variables)
        except jinja2.exceptions.TemplateError as e:
            want, why = None, f"jinja2: {e}"  # refused: moetier must refuse it too
        try:
            got = post(base, "/apply-template", body)["prompt"]
        except urllib.error.HTTPError as e:
            got = None if e.code == 400 else f"HTTP {e.code}"
            why += f" moetier: {e.read().decode(errors='replace')}"
        if got is None and want is None:
            refused += 1
            continue
        if got is None or want is None:
            failures += 1
            if failures <= 3:
                print(f"case {case}: only {'moetier' if got is None else 'jinja2'} refused it "
                      f"({why.strip()})\n  request {json.dumps(body)}")
            continue
        if got != want:
            failures += 1
            if failures <= 3:
                at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b),
                          min(len(got), len(want)))
                print(f"case {case}: differs at {at}:\n  moetier {got[at - 40:at + 60]!r}\n"
                      f"  jinja2  {want[at - 40:at + 60]!r}\n  request {json.dumps(body)}")
    print(f"{n - failures} of {n} conversations rendered as jinja2 renders them"
          f"{f' ({refused} refused by both)' if refused else ''}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
