#!/usr/bin/env python3
"""What a fusion pass gains: mpc-train's step time with and without it, on bench-sized
models exported the way a user exports them today: a Llama-shaped decoder from
`transformers` by `torch.onnx.export(model, (x,), path)` (PyTorch 2.x's dynamo exporter,
its default opset), timm's EfficientNet-B0 by the TorchScript exporter at opset 18 (the
default export folds its BatchNorms into the convolutions, which mpc does not train).

    .venv/bin/python tools/bench/fusion_ab.py --build-dir build \
        [--models llama,efficientnet] [--precisions f32,bf16] [--steps 20] [--repeat 3]

Each (model, precision, pass) row runs `mpc-train --disable-passes PASS` and the default
pipeline alternately, `--repeat` times each (A B A B ...: the machine's drift falls on both),
and reports the medians of mpc-train's own ms/step and their ratio, with the step-1 and
last losses of both (a fusion must not change them beyond rounding). Needs the bench
environment (tools/pyenv: torch 2.x, transformers, timm); the models are generated into
--work-dir, not committed.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

import numpy as np

MODELS = {
    # name: (passes it exercises, builder, input shape without batch, batch, classes/vocab)
    "llama": (["fuse-rms-norm", "fuse-silu"], "build_llama", (128,), 8, 2048),
    "efficientnet": (["fuse-silu"], "build_efficientnet", (3, 64, 64), 16, 10),
}


def build_llama():
    import transformers as tf

    class LogitsOnly(__import__("torch").nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids):
            return self.model(input_ids=input_ids).logits

    cfg = tf.LlamaConfig(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=8,
                         num_key_value_heads=4, vocab_size=2048, max_position_embeddings=256, use_cache=False,
                         bos_token_id=0, eos_token_id=0, pad_token_id=None)
    return LogitsOnly(tf.LlamaForCausalLM(cfg))


def build_efficientnet():
    import timm
    return timm.create_model("efficientnet_b0", pretrained=False, num_classes=10, drop_rate=0.0,
                             drop_path_rate=0.0)


def export(name, out_dir):
    import torch
    _, builder, row, batch, classes = MODELS[name]
    path = os.path.join(out_dir, name, "model.onnx")
    rng = np.random.default_rng(0)
    if name == "llama":
        x = rng.integers(0, classes, size=(batch * 4,) + row).astype(np.int64)
        y = np.concatenate([x[:, 1:], x[:, :1]], axis=1)
        feature, logits = "input_ids", None
    else:
        x = rng.standard_normal((batch * 4,) + row).astype(np.float32)
        y = rng.integers(0, classes, size=(batch * 4,)).astype(np.int64)
        feature, logits = "x", None
    os.makedirs(os.path.dirname(path), exist_ok=True)
    np.save(os.path.join(out_dir, name, "features.npy"), x)
    np.save(os.path.join(out_dir, name, "labels.npy"), y)
    if not os.path.exists(path):
        torch.manual_seed(0)
        model = globals()[builder]()
        model.train()
        if name == "efficientnet":
            # The default (dynamo) export folds BatchNorm into the convolutions, which mpc
            # refuses to train (docs/onnx-import.md): the TorchScript exporter as the corpus.
            torch.onnx.export(model, (torch.from_numpy(x[:batch]),), path, dynamo=False, opset_version=18,
                              training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
        else:
            torch.onnx.export(model, (torch.from_numpy(x[:batch]),), path)
    import onnx
    m = onnx.load(path, load_external_data=False)
    feature = m.graph.input[0].name
    logits = m.graph.output[0].name
    return path, feature, logits, batch


def write_spec(out_dir, name, feature, logits, batch, steps):
    spec = os.path.join(out_dir, name, "bench.spec")
    with open(spec, "w") as f:
        f.write(f'model: "model.onnx"\nfeatures_input: "{feature}"\n'
                f'loss {{ type: SOFTMAX_CROSS_ENTROPY output: "{logits}" }}\n'
                'train_data { npy { features: "features.npy" labels: "labels.npy" } shuffle: false }\n'
                f"batch_size: {batch}\nsteps: {steps}\n"
                "optimizer { adamw { lr: 0.001 } }\nschedule { constant {} }\nseed: 0\n")
    return spec


def run(build_dir, spec, precision, disabled, metrics):
    cmd = [os.path.join(build_dir, "mpc-train"), "--spec", spec, "--precision", precision, "--metrics", metrics]
    if disabled:
        cmd += ["--disable-passes", disabled]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stdout}{out.stderr}")
    ms = float(re.search(r"\(([\d.]+) ms/step\)", out.stdout).group(1))
    losses = [float(v) for v in re.findall(r'"kind":"train".*?"loss":([-\d.e+]+)', open(metrics).read())]
    return ms, losses[0], losses[-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--work-dir", default="/tmp/mpc_fusion_ab")
    ap.add_argument("--models", default="llama,efficientnet")
    ap.add_argument("--precisions", default="f32,bf16")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print("| model | precision | pass | without (ms/step) | with (ms/step) | with / without | "
          "step-1 loss without / with | last loss without / with |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        path, feature, logits, batch = export(name, args.work_dir)
        spec = write_spec(args.work_dir, name, feature, logits, batch, args.steps)
        metrics = os.path.join(args.work_dir, name, "metrics.jsonl")
        for precision in args.precisions.split(","):
            for p in MODELS[name][0]:
                without, with_ = [], []
                for _ in range(args.repeat):
                    without.append(run(args.build_dir, spec, precision, p, metrics))
                    with_.append(run(args.build_dir, spec, precision, "", metrics))
                a = statistics.median(r[0] for r in without)
                b = statistics.median(r[0] for r in with_)
                print(f"| {name} | {precision} | {p} | {a:.1f} | {b:.1f} | {b / a:.3f} | "
                      f"{without[0][1]:.6f} / {with_[0][1]:.6f} | {without[0][2]:.6f} / {with_[0][2]:.6f} |",
                      flush=True)


if __name__ == "__main__":
    main()
