"""Exports torchvision's ResNet-18 / ResNet-50 (random init, torch.manual_seed(0), 10
classes, zero_init_residual=True) as ONNX for mpc, next to this script:
models/resnet/resnet18.onnx, models/resnet/resnet50.onnx.

Opset 17, exported in training mode without constant folding, so batch norm keeps
training_mode=1 and its running statistics as initializers (mpc trains with batch
statistics, updates the running ones in place and evaluates with them). Input `image`
float32 [batch, 3, H, W] (batch dynamic; any H, W >= 32), output `logits` [batch, 10].
The files (45 MB and 94 MB) are not committed; this script regenerates them
deterministically. tests/golden/make_convnet_golden.py builds the same models for the
PyTorch comparison.

Run:  /usr/bin/python3 models/resnet/make_resnet.py [--arch resnet18,resnet50] [--image 64]
Then: build/mpc-train --spec models/resnet/resnet18.spec
"""

import argparse
import collections
import os

import onnx
import torch
import torchvision

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arch", default="resnet18,resnet50")
    parser.add_argument("--image", type=int, default=64)
    args = parser.parse_args()
    for arch in args.arch.split(","):
        torch.manual_seed(0)
        model = getattr(torchvision.models, arch)(num_classes=10, zero_init_residual=True)
        path = os.path.join(HERE, f"{arch}.onnx")
        dummy = torch.zeros(2, 3, args.image, args.image)
        torch.onnx.export(model, (dummy,), path, opset_version=17, input_names=["image"], output_names=["logits"],
                          dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}},
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
        m = onnx.load(path)
        onnx.checker.check_model(m)
        ops = collections.Counter(n.op_type for n in m.graph.node)
        print(f"wrote {path}: {sum(p.numel() for p in model.parameters())} parameters, ops {dict(ops)}")


if __name__ == "__main__":
    main()
