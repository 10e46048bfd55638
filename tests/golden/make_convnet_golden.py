"""PyTorch golden data for mpc's "20 training steps of a ResNet match PyTorch" tests.

For one torchvision architecture (resnet18 or resnet50, random init with
torch.manual_seed(0), 10 classes, zero_init_residual=True; or mobilenet_v2,
mobilenet_v3_small, densenet121 with their default init), writes into OUT_DIR:

  model.onnx          the initial model, opset 17, exported in training mode without
                      constant folding (batch norm keeps training_mode=1 and its running
                      statistics as initializers). Input `image` float32 [batch,3,H,W],
                      output `logits` float32 [batch,10].
  features.npy        float32 [STEPS*BATCH, 3, H, W], np.random.default_rng(1) normals
  labels.npy          int64   [STEPS*BATCH], values 0..9, from the same rng
  f32.spec, bf16.spec mpc.TrainSpec text reproducing each run (paths relative to OUT_DIR)
  f32_losses.txt, bf16_losses.txt
                      STEPS lines "%.9g": the mean cross-entropy of step i, from the
                      forward pass before step i's update

Both runs: batch i = rows BATCH*i .. BATCH*i+BATCH-1 (no shuffling), nn.CrossEntropyLoss,
torch.optim.SGD(lr=0.001, momentum=0.9, weight_decay=1e-4), constant learning rate, one
intra-op thread (reproducible). The bf16 run wraps the forward pass and the loss in
torch.autocast('cpu', dtype=torch.bfloat16), as mpc's `precision { compute: BF16 }` does.

The data is random (labels too): it exercises the arithmetic of forward, backward
(convolution, batch norm in training mode, pooling, residual adds) and the optimizer.
zero_init_residual (each block's last batch-norm scale starts at 0, Goyal et al.) keeps
the comparison well conditioned: with the default init and batch 4, batch norm over the
few values of the last stage amplifies rounding so much that PyTorch's own f32 and f64
runs of ResNet-50 differ by 7e-3 after one step and by 20-40% after 20; with it they
agree to 3e-7 for all 20 steps (ResNet-18 and ResNet-50, lr 1e-3). The gradients reach
every block from the first step through the batch-norm scales.
The ResNet weights are large (ResNet-50: ~100 MB), so the data is generated where it is
used (the integration test runs this script into its build directory) instead of
being committed. models/resnet/make_resnet.py exports the same models for training.

Run (Debian's torch/torchvision/onnx/numpy are importable only from the system
interpreter):

    /usr/bin/python3 tests/golden/make_convnet_golden.py --arch resnet18 --out DIR

Idempotent: every output is overwritten.
"""

import argparse
import copy
import os

import numpy as np
import onnx
import torch
import torchvision
from torch import nn

LR, MOMENTUM, WEIGHT_DECAY = 0.001, 0.9, 1e-4
NUM_CLASSES = 10


class ClampSix(nn.Module):
    """ReLU6 as torch.clamp: the same function and the same ONNX Clip, but with a bf16
    backward on the CPU (torch 1.13 has no bf16 hardtanh_backward)."""

    def forward(self, x):
        return torch.clamp(x, 0.0, 6.0)


def replace_relu6(module):
    for name, child in module.named_children():
        if isinstance(child, nn.ReLU6):
            setattr(module, name, ClampSix())
        else:
            replace_relu6(child)


def build_model(arch):
    torch.manual_seed(0)
    if arch.startswith("resnet"):
        return getattr(torchvision.models, arch)(num_classes=NUM_CLASSES, zero_init_residual=True)
    # The architectures with ops mpc imports by expansion (graph/onnx_expand.h): ReLU6 as
    # Clip (mobilenet_v2), HardSwish/HardSigmoid (mobilenet_v3_small), Pad (densenet121).
    # Their classifiers' Dropout draws different masks in mpc and PyTorch: p = 0 (exported with
    # ratio 0, the identity in both) so the comparison is of the arithmetic.
    model = getattr(torchvision.models, arch)(num_classes=NUM_CLASSES)
    replace_relu6(model)
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
        # MobileNet V2's residual blocks start as the identity, its zero_init_residual: with
        # the default init and batch 4, PyTorch's own f32 and f64 runs differ by 4% at step 4
        # (batch norm over few values amplifies rounding, as for the ResNets above).
        if getattr(m, "use_res_connect", False) and arch == "mobilenet_v2":
            nn.init.zeros_(m.conv[-1].weight)
    return model


def export_onnx(model, path, image):
    dummy = torch.zeros(2, 3, image, image, dtype=torch.float32)
    torch.onnx.export(
        model, (dummy,), path,
        opset_version=17,
        input_names=["image"],
        output_names=["logits"],
        dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}},
        training=torch.onnx.TrainingMode.TRAINING,
        do_constant_folding=False,
    )
    onnx.checker.check_model(onnx.load(path))


def train_run(init_model, features, labels, steps, batch, autocast):
    model = copy.deepcopy(init_model)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    loss_fn = nn.CrossEntropyLoss()
    losses = []
    for step in range(steps):
        x = torch.from_numpy(features[step * batch:(step + 1) * batch])
        y = torch.from_numpy(labels[step * batch:(step + 1) * batch])
        opt.zero_grad()
        if autocast:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = loss_fn(model(x), y)
        else:
            loss = loss_fn(model(x), y)
        losses.append(float(loss.detach().float()))
        loss.backward()
        opt.step()
    return losses


def spec_text(run, steps, batch):
    lines = [
        f"# mpc.TrainSpec for golden run '{run}'; generated by make_convnet_golden.py.",
        'model: "model.onnx"',
        'features_input: "image"',
        'loss { type: SOFTMAX_CROSS_ENTROPY output: "logits" }',
        'train_data { npy { features: "features.npy" labels: "labels.npy" } shuffle: false }',
        f"batch_size: {batch}",
        f"steps: {steps}",
        f"optimizer {{ sgd {{ lr: {LR} momentum: {MOMENTUM} weight_decay: {WEIGHT_DECAY} }} }}",
        "schedule { constant {} }",
        "seed: 0",
    ]
    if run == "bf16":
        lines.append("precision { compute: BF16 }")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arch", choices=["resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "densenet121"],
                        required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--image", type=int, default=64)
    parser.add_argument("--runs", default="f32,bf16")
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)

    model = build_model(args.arch)
    export_onnx(model, os.path.join(args.out, "model.onnx"), args.image)
    rng = np.random.default_rng(1)
    n = args.steps * args.batch
    features = rng.standard_normal((n, 3, args.image, args.image)).astype(np.float32)
    labels = rng.integers(0, NUM_CLASSES, n).astype(np.int64)
    np.save(os.path.join(args.out, "features.npy"), features)
    np.save(os.path.join(args.out, "labels.npy"), labels)
    for run in args.runs.split(","):
        losses = train_run(model, features, labels, args.steps, args.batch, autocast=(run == "bf16"))
        with open(os.path.join(args.out, f"{run}_losses.txt"), "w") as f:
            f.write("".join(f"{v:.9g}\n" for v in losses))
        with open(os.path.join(args.out, f"{run}.spec"), "w") as f:
            f.write(spec_text(run, args.steps, args.batch))
        print(run, "losses:", " ".join(f"{v:.4f}" for v in losses))


if __name__ == "__main__":
    main()
