"""Writes a logit_bias that bans every token whose bytes are not valid UTF-8 on their own
(byte tokens such as 0xE6, merges that end inside a character), for a GGUF's vocabulary.

A model with random weights strings such tokens together into text that is not UTF-8;
llama-server then fails the request ("does not match the expected Content-only format").
bench/serve_bench.sh --llama-server sends this bias to both servers, so that they sample
under the same constraint.

usage: valid_utf8_bias.py MODEL.gguf OUT.json
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "reference"))
from gguf_reader import open_gguf  # noqa: E402


def gpt2_byte_decoder():
    """The byte-level BPE alphabet: the printable character that stands for each byte."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
          list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def token_bytes(text, model, decoder):
    if model == "gpt2":
        return bytes(decoder[ch] for ch in text)
    if text.startswith("<0x") and text.endswith(">") and len(text) == 6:  # SPM byte token
        return bytes([int(text[3:5], 16)])
    return text.replace("\u2581", " ").encode("utf-8")


def main():
    g = open_gguf(sys.argv[1])
    md = g.metadata
    tokens = md["tokenizer.ggml.tokens"]
    types = md.get("tokenizer.ggml.token_type")
    model = md.get("tokenizer.ggml.model", "gpt2")
    decoder = gpt2_byte_decoder()
    banned = {}
    for i, text in enumerate(tokens):
        if types is not None and types[i] not in (1, 6):  # normal and byte tokens only
            continue
        try:
            token_bytes(text, model, decoder).decode("utf-8")
        except (KeyError, UnicodeDecodeError):
            banned[str(i)] = -100
    json.dump({"logit_bias": banned}, open(sys.argv[2], "w"))
    print(f"valid_utf8_bias: {len(banned)} of {len(tokens)} tokens banned", file=sys.stderr)


if __name__ == "__main__":
    main()
