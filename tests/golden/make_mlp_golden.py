"""Generate PyTorch golden data for mpc's "first 20 training steps of an MLP" test.

Claim checked by the data: with fixed initial weights and a fixed batch order, mpc's
first 20 training steps of a small MLP match PyTorch (CPU, float32) to relative 1e-4
per step, for SGD (Nesterov momentum + weight decay) and AdamW.

Writes into tests/golden/mlp/ (next to this script):

  model.onnx          nn.Sequential(Linear(20,32), ReLU, Linear(32,16), Tanh,
                      Linear(16,8), Sigmoid, Linear(8,5)), torch.manual_seed(0) init,
                      opset 17, training mode, no constant folding. Input `x` float32
                      [batch,20], output `logits` float32 [batch,5] (axis 0 dynamic).
                      Its initializers are the initial weights of every run.
  initializers.txt    one line per ONNX initializer: "<name> <dim> <dim> ..."
  features.npy        float32 [320,20]  np.random.default_rng(1).standard_normal
  labels.npy          int64   [320]     then rng.integers(0, 5) from the same rng
  NAME.spec           mpc.TrainSpec (protobuf text) reproducing run NAME
  NAME_losses.txt     20 lines: loss of step i ("%.9g"), from the forward pass
                      before step i's update
  NAME_final/<initializer name>.npy
                      float32 parameter after the 20 steps, shape of the initializer

for NAME in {sgd, adamw}. Every run starts from a deep copy of the same initial model,
takes batch i = rows 16*i .. 16*i+15 (no shuffling; 20 steps = exactly one epoch),
uses loss nn.CrossEntropyLoss() (mean over the batch) on the logits, and runs with
one intra-op thread so the output is reproducible byte for byte.

The spec files are generated from the same RUNS / COMMON dicts that configure the
torch runs, so the two cannot drift. `train_run` takes an optimizer factory and an
`autocast` flag, so a bf16 run (torch.autocast('cpu', dtype=torch.bfloat16)) can be
added later as another RUNS entry (its spec needs mpc's precision-policy field, which
does not exist yet); no bf16 data is generated now.

Run (Debian's torch/onnx/numpy are importable only from the system interpreter):

    /usr/bin/python3 tests/golden/make_mlp_golden.py

Idempotent: every output is overwritten (NAME_final/ directories are recreated).
"""

import copy
import os
import shutil

import numpy as np
import onnx
from onnx import numpy_helper
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "mlp")

NUM_EXAMPLES = 320
NUM_FEATURES = 20
NUM_CLASSES = 5
DATA_SEED = 1
MODEL_SEED = 0

# Settings shared by every run; also written into every spec.
COMMON = {
    "model": "model.onnx",
    "features_input": "x",
    "output": "logits",
    "features": "features.npy",
    "labels": "labels.npy",
    "shuffle": False,
    "batch_size": 16,
    "steps": 20,
    "seed": 0,
}

# One entry per golden run. `optimizer` is the OptimizerSpec oneof field name; `hparams`
# are that message's fields (proto names and order), used both for torch and the spec.
RUNS = [
    {
        "name": "sgd",
        "optimizer": "sgd",
        "hparams": {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 1e-3},
        "autocast": False,
    },
    {
        "name": "adamw",
        "optimizer": "adamw",
        "hparams": {"lr": 0.01, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8,
                    "weight_decay": 0.01},
        "autocast": False,
    },
    # bf16 autocast (torch.autocast('cpu', dtype=torch.bfloat16)); compared within the
    # bf16 tolerance of docs/numerics.md, since accumulation order differs from PyTorch's.
    {
        "name": "bf16_sgd",
        "optimizer": "sgd",
        "hparams": {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 1e-3},
        "autocast": True,
    },
    {
        "name": "bf16_adamw",
        "optimizer": "adamw",
        "hparams": {"lr": 0.01, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8,
                    "weight_decay": 0.01},
        "autocast": True,
    },
]


def build_model():
    torch.manual_seed(MODEL_SEED)
    return nn.Sequential(
        nn.Linear(NUM_FEATURES, 32), nn.ReLU(),
        nn.Linear(32, 16), nn.Tanh(),
        nn.Linear(16, 8), nn.Sigmoid(),
        nn.Linear(8, NUM_CLASSES),
    )


def make_data():
    rng = np.random.default_rng(DATA_SEED)
    features = rng.standard_normal((NUM_EXAMPLES, NUM_FEATURES)).astype(np.float32)
    labels = rng.integers(0, NUM_CLASSES, size=NUM_EXAMPLES, dtype=np.int64)
    return features, labels


def optimizer_factory(kind, hp):
    """Returns params -> torch optimizer, built from the spec's hyperparameters."""
    if kind == "sgd":
        return lambda params: torch.optim.SGD(
            params, lr=hp["lr"], momentum=hp["momentum"], nesterov=hp["nesterov"],
            weight_decay=hp["weight_decay"])
    if kind == "adamw":
        return lambda params: torch.optim.AdamW(
            params, lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"],
            weight_decay=hp["weight_decay"])
    raise ValueError("unknown optimizer " + kind)


def export_onnx(model, path):
    dummy = torch.zeros(2, NUM_FEATURES, dtype=torch.float32)
    torch.onnx.export(
        model, (dummy,), path,
        opset_version=17,
        input_names=[COMMON["features_input"]],
        output_names=[COMMON["output"]],
        dynamic_axes={COMMON["features_input"]: {0: "batch"}, COMMON["output"]: {0: "batch"}},
        training=torch.onnx.TrainingMode.TRAINING,
        do_constant_folding=False,
    )
    m = onnx.load(path)
    onnx.checker.check_model(m)
    return m


def train_run(init_model, features, labels, make_optimizer, autocast=False):
    """Trains a deep copy of init_model; returns (per-step losses, trained model)."""
    model = copy.deepcopy(init_model)
    model.train()
    opt = make_optimizer(model.parameters())
    loss_fn = nn.CrossEntropyLoss()
    bs = COMMON["batch_size"]
    x_all = torch.from_numpy(features)
    y_all = torch.from_numpy(labels)
    losses = []
    for step in range(COMMON["steps"]):
        lo = (step * bs) % NUM_EXAMPLES  # no shuffling; wraps only if steps > one epoch
        x, y = x_all[lo:lo + bs], y_all[lo:lo + bs]
        opt.zero_grad(set_to_none=True)
        if autocast:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = model(x)
            loss = loss_fn(logits.float(), y)
        else:
            logits = model(x)
            loss = loss_fn(logits, y)
        losses.append(loss.item())
        loss.backward()
        opt.step()
    return losses, model


def fmt_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, int):
        return str(v)
    return '"%s"' % v


def spec_text(run):
    c = COMMON
    hp = " ".join("%s: %s" % (k, fmt_value(v)) for k, v in run["hparams"].items())
    lines = [
        "# mpc.TrainSpec for golden run '%s'; generated by make_mlp_golden.py, do not edit."
        % run["name"],
        "model: %s" % fmt_value(c["model"]),
        "features_input: %s" % fmt_value(c["features_input"]),
        "loss { type: SOFTMAX_CROSS_ENTROPY output: %s }" % fmt_value(c["output"]),
        "train_data { npy { features: %s labels: %s } shuffle: %s }"
        % (fmt_value(c["features"]), fmt_value(c["labels"]), fmt_value(c["shuffle"])),
        "batch_size: %d" % c["batch_size"],
        "steps: %d" % c["steps"],
        "optimizer { %s { %s } }" % (run["optimizer"], hp),
        "schedule { constant {} }",
        "seed: %d" % c["seed"],
    ]
    if run["autocast"]:
        lines.append("precision { compute: BF16 }")
    return "\n".join(lines) + "\n"


def main():
    torch.set_num_threads(1)
    os.makedirs(OUT_DIR, exist_ok=True)

    init_model = build_model()
    features, labels = make_data()
    np.save(os.path.join(OUT_DIR, COMMON["features"]), features)
    np.save(os.path.join(OUT_DIR, COMMON["labels"]), labels)

    onnx_model = export_onnx(init_model, os.path.join(OUT_DIR, COMMON["model"]))
    init_shapes = {i.name: tuple(i.dims) for i in onnx_model.graph.initializer}
    with open(os.path.join(OUT_DIR, "initializers.txt"), "w") as f:
        for name, dims in init_shapes.items():
            f.write(" ".join([name] + [str(d) for d in dims]) + "\n")
    print("nodes:", [n.op_type for n in onnx_model.graph.node])
    print("initializers:", init_shapes)

    # Every ONNX initializer must be a model parameter of the same shape and value.
    params = dict(init_model.named_parameters())
    assert set(init_shapes) == set(params), (sorted(init_shapes), sorted(params))
    for init in onnx_model.graph.initializer:
        arr = numpy_helper.to_array(init)
        assert arr.shape == tuple(params[init.name].shape), init.name
        assert np.array_equal(arr, params[init.name].detach().numpy()), init.name

    for run in RUNS:
        name = run["name"]
        losses, trained = train_run(
            init_model, features, labels,
            optimizer_factory(run["optimizer"], run["hparams"]), run["autocast"])
        with open(os.path.join(OUT_DIR, name + "_losses.txt"), "w") as f:
            for v in losses:
                f.write("%.9g\n" % v)
        final_dir = os.path.join(OUT_DIR, name + "_final")
        shutil.rmtree(final_dir, ignore_errors=True)
        os.makedirs(final_dir)
        trained_params = dict(trained.named_parameters())
        for pname, shape in init_shapes.items():
            arr = trained_params[pname].detach().numpy().astype(np.float32)
            assert arr.shape == shape, (pname, arr.shape, shape)
            np.save(os.path.join(final_dir, pname + ".npy"), arr)
        with open(os.path.join(OUT_DIR, name + ".spec"), "w") as f:
            f.write(spec_text(run))
        print("%s: losses %s ... %s" % (
            name, " ".join("%.9g" % v for v in losses[:3]), "%.9g" % losses[-1]))


if __name__ == "__main__":
    main()
