"""A deterministic corpus for tokenizer parity tests: many scripts, code, digits, whitespace,
special tokens in text, random valid Unicode, long repetitive strings."""
import json
import random
import unicodedata

PROSE = [
    "The quick brown fox jumps over the lazy dog. It's the cache's job; we'll see, they'd've said.",
    "Ünïcödé façade — naïve coöperation, Straße, œuvre, Ångström, ½ ⅞ ² ℃.",
    "東京は日本の首都です。今日はいい天気ですね！カタカナ、ひらがな、漢字。",
    "我们在北京吃了烤鸭，价格是128元。数字１２３和全角字符ＡＢＣ。",
    "한국어 문장도 잘 처리되어야 합니다. 서울특별시.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "مرحبا بالعالم، هذا نص عربي مع أرقام ١٢٣ و 456.",
    "यह एक हिंदी वाक्य है, जिसमें देवनागरी लिपि का प्रयोग होता है।",
    "Emoji: 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🧑🏿‍💻 ❤️‍🔥 🇯🇵 🙂🙃 ✅",
    "Ελληνικά: Καλημέρα κόσμε! עברית: שלום עולם. ไทย: สวัสดีครับ",
]
CODE = [
    "def f(x):\n    return {'a': [1, 2, 3], \"b\": x ** 2}  # comment\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\r\n",
    "SELECT id, name FROM users WHERE age >= 18 AND email LIKE '%@example.com';",
    "<div class=\"x\">&lt;tag&gt; &amp; entities</div>\n<!-- html -->",
    "fn main() -> Result<(), Box<dyn Error>> { println!(\"{:?}\", vec![1u8; 3]); Ok(()) }",
]


def corpus(special_tokens, seed=0):
    rng = random.Random(seed)
    texts = list(PROSE) + list(CODE)
    texts += ["1234567890 3.14159 -42 1e-9 0x1F 0001 99999999999999999999",
              "a" * 3000, "ab " * 500, "ha" * 1000 + "!", "     leading and trailing     ",
              "tabs\tand\ttabs\t\t\tand\r\nCRLF\r\n\r\nlines\n\n\n", " " * 200 + "x", "\n" * 50,
              "", " ", "a", "\u00a0nbsp\u2003em\u3000ideo", "мир" * 200,
              "x\u0085y\u2028z\u2029w\u000bv\u000cu"]
    # Special tokens literally in text, at the edges and in the middle.
    tokens = list(special_tokens)
    rng.shuffle(tokens)
    for i in range(0, len(tokens), 40):
        chunk = tokens[i:i + 40]
        texts.append("".join(chunk))
        texts.append(" ".join(chunk))
        texts.append(chunk[0] + "hello " + chunk[-1] + " world" + chunk[len(chunk) // 2])
    # Random valid Unicode, mixed with ASCII: assigned characters only (as of this Python's
    # Unicode version, 14.0). Debian 12's PCRE2 also knows Unicode 14; HF's regex engine
    # knows newer versions, so characters assigned later (e.g. CJK Extension H) would be
    # classified differently: a known limitation, noted in the README.
    for _ in range(150):
        chars = []
        for _ in range(rng.randint(1, 120)):
            r = rng.random()
            if r < 0.4:
                chars.append(chr(rng.randint(0x20, 0x7e)))
            elif r < 0.5:
                chars.append(rng.choice(" \t\n\r"))
            else:
                while True:
                    cp = rng.choice([rng.randint(0x80, 0x7ff), rng.randint(0x800, 0xffff),
                                     rng.randint(0x10000, 0x10ffff)])
                    if unicodedata.category(chr(cp)) not in ("Cn", "Cs"):
                        break
                chars.append(chr(cp))
        texts.append("".join(chars))
    # Mixed documents.
    for _ in range(60):
        texts.append(" ".join(rng.choice(PROSE + CODE) for _ in range(rng.randint(2, 6))))
    return texts


def special_tokens_of(tokenizer_json):
    with open(tokenizer_json, encoding="utf-8") as f:
        data = json.load(f)
    return [t["content"] for t in data.get("added_tokens", [])]
