"""What the opt-in int8 all-MiniLM-L6-v2 costs in quality (issue 34): nDCG@10 of dense alone, plain RRF and the
default fusion on the four sets, with the packaged fp32 ONNX default's vectors and with the int8 graph's, in one run.

The int8 graph is ONNX Runtime's dynamic quantisation (per channel) of the packaged graph, as ``embed_speed.py``
builds it; documents and queries are both embedded by the embedder under test, and every row is computed by
``fusion_eval.py --offline``'s code over the same candidates (20 per engine, top 10). Prints a table and writes
``benchmarks/results/int8_ndcg.json``. Usage: ``python benchmarks/int8_ndcg.py [SET ...]`` (default: the four sets).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402
import _fusion_data as fdata  # noqa: E402
import fusion_eval as fe  # noqa: E402
from embed_speed import int8_model  # noqa: E402

ROWS = ("dense alone", "rrf 1/1", "DEFAULT adaptive 1/1")


def main(argv: list[str] | None = None) -> dict:
    sets = (argv if argv is not None else sys.argv[1:]) or ["scifact", "hotpotqa100", "locomo5", "techdocs"]
    common.ensure_core_importable()
    from hybrid_memory import OnnxEmbedder

    results: dict = {"rows": list(ROWS), "datasets": {}}
    with tempfile.TemporaryDirectory() as scratch:
        int8 = OnnxEmbedder(int8_model(Path(scratch)))
        print("| set | row | fp32 (default) | int8 | difference |\n|---|---|---|---|---|")
        for name in sets:
            data = fdata.load(name)  # the default embedder's cached vectors
            fp32 = fe.evaluate_runs(data, fe.run_offline(data, fe.build_memory(data)))
            started = time.perf_counter()
            data.doc_vectors = int8.embed_documents([c["text"] for c in data.chunks])
            qids = list(data.queries)
            data.query_vectors = dict(zip(qids, int8.embed_documents([data.queries[q] for q in qids]), strict=True))
            embed_s = time.perf_counter() - started
            quant = fe.evaluate_runs(data, fe.run_offline(data, fe.build_memory(data)))
            results["datasets"][name] = {
                "int8_embed_seconds": round(embed_s, 1),
                "ndcg@10": {row: {"fp32": fp32[row]["ndcg@10"], "int8": quant[row]["ndcg@10"]} for row in ROWS},
            }
            for row in ROWS:
                a, b = fp32[row]["ndcg@10"], quant[row]["ndcg@10"]
                print(f"| {name} | {row} | {a:.4f} | {b:.4f} | {b - a:+.4f} |", flush=True)
    common.write_results("int8_ndcg", results)
    return results


if __name__ == "__main__":
    main()
