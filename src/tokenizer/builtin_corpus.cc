// The embedded training text of the built-in vocabularies (builtin_vocab.cc). Changing a
// single byte here changes every built-in vocabulary, and so every synthetic model's token
// ids: treat it as frozen.
#include <string_view>

namespace mt::internal {

std::string_view BuiltinCorpus() {
  static constexpr std::string_view kText =
      R"corpus(The quick brown fox jumps over the lazy dog. The dog, who was not lazy at all, simply
did not care for foxes. It was the kind of afternoon in which nothing seemed to happen,
and yet everything changed: the light moved across the kitchen floor, the kettle began
to sing, and somewhere in the house a door closed with a soft, decisive click.

She said, "I'll be there at seven." He replied, "You're always late, aren't you?" They
laughed, because it was true, and because neither of them minded. We've all had friends
like that; they're the ones who'd wait for an hour and still say it wasn't long at all.

In the beginning there was the word, and the word was tokenized. A tokenizer splits
text into pieces that a language model can read: common words become single tokens,
rare words are broken into smaller parts, and anything unknown falls back to bytes.
Mixture-of-experts models route every token to a few experts out of many; the router
picks the top-k experts by score, and only those experts run for that token.

Numbers appear everywhere: 0, 1, 2, 3, 42, 100, 256, 1024, 65536, 3.14159, 2.71828,
-17, +273.15, 1e-6, 6.022e23, 1,000,000 and 12:30:45. The year 1969 saw a landing on
the moon; in 2024 the model had 30 billion parameters, 128 experts and 48 layers.
Phone: +1 (555) 010-2030. Order #A-7731 shipped on 2025-03-14 at 09:41 UTC.

def fibonacci(n: int) -> int:
    """Return the n-th Fibonacci number."""
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


class Cache:
    def __init__(self, capacity=1024):
        self.capacity = capacity
        self.items = {}

    def get(self, key, default=None):
        return self.items.get(key, default)

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  std::vector<float> weights(4096, 0.0f);
  for (int i = 0; i < argc; ++i) {
    std::printf("arg[%d] = %s\n", i, argv[i]);
  }
  if (weights.empty() || argc > 8) return 1;
  return 0;
}

for (const auto& [key, value] : table) { total += value * 2 - 1; }
x = [i ** 2 for i in range(10) if i % 2 == 0]  # squares of even numbers
SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name ORDER BY 2 DESC;
{"id": 7, "name": "moetier", "tags": ["moe", "gguf", "cpu"], "ok": true, "ratio": 0.75}
<div class="note"><p>Hello, <b>world</b>!</p></div>
git commit -m "Fix off-by-one in the expert cache" && git push origin main
https://example.com/path/to/page?query=value&lang=en#section-2

	Tabs	and	spaces    mixed   in   one   line.
Trailing spaces here.   
Multiple


blank lines above, and "quotes", 'single quotes', (parentheses), [brackets], {braces}.
Punctuation!!! Questions??? Ellipsis... Dashes -- and --- and em—dashes – en–dashes.

Le renard brun rapide saute par-dessus le chien paresseux. Où est la bibliothèque ?
C'est déjà l'été ; les élèves sont en vacances et la forêt est très calme.
Der schnelle braune Fuchs springt über den faulen Hund. Größe, Straße, Mädchen, schön.
El rápido zorro marrón salta sobre el perro perezoso. ¿Dónde está la estación? ¡Olé!
A rápida raposa marrom pula sobre o cão preguiçoso. Ação, coração, não, irmã.
Il veloce volpe marrone salta sopra il cane pigro. Perché così? Città, più, già.
Быстрая коричневая лиса прыгает через ленивую собаку. Привет, как дела? Всё хорошо.
Η γρήγορη καφέ αλεπού πηδά πάνω από τον τεμπέλη σκύλο. Καλημέρα, τι κάνεις;
Szybki brązowy lis przeskakuje nad leniwym psem. Zażółć gęślą jaźń.
Hızlı kahverengi tilki tembel köpeğin üzerinden atlar. Çok güzel, teşekkürler.
Tiếng Việt có dấu: Cửa Việt, người, được, những, nước, điều.
الثعلب البني السريع يقفز فوق الكلب الكسول. مرحبا بالعالم.
השועל החום המהיר קופץ מעל הכלב העצלן. שלום עולם.
तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है। नमस्ते दुनिया।
เจ้าสุนัขจิ้งจอกสีน้ำตาลกระโดดข้ามสุนัขขี้เกียจ สวัสดีชาวโลก

敏捷的棕色狐狸跳过了懒狗。你好，世界！我想在苹果公司工作一千三百一十四天。
今天天气很好，我们去公园散步吧。机器学习模型需要大量的数据和计算资源。
素早い茶色の狐がのろまな犬を飛び越える。こんにちは、世界！東京は日本の首都です。
ひらがなとカタカナ、そして漢字を組み合わせて書きます。ありがとうございました。
빠른 갈색 여우가 게으른 개를 뛰어넘는다. 안녕하세요, 세계! 한국어를 공부합니다.
全角文字：ＡＢＣ　１２３　（括弧）～「引用」

Emoji: 🚀 🦙 😀 😁 😶‍🌫️ ✅ ❤️ 👍🏽 🎉 🔥 👨‍👩‍👧‍👦 🇺🇸 🇯🇵 ☕ 🍕 🌍 ⭐ ✨ 🤖 💡
Math: ∀x ∈ ℝ, x² ≥ 0; ∑ᵢ aᵢ = π ≈ 3.14; √2 ≠ 1.5; α + β → γ; ∞ ± ∂f/∂x; ½ ¼ ¾ °C µs ±5%.
Currency: $19.99, €25,00, £7.50, ¥1000, ₹450, ₿0.001. Symbols: © ® ™ § ¶ † ‡ • … ‰ ′ ″.

The expert cache holds the most recently used experts in memory. When a token needs an
expert that is not resident, the engine reads it from the model file on disk, waits for
the read to finish, and computes the expert's output. Prefetching guesses which experts
the next layer will need and starts reading them early, so that the wait is shorter.
Every read is counted: hits, misses, bytes read, and the time spent waiting for data.
If the file is truncated or corrupt, the engine reports the layer, the expert and the
offset, and it never silently returns zeros. That is what it means to fail closed.

To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer
the slings and arrows of outrageous fortune, or to take arms against a sea of troubles
and by opposing end them. All the world's a stage, and all the men and women merely
players; they have their exits and their entrances, and one man in his time plays many
parts. It was the best of times, it was the worst of times, it was the age of wisdom,
it was the age of foolishness, it was the epoch of belief, it was the epoch of
incredulity, it was the season of Light, it was the season of Darkness.
)corpus";
  return kText;
}

}  // namespace mt::internal
