"""Records llama-quantize's per-tensor type choices as golden data for synth's mixer.

Run by hand when llama.cpp's rules change (it needs a llama.cpp build; nothing here is
run by the test suite):
    /usr/bin/python3 tests/golden/make_quant_mix.py LLAMA_QUANTIZE MOETIER > tests/golden/quant_mix.json
For each preset and file type it synthesizes the preset at f16, asks
`llama-quantize --dry-run` what each tensor would become, and writes, in moetier's tensor
order (`moetier synth --dry-run`), the types of the tensors llama-quantize quantizes.
src/synth/synth_test.cc compares TensorTypeMixer against this file.
"""
import json
import re
import subprocess
import sys
import tempfile

PRESETS = [("tiny", []), ("qwen2moe-tiny", []), ("deepseek3-tiny", []), ("qwen3next-tiny", []),
           ("deepseek3-tiny", ["--legacy-mla"])]
TYPES = {"q2_k": "Q2_K", "q3_k_s": "Q3_K_S", "q3_k_m": "Q3_K_M", "q3_k_l": "Q3_K_L",
         "iq4_xs": "IQ4_XS", "iq4_nl": "IQ4_NL", "iq3_xxs": "IQ3_XXS", "iq3_s": "IQ3_S",
         "iq2_xxs": "IQ2_XXS", "iq2_xs": "IQ2_XS", "iq2_s": "IQ2_S", "iq1_s": "IQ1_S",
         "iq1_m": "IQ1_M", "q4_k_m": "Q4_K_M", "q8_0": "Q8_0", "q6_k": "Q6_K", "q4_0": "Q4_0",
         "mxfp4": "MXFP4_MOE"}


def main():
    quantize, moetier = sys.argv[1], sys.argv[2]
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for preset, flags in PRESETS:
            key = preset + "".join(flags)
            model = f"{tmp}/{key}.gguf"
            subprocess.run([moetier, "synth", "--preset", preset, "--type", "f16", "-q", "-o",
                            model] + flags, check=True, stdout=subprocess.DEVNULL)
            order = [line.split()[0] for line in subprocess.run(
                [moetier, "synth", "--preset", preset, "--type", "f16", "--dry-run", "-o",
                 f"{tmp}/x.gguf"] + flags, check=True, capture_output=True,
                text=True).stdout.splitlines()]
            out[key] = {}
            for ours, theirs in TYPES.items():
                log = subprocess.run([quantize, "--dry-run", model, theirs],
                                     capture_output=True).stderr.decode(errors="replace")
                chosen = {}
                for line in log.splitlines():
                    m = re.match(r"^\[\s*\d+/\s*\d+\]\s+(\S+)\s.*\((\w+)\)\s*$", line)
                    if m:
                        chosen[m.group(1)] = m.group(2)
                out[key][ours] = " ".join(f"{n}={chosen[n]}" for n in order if n in chosen)
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    print()


if __name__ == "__main__":
    main()
