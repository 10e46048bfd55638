"""Export the Fashion-MNIST CNN used by mpc's examples and integration tests as ONNX.

    conv3x3(1->32, pad 1) - BatchNorm - ReLU - MaxPool 2x2
    conv3x3(32->64, pad 1) - BatchNorm - ReLU - MaxPool 2x2
    Flatten - Linear(3136->128) - ReLU - Dropout(0.25) - Linear(128->10)

PyTorch's default initialization with torch.manual_seed(0) (deterministic file),
exported in training mode (TrainingMode.TRAINING, no constant folding) so batch norm
keeps its statistics as initializers and exports with training_mode=1; mpc decides
training vs evaluation behaviour per program. Opset 17; input `image` float32
[batch, 1, 28, 28], output `logits` float32 [batch, 10] (batch dynamic).

Run with Debian's interpreter:  /usr/bin/python3 models/fashion_cnn/make_fashion_cnn.py
Idempotent: the output file is overwritten.
"""

import os
import sys

import onnx
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_PATH = os.path.join(HERE, "fashion_cnn.onnx")
ALLOWED_OPS = {"Conv", "BatchNormalization", "Relu", "MaxPool", "Flatten", "Gemm", "Dropout", "Constant"}


def build_model():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25),
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
    print("nodes:", ops)
    for init in m.graph.initializer:
        print("initializer:", init.name, list(init.dims))
    bad = sorted(set(ops) - ALLOWED_OPS)
    if bad:
        print("ERROR: unexpected ops in export:", bad, file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
