#!/usr/bin/python3
"""Learning-rate schedule golden values from PyTorch's own schedulers.

Writes tests/golden/schedules/<case>.txt: a header line "# <spec schedule text>" with the
base lr and total steps, then one line per training step, "%d %.9g" (0-based step, the
learning rate that step uses). tests/engine/lr_schedule_test.cc checks mpc's
LearningRateAt against every line. Deterministic; run with /usr/bin/python3 (Debian's torch).

Each mpc schedule maps onto torch.optim.lr_scheduler as follows (W warmup steps, T total
steps, D = max(1, T - W - 1) decay steps, so the decay ends exactly at the last step):
  constant       no scheduler
  warmup_cosine  SequentialLR([LinearLR(1/W -> 1, W - 1 iters), CosineAnnealingLR(D, min_lr)], [W])
  warmup_linear  SequentialLR([LinearLR(1/W -> 1, W - 1 iters), LinearLR(1 -> min_lr/lr, D iters)], [W])
  step_decay     StepLR(step_size, gamma)
"""
import os

import torch
from torch.optim import lr_scheduler as S

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schedules")


def rates(make, base, total):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=base)
    sched = make(opt)
    out = []
    for _ in range(total):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        if sched is not None:
            sched.step()
    return out


def warmup(opt, w):
    return S.LinearLR(opt, start_factor=1.0 / w, end_factor=1.0, total_iters=w - 1)


CASES = [
    # name, spec schedule text, optimizer lr, total steps, scheduler factory
    ("constant", "constant {}", 0.1, 20, lambda o: None),
    ("warmup_cosine", "warmup_cosine { warmup_steps: 5 min_lr: 0.001 }", 0.1, 40,
     lambda o: S.SequentialLR(o, [warmup(o, 5), S.CosineAnnealingLR(o, T_max=40 - 5 - 1, eta_min=0.001)], [5])),
    ("warmup_linear", "warmup_linear { warmup_steps: 4 min_lr: 0.002 }", 0.05, 30,
     lambda o: S.SequentialLR(o, [warmup(o, 4), S.LinearLR(o, 1.0, 0.002 / 0.05, total_iters=30 - 4 - 1)], [4])),
    ("linear_no_warmup", "warmup_linear { min_lr: 0 }", 0.2, 25,
     lambda o: S.LinearLR(o, 1.0, 0.0, total_iters=25 - 0 - 1)),
    ("step_decay", "step_decay { step_size: 7 gamma: 0.5 }", 0.3, 30, lambda o: S.StepLR(o, step_size=7, gamma=0.5)),
]


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, text, base, total, make in CASES:
        with open(os.path.join(OUT, name + ".txt"), "w") as f:
            f.write("# schedule { %s } lr %r steps %d (torch %s)\n" % (text, base, total, torch.__version__))
            for step, lr in enumerate(rates(make, base, total)):
                f.write("%d %.9g\n" % (step, lr))
    print("wrote %d cases to %s" % (len(CASES), OUT))


if __name__ == "__main__":
    main()
