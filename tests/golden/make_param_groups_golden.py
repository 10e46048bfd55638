"""Generate PyTorch golden data for mpc's parameter groups and frozen parameters.

Claim checked by the data: with parameter groups (per-group weight decay and
learning-rate multiplier, the first group whose full-match regex names a parameter wins)
and frozen parameters, mpc's first 20 training steps of the golden MLP
(tests/golden/mlp, made by make_mlp_golden.py) match PyTorch's param_groups and
requires_grad=False step by step (relative 1e-4), and the frozen weights end
bit-identical to their initial values.

Reads tests/golden/mlp/{model.onnx,features.npy,labels.npy} (the initial weights are
the ONNX initializers, so this script does not depend on torch reproducing them) and
writes, for NAME in RUNS:

  NAME.spec         mpc.TrainSpec (protobuf text): the golden run plus param_groups/freeze
  NAME_losses.txt   20 lines, the loss of step i ("%.9g") before step i's update
  NAME_final/<initializer>.npy   float32 parameters after the 20 steps

Run with Debian's interpreter (torch, onnx, numpy):

    /usr/bin/python3 tests/golden/make_param_groups_golden.py
"""

import os
import re
import shutil

import numpy as np
import onnx
from onnx import numpy_helper
import torch
from torch import nn

import make_mlp_golden as mlp

OUT_DIR = mlp.OUT_DIR

# Shared by both runs: biases without weight decay, the last layer at half the rate
# (its bias is caught by the first group: first match wins), the first layer's weight frozen.
GROUPS = [
    {"pattern": r".*bias", "weight_decay": 0.0},
    {"pattern": r"6\..*", "lr_scale": 0.5},
]
FREEZE = [r"0\.weight"]

RUNS = [
    {"name": "groups_adamw", "optimizer": "adamw",
     "hparams": {"lr": 0.01, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.05}},
    {"name": "groups_sgd", "optimizer": "sgd",
     "hparams": {"lr": 0.1, "momentum": 0.9, "nesterov": False, "weight_decay": 0.01}},
]


def load_initial_model():
    """The golden MLP with the initial weights of tests/golden/mlp/model.onnx."""
    model = mlp.build_model()
    onnx_model = onnx.load(os.path.join(OUT_DIR, mlp.COMMON["model"]))
    state = {i.name: torch.from_numpy(numpy_helper.to_array(i).copy()) for i in onnx_model.graph.initializer}
    model.load_state_dict(state)
    return model, list(state)


def torch_param_groups(model, hp):
    """mpc's rule in torch terms: the first matching group sets weight decay / lr scale."""
    groups = [{"params": [], "weight_decay": g.get("weight_decay", hp["weight_decay"]),
               "lr": hp["lr"] * g.get("lr_scale", 1.0)} for g in GROUPS]
    rest = {"params": [], "weight_decay": hp["weight_decay"], "lr": hp["lr"]}
    for name, p in model.named_parameters():
        if any(re.fullmatch(f, name) for f in FREEZE):
            p.requires_grad_(False)
            continue
        target = rest
        for spec, group in zip(GROUPS, groups):
            if re.fullmatch(spec["pattern"], name):
                target = group
                break
        target["params"].append(p)
    return [g for g in groups + [rest] if g["params"]]


def make_optimizer(kind, hp, groups):
    if kind == "adamw":
        return torch.optim.AdamW(groups, lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"])
    return torch.optim.SGD(groups, lr=hp["lr"], momentum=hp["momentum"], nesterov=hp["nesterov"])


def train(run, features, labels):
    model, names = load_initial_model()
    model.train()
    opt = make_optimizer(run["optimizer"], run["hparams"], torch_param_groups(model, run["hparams"]))
    loss_fn = nn.CrossEntropyLoss()
    bs = mlp.COMMON["batch_size"]
    x_all, y_all = torch.from_numpy(features), torch.from_numpy(labels)
    losses = []
    for step in range(mlp.COMMON["steps"]):
        lo = step * bs
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x_all[lo:lo + bs]), y_all[lo:lo + bs])
        losses.append(loss.item())
        loss.backward()
        opt.step()
    return losses, model, names


def spec_text(run):
    text = mlp.spec_text({**run, "autocast": False}).replace("make_mlp_golden.py", "make_param_groups_golden.py")
    for g in GROUPS:
        fields = ['pattern: "%s"' % g["pattern"].replace("\\", "\\\\")]
        if "weight_decay" in g:
            fields.append("weight_decay: %r" % g["weight_decay"])
        if "lr_scale" in g:
            fields.append("lr_scale: %r" % g["lr_scale"])
        text += "param_groups { %s }\n" % " ".join(fields)
    for f in FREEZE:
        text += 'freeze: "%s"\n' % f.replace("\\", "\\\\")
    return text


def main():
    torch.set_num_threads(1)
    features = np.load(os.path.join(OUT_DIR, mlp.COMMON["features"]))
    labels = np.load(os.path.join(OUT_DIR, mlp.COMMON["labels"]))
    for run in RUNS:
        losses, trained, names = train(run, features, labels)
        name = run["name"]
        with open(os.path.join(OUT_DIR, name + "_losses.txt"), "w") as f:
            f.writelines("%.9g\n" % v for v in losses)
        final_dir = os.path.join(OUT_DIR, name + "_final")
        shutil.rmtree(final_dir, ignore_errors=True)
        os.makedirs(final_dir)
        params = dict(trained.named_parameters())
        for pname in names:
            np.save(os.path.join(final_dir, pname + ".npy"), params[pname].detach().numpy().astype(np.float32))
        with open(os.path.join(OUT_DIR, name + ".spec"), "w") as f:
            f.write(spec_text(run))
        print("%s: losses %s ... %.9g" % (name, " ".join("%.9g" % v for v in losses[:3]), losses[-1]))


if __name__ == "__main__":
    main()
