"""Trains the export corpus with ONNX Runtime training 1.19.2, beside mpc (docs/onnx-import.md).

ONNX Runtime training is the other engine that trains ONNX graphs. For every committed
export of tests/golden/corpus this script builds ORT's training artifacts
(onnxruntime.training.artifacts.generate_artifacts: gradient graph, AdamW, cross-entropy)
and runs the same 20 AdamW steps on the same batches as PyTorch's f32_adamw reference,
then prints one line per export: trains (worst step relative difference from PyTorch) or
the first line of ORT's error.

Trained initializers: those PyTorch's graph signature marks PARAMETER when the export has
it, else every finite float initializer that feeds a node's data input (the rule mpc uses
for exports that say nothing). Sequence logits [N, T, V] get a Reshape to [N*T, V] so ORT's
SoftmaxCrossEntropyLoss sees classes on axis 1.

Needs its own environment (onnxruntime-training 1.19.2 wants numpy < 2; its optimizer
package imports torch, taken from .venv):

    python3 -m venv .venv-ort && .venv-ort/bin/pip install onnxruntime-training==1.19.2 "numpy<2" onnx==1.16.2
    PYTHONPATH=.venv-ort/lib/python3.11/site-packages:.venv/lib/python3.11/site-packages \\
        .venv-ort/bin/python tools/export_corpus/ort_training.py
"""
import glob
import os
import shutil
import sys
import tempfile
import traceback

import numpy as np
import onnx
from onnx import helper, numpy_helper

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(REPO, "tests", "golden", "corpus")
KIND = "pkg.torch.export.graph_signature.InputSpec.kind"


def trainable(model):
    kinds = {}
    for vi in list(model.graph.value_info) + list(model.graph.input):
        for p in vi.metadata_props:
            if p.key == KIND:
                kinds[vi.name] = p.value
    floats = [t for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT]
    if kinds:
        return [t.name for t in floats if kinds.get(t.name) == "PARAMETER"]
    out = []
    for t in floats:
        if np.isfinite(numpy_helper.to_array(t)).all():
            out.append(t.name)
    return out


def with_flat_logits(model, labels_shape):
    """Adds Reshape(logits, [N*T, -1]) as the output when labels are per position [N, T]."""
    if len(labels_shape) != 2:
        return model
    out = model.graph.output[0]
    rows = 4 * labels_shape[1]  # batch 4 x positions
    shape = helper.make_tensor("ort_flat_shape", onnx.TensorProto.INT64, [2], [rows, -1])
    model.graph.initializer.append(shape)
    model.graph.node.append(helper.make_node("Reshape", [out.name, "ort_flat_shape"], ["ort_flat_logits"]))
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info("ort_flat_logits", onnx.TensorProto.FLOAT, [rows, "classes"]))
    return model


def run(model_dir, spec_stem, losses_file):
    from onnxruntime.training import artifacts
    from onnxruntime.training.api import CheckpointState, Module, Optimizer

    model_path = os.path.join(model_dir, spec_stem.split("_")[0], "model.onnx")
    model = onnx.load(model_path)  # external data loaded in
    x = np.load(os.path.join(model_dir, "features.npy"))
    y = np.load(os.path.join(model_dir, "labels.npy"))
    model = with_flat_logits(model, y.shape)
    params = trainable(model)
    frozen = [t.name for t in model.graph.initializer if t.name not in params]
    work = tempfile.mkdtemp(prefix="ort_corpus_")
    try:
        artifacts.generate_artifacts(model, requires_grad=params, frozen_params=frozen,
                                     loss=artifacts.LossType.CrossEntropyLoss,
                                     optimizer=artifacts.OptimType.AdamW, artifact_directory=work)
        state = CheckpointState.load_checkpoint(os.path.join(work, "checkpoint"))
        module = Module(os.path.join(work, "training_model.onnx"), state, os.path.join(work, "eval_model.onnx"))
        optimizer = Optimizer(os.path.join(work, "optimizer_model.onnx"), module)
        optimizer.set_learning_rate(1e-3)
        module.train()
        ref = [float(v) for v in open(losses_file)]
        worst = 0.0
        for i, want in enumerate(ref):
            xb = x[4 * i:4 * i + 4]
            yb = y[4 * i:4 * i + 4].reshape(-1) if y.ndim == 2 else y[4 * i:4 * i + 4]
            loss = float(module(xb, yb))
            optimizer.step()
            module.lazy_reset_grad()
            worst = max(worst, abs(loss - want) / abs(want))
        return f"trains: worst step rel {worst:.2e} ({len(params)} parameters)"
    except Exception as e:  # noqa: BLE001
        text = " ".join(str(e).split()) or type(e).__name__
        for marker in ("The gradient builder has not been registered: ", "No Op registered for ",
                       "failed to find NodeArg by name: ", "Failed to load model with error: "):
            if marker in text:
                return "fails: " + marker + text.split(marker, 1)[1][:120]
        return "fails: " + text[-200:]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    for model_dir in sorted(glob.glob(os.path.join(CORPUS, "*"))):
        if not os.path.isdir(model_dir):
            continue
        for spec in sorted(glob.glob(os.path.join(model_dir, "*_f32_adamw.spec"))):
            stem = os.path.basename(spec)[:-len(".spec")]
            result = run(model_dir, stem, os.path.join(model_dir, "f32_adamw_losses.txt"))
            print(f"{os.path.basename(model_dir)} {stem.split('_')[0]}: {result}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
