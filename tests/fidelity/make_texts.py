"""Writes texts.json, the fidelity test's inputs: >= 220 varied texts (sentences, code, numbers,
punctuation, whitespace, the empty string, many scripts and emoji, and texts long enough to be
truncated at 256 tokens). Deterministic (seeded); run it only to change the fixture."""
import json
import random

random.seed(7)
sentences = [
    "PostgreSQL is a powerful, open source object-relational database system.",
    "pgvector adds vector similarity search to Postgres.",
    "A tool to resize, rotate and convert photos from the command line.",
    "Time series database built for fast ingest and complex queries.",
    "The quick brown fox jumps over the lazy dog.",
    "How do I reset my password?",
    "Embeddings map text to points in a high-dimensional space.",
    "She sells sea shells by the sea shore.",
    "Error: connection refused (is the server running on port 5432?)",
    "SELECT count(*) FROM orders WHERE created_at > now() - interval '1 day';",
    "fn main() { println!(\"Hello, world!\"); }",
    "def embed(texts): return model.encode(texts, batch_size=64)",
    "The mitochondria is the powerhouse of the cell.",
    "Bank of America reported quarterly earnings above expectations.",
    "He went to the bank of the river to fish.",
    "Please find attached the invoice for March 2024, total $1,234.56.",
    "Weather tomorrow: 21°C, light rain in the afternoon, wind 15 km/h NE.",
    "GNU Image Manipulation Program for raster graphics editing.",
    "Library for reading and writing compressed archives (tar, zip, 7z).",
    "Music player with a terminal user interface and playlist support.",
    "Encrypt files with a password using strong modern ciphers.",
    "Japanese input method engine with dictionary support.",
    "A lightweight HTTP server and reverse proxy.",
    "Utilities for monitoring disk health via S.M.A.R.T.",
    "This package contains the documentation for the Python 3 standard library.",
    "Transformers use self-attention to weigh the importance of each token.",
    "I love this product! Five stars, would buy again.",
    "Terrible service, waited two hours and nobody came.",
    "The meeting has been moved to Thursday at 3pm.",
    "Photosynthesis converts light energy into chemical energy.",
    "To be, or not to be, that is the question.",
    "All happy families are alike; each unhappy family is unhappy in its own way.",
    "It was the best of times, it was the worst of times.",
    "Call me Ishmael.",
    "In the beginning God created the heaven and the earth.",
    "E = mc^2 relates mass and energy.",
    "The derivative of sin(x) is cos(x).",
    "Kubernetes schedules containers across a cluster of nodes.",
    "Use an HNSW index for approximate nearest neighbour search.",
    "Tokenization splits text into word pieces such as ##ing.",
    "The patient was prescribed 500 mg of amoxicillin three times daily.",
    "Flight BA117 from London to New York departs at 08:25.",
    "Our revenue grew 23% year over year to $4.2 billion.",
    "Open the pod bay doors, HAL.",
    "May the Force be with you.",
    "Chop the onions, then fry them gently in olive oil for ten minutes.",
    "The Eiffel Tower is 330 metres tall.",
    "Water boils at 100 degrees Celsius at sea level.",
    "Remember to back up your database before upgrading.",
    "WAL archiving enables point-in-time recovery.",
]
non_ascii = [
    "Ünïcödé tëxt wïth àccents: café, naïve, résumé, Zürich, São Paulo.",
    "東京は日本の首都です。", "我爱自然语言处理。", "北京烤鸭很好吃", "기계 학습은 재미있다", "한국어 텍스트 임베딩",
    "Привет, как дела?", "Москва — столица России.", "Съешь же ещё этих мягких французских булок.",
    "مرحبا بالعالم", "اللغة العربية جميلة", "שלום עולם", "नमस्ते दुनिया", "यह एक परीक्षण वाक्य है।",
    "Γειά σου Κόσμε", "Ελληνικά γράμματα: αβγδε", "สวัสดีชาวโลก", "Xin chào thế giới", "Merhaba dünya, nasılsın?",
    "Zażółć gęślą jaźń", "Příliš žluťoučký kůň úpěl ďábelské ódy", "Árvíztűrő tükörfúrógép",
    "🚀🔥 emoji only? 😀😃😄", "I ❤️ PostgreSQL 🐘", "Mixed: hello мир 世界 🌍 مرحبا",
    "naïve façade coöperate", "Straße, Größe, Fußball", "¿Dónde está la biblioteca?", "¡Qué bueno!",
    "Ça va? Très bien, merci.", "Ω≈ç√∫˜µ≤≥÷", "½ ¼ ¾ ™ © ®", "ﬁ ligature and ＦＵＬＬＷＩＤＴＨ letters",
    "Zero\u200bwidth\u200bspace", "Tab\tseparated\tvalues", "Line one\nLine two\nLine three",
    "日本語とEnglishのmixed文章です。", "Ну и ну! 😂", "Ἐν ἀρχῇ ἦν ὁ λόγος", "ᚠᛇᚻ᛫ᛒᛦᚦ runes",
]
odd = ["", " ", "   \n\t ", ".", "?!?!", "...", "a", "I", "1", "42", "3.14159", "0x1F", "-1e-9", "[1,2,3]",
       "{\"key\": \"value\", \"n\": 1}", "<html><body>Hi</body></html>", "https://example.com/path?q=1&r=2",
       "user@example.com", "#hashtag @mention", "C:\\Program Files\\App", "/usr/lib/postgresql/15/bin",
       "A" * 120, "supercalifragilisticexpialidocious", "pneumonoultramicroscopicsilicovolcanoconiosis",
       "UPPERCASE TEXT SHOUTING", "lowercase text whispering", "MiXeD cAsE tExT", "--help", "$$$", "%%%", "@@@"]
words = [w for s in sentences for w in s.split()]
texts = sentences + non_ascii + odd
texts += [" ".join(random.sample(sentences, 2)) for _ in range(70)]
texts += [", ".join(random.sample(words, 8)) for _ in range(20)]
texts += [" ".join(random.choice(sentences) for _ in range(40 + 5 * i)) for i in range(12)]  # > 256 tokens
texts += [" ".join(random.choice(non_ascii) for _ in range(120)), "word " * 2000, "東京" * 1500]
assert len(texts) >= 220, len(texts)
with open("texts.json", "w") as f:
    json.dump(texts, f, ensure_ascii=False, indent=0)
print(len(texts), "texts,", sum(map(len, texts)), "characters")
