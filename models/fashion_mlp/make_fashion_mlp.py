"""Export the Fashion-MNIST MLP used by mpc's examples and integration tests as ONNX.

Builds
    nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(),
                  nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
with PyTorch's default initialization (torch.manual_seed(0), so the file is
deterministic) and writes `fashion_mlp.onnx` next to this script:

  * opset 17, exported in training mode (TrainingMode.TRAINING) without constant
    folding, so every parameter stays an initializer (named after its module path,
    e.g. "1.weight", shape [out, in]; Linear exports as Gemm with transB=1);
  * input  `image`  float32 [batch, 1, 28, 28], axis 0 dynamic ("batch");
  * output `logits` float32 [batch, 10],        axis 0 dynamic ("batch").

The model is checked with onnx.checker.check_model and its node op types,
initializers and graph inputs/outputs are printed. The script fails if the graph
contains any op outside {Flatten, Gemm, MatMul, Add, Relu}.

Run (Debian's torch/onnx are importable only from the system interpreter):

    /usr/bin/python3 models/fashion_mlp/make_fashion_mlp.py

Idempotent: the output file is overwritten.
"""

import os
import sys

import onnx
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_PATH = os.path.join(HERE, "fashion_mlp.onnx")
ALLOWED_OPS = {"Flatten", "Gemm", "MatMul", "Add", "Relu"}


def build_model():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(784, 256), nn.ReLU(),
        nn.Linear(256, 128), nn.ReLU(),
        nn.Linear(128, 10),
    )


def main():
    model = build_model()
    dummy = torch.zeros(2, 1, 28, 28, dtype=torch.float32)
    torch.onnx.export(
        model, (dummy,), OUT_PATH,
        opset_version=17,
        input_names=["image"],
        output_names=["logits"],
        dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}},
        training=torch.onnx.TrainingMode.TRAINING,
        do_constant_folding=False,
    )

    m = onnx.load(OUT_PATH)
    onnx.checker.check_model(m)
    ops = [n.op_type for n in m.graph.node]
    print("wrote", OUT_PATH)
    print("opset:", [(o.domain or "ai.onnx", o.version) for o in m.opset_import])
    print("nodes:", ops)
    for init in m.graph.initializer:
        print("initializer:", init.name, list(init.dims))
    for vi in list(m.graph.input) + list(m.graph.output):
        dims = [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]
        print("io:", vi.name, dims)
    bad = sorted(set(ops) - ALLOWED_OPS)
    if bad:
        print("ERROR: unexpected ops in export:", bad, file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
