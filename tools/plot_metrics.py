#!/usr/bin/python3
"""Plots a training run's --metrics file (JSON Lines from mpc-train) as one PNG.

  tools/plot_metrics.py runs/fashion_mlp.metrics.jsonl [--out PNG] [--title T] [--summary]

Panels: the training loss per step (raw, light, with a moving average) and the eval
loss; the eval metrics (accuracy, and macro F1 / top-k accuracy / perplexity where the
records carry them); the learning rate; the loss scale (log axis) with skipped steps
marked. A panel with nothing to show says so instead of drawing an empty axis.

The record format is engine/metrics.{h,cc}: "kind" is train / eval / summary (other
kinds, e.g. tensor_stats and a resumed run's "resume" marker, are ignored); non-finite
numbers are the strings "NaN", "Infinity" and "-Infinity". A resumed run drops the
records after its checkpoint's step before it goes on; files of older mpc versions
repeat those steps instead: for each step the later record wins, as it describes the
run that went on. Runs with Debian's python3 and python3-matplotlib (Agg, no display).
Exit status 0 when the PNG was written, 1 with a message when the file is missing,
unreadable or holds no train/eval records.
"""

import argparse
import collections
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")  # before pyplot: no display on CI or servers
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.transforms as mtransforms  # noqa: E402

NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
# Eval metrics on the [0, 1] axis, in drawing order; perplexity has its own axis.
UNIT_METRICS = [("accuracy", "accuracy"), ("macro_f1", "macro F1"), ("top_k_accuracy", "top-k accuracy")]


class UsageError(Exception):
    """A problem with the input the user should see as one line, exit status 1."""


def number(value):
    """A record's number as a float (the non-finite strings included); None when absent or not a number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    return NON_FINITE.get(value) if isinstance(value, str) else None


def read_records(path):
    """The JSON objects of the file in order, and how many lines were not JSON objects
    (a run killed mid-write may leave a partial last line: warned about, not fatal)."""
    if not os.path.exists(path):
        raise UsageError(f"{path}: no such file (mpc-train writes it with --metrics FILE)")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
    except OSError as e:
        raise UsageError(f"{path}: cannot read: {e.strerror}")
    records, malformed = [], 0
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if not isinstance(record, dict):
            malformed += 1
            print(f"plot_metrics: {path}:{n}: not a JSON object, skipped", file=sys.stderr)
            continue
        records.append(record)
    return records, malformed


def latest_by_step(records, kind, weights="trained"):
    """{step: record} for records of `kind`; a repeated step (after a resume) keeps the
    later record. Also returns how many earlier records were replaced. Eval records of the
    weights' moving average ("weights": "ema", spec ema.evaluate) are a series of their own."""
    by_step, replaced = {}, 0
    for r in records:
        step = r.get("step")
        if r.get("kind") != kind or not isinstance(step, int) or r.get("weights", "trained") != weights:
            continue
        replaced += step in by_step
        by_step[step] = r
    return by_step, replaced


def series(by_step, key, keep=lambda v: True):
    """(steps, values) of `key` in step order, where the value is a number that passes `keep`."""
    steps, values = [], []
    for step in sorted(by_step):
        v = number(by_step[step].get(key))
        if v is not None and keep(v):
            steps.append(step)
            values.append(v)
    return steps, values


def moving_average(values, window):
    """Trailing mean over the last `window` finite values (a NaN loss does not poison it)."""
    out, recent, total = [], collections.deque(), 0.0
    for v in values:
        if math.isfinite(v):
            recent.append(v)
            total += v
            if len(recent) > window:
                total -= recent.popleft()
        out.append(total / len(recent) if recent else math.nan)
    return out


def collect(records):
    """Everything the panels draw, from the records (see latest_by_step for duplicates)."""
    train, train_replaced = latest_by_step(records, "train")
    evals, eval_replaced = latest_by_step(records, "eval")
    ema_evals, _ = latest_by_step(records, "eval", weights="ema")
    summaries = [r for r in records if r.get("kind") == "summary"]
    loss_steps, losses = series(train, "loss")
    top_k = next((int(r["top_k"]) for r in evals.values() if isinstance(r.get("top_k"), int) and r["top_k"] > 1), None)
    # The newer eval metrics are negative where they do not apply (engine/mpc.h EvalMetrics).
    present = lambda v: not v < 0  # noqa: E731  (keeps NaN, drops the -1 "not applicable")
    return {
        "train_steps": len(train), "train_replaced": train_replaced,
        "epochs": max((r["epoch"] + 1 for r in train.values() if isinstance(r.get("epoch"), int)), default=0),
        "eval_steps": len(evals), "eval_replaced": eval_replaced,
        "loss": (loss_steps, losses),
        "lr": series(train, "lr"),
        "loss_scale": series(train, "loss_scale"),
        "skipped": [s for s in sorted(train) if train[s].get("skipped") is True],
        "eval_loss": series(evals, "loss"),
        "ema_eval_loss": series(ema_evals, "loss"),
        "ema_accuracy": series(ema_evals, "accuracy"),
        "eval": {key: series(evals, key, present) for key, _ in UNIT_METRICS + [("perplexity", "")]},
        "top_k": top_k,
        # A resumed run writes one summary per session: the wall time is their sum.
        "summary": summaries[-1] if summaries else None,
        "wall_s": sum(w for w in (number(s.get("wall_s")) for s in summaries) if w is not None and math.isfinite(w)),
    }


def note(ax, text):
    """A panel with nothing to plot: say why, without axes."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=10, color="0.35", wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def mark_non_finite(ax, steps, values):
    """Red ticks along the panel's bottom edge at steps whose value was NaN/inf (which no y can show)."""
    bad = [s for s, v in zip(steps, values) if not math.isfinite(v)]
    if bad:
        edge = mtransforms.blended_transform_factory(ax.transData, ax.transAxes)
        ax.plot(bad, [0.02] * len(bad), "|", color="red", markersize=10, transform=edge,
                label=f"non-finite loss ({len(bad)})")


def plot_loss(ax, data, smooth):
    steps, losses = data["loss"]
    eval_steps, eval_losses = data["eval_loss"]
    if not steps and not eval_steps:
        return note(ax, "no loss recorded")
    if steps:
        window = smooth or max(1, len(steps) // 50)
        if window > 1:
            ax.plot(steps, losses, color="tab:blue", alpha=0.25, linewidth=0.7, label="train loss")
            ax.plot(steps, moving_average(losses, window), color="tab:blue", linewidth=1.6,
                    label=f"train loss, mean of {window} steps")
        else:  # too few steps to smooth: the raw loss is the line
            ax.plot(steps, losses, color="tab:blue", linewidth=1.4, label="train loss")
        mark_non_finite(ax, steps, losses)
    if eval_steps:
        ax.plot(eval_steps, eval_losses, "o-", color="tab:orange", markersize=4, linewidth=1, label="eval loss")
    ema_steps, ema_losses = data["ema_eval_loss"]
    if ema_steps:
        ax.plot(ema_steps, ema_losses, "o--", color="tab:green", markersize=4, linewidth=1, label="eval loss (EMA weights)")
    ax.set_title("Loss")
    ax.set_xlabel("step")
    ax.legend(fontsize=8)


def plot_eval(ax, data):
    drawn = False
    for key, label in UNIT_METRICS:
        steps, values = data["eval"][key]
        if steps:
            if key == "top_k_accuracy" and data["top_k"]:
                label = f"top-{data['top_k']} accuracy"
            ax.plot(steps, values, "o-", markersize=4, linewidth=1, label=label)
            drawn = True
    steps, values = data["ema_accuracy"]
    if steps:
        ax.plot(steps, values, "o--", markersize=4, linewidth=1, label="accuracy (EMA weights)")
        drawn = True
    steps, values = data["eval"]["perplexity"]
    pax = None
    if steps:
        # Perplexity is not on [0, 1]: its own axis on the right, or the panel's only one.
        pax = ax.twinx() if drawn else ax
        pax.plot(steps, values, "s--", color="tab:purple", markersize=4, linewidth=1, label="perplexity")
        pax.set_ylabel("perplexity")
        drawn = True
    if not drawn:
        return note(ax, "no eval records\n(the spec has no eval section, or the run stopped first)")
    final = data["eval"]["accuracy"][1]
    ax.set_title(f"Eval (final accuracy {final[-1]:.4f})" if final else "Eval")
    ax.set_xlabel("step")
    handles, labels = ax.get_legend_handles_labels()
    if pax is not None and pax is not ax:
        more_handles, more_labels = pax.get_legend_handles_labels()
        handles, labels = handles + more_handles, labels + more_labels
    ax.legend(handles, labels, fontsize=8, loc="best")


def plot_lr(ax, data):
    steps, lrs = data["lr"]
    if not steps:
        return note(ax, "no learning rate recorded")
    ax.plot(steps, lrs, color="tab:green", linewidth=1.4)
    ax.set_title("Learning rate")
    ax.set_xlabel("step")
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))


def plot_loss_scale(ax, data):
    steps, scales = data["loss_scale"]
    skipped = data["skipped"]
    scaled = any(math.isfinite(s) and s != 1 for s in scales)
    if not scaled and not skipped:
        ax.set_title("Loss scale")
        return note(ax, "off: 1 at every step\nno skipped steps")
    finite = [(s, v) for s, v in zip(steps, scales) if math.isfinite(v) and v > 0]
    if finite:
        ax.plot(*zip(*finite), color="tab:gray", linewidth=1.2, drawstyle="steps-post", label="loss scale")
        ax.set_yscale("log", base=2)
    if skipped:
        scale_at = dict(zip(steps, scales))
        ys = [scale_at.get(s, 1.0) for s in skipped]
        ys = [y if math.isfinite(y) and y > 0 else 1.0 for y in ys]
        ax.plot(skipped, ys, "v", color="red", markersize=5, label=f"skipped step ({len(skipped)})")
    ax.set_title(("Loss scale" if scaled else "Loss scale: off") + ("" if skipped else " (no skipped steps)"))
    ax.set_xlabel("step")
    ax.legend(fontsize=8)


def default_title(path, data):
    name = os.path.basename(path)
    for suffix in (".jsonl", ".metrics"):
        name = name[: -len(suffix)] if name.endswith(suffix) else name
    parts = [f"{data['train_steps']} steps"]
    if data["epochs"]:
        parts[0] += f" ({data['epochs']} epochs)"
    summary = data["summary"]
    if summary:
        parts.append(f"{data['wall_s']:.0f} s")
        if summary.get("stopped"):
            parts.append(f"stopped: {summary['stopped']}")
    return f"{name} — {', '.join(parts)}"


def draw(data, out, title, dpi, smooth):
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    plot_loss(axes[0][0], data, smooth)
    plot_eval(axes[0][1], data)
    plot_lr(axes[1][0], data)
    plot_loss_scale(axes[1][1], data)
    for ax in axes.flat:
        if ax.has_data():
            ax.grid(True, alpha=0.3)
    fig.suptitle(title, fontsize=13)
    fig.tight_layout()
    fig.savefig(out, dpi=dpi)
    plt.close(fig)


def print_summary(data, malformed, out):
    """What was plotted, one `key: value` per line (the test reads these)."""
    loss = data["loss"][1]
    lines = [
        ("train_steps", data["train_steps"]), ("train_duplicates_replaced", data["train_replaced"]),
        ("loss_finite", sum(math.isfinite(v) for v in loss)),
        ("loss_non_finite", sum(not math.isfinite(v) for v in loss)),
        ("lr_points", len(data["lr"][0])), ("loss_scale_points", len(data["loss_scale"][0])),
        ("skipped_steps", len(data["skipped"])),
        ("eval_steps", data["eval_steps"]), ("eval_duplicates_replaced", data["eval_replaced"]),
        ("eval_loss_points", len(data["eval_loss"][0])),
        ("ema_eval_points", len(data["ema_eval_loss"][0])),
    ]
    lines += [(f"eval_{key}_points", len(steps)) for key, (steps, _) in data["eval"].items()]
    lines += [("malformed_lines", malformed), ("png", out)]
    for key, value in lines:
        print(f"{key}: {value}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("metrics", help="the JSON Lines file mpc-train --metrics wrote")
    parser.add_argument("--out", help="the PNG to write (default: METRICS with .png for .metrics.jsonl/.jsonl)")
    parser.add_argument("--title", help="the figure's title (default: the run's name, steps and wall time)")
    parser.add_argument("--dpi", type=int, default=90, help="resolution (default 90: ~1000x630 px, < 150 KB)")
    parser.add_argument("--smooth", type=int, default=0, help="moving-average window in steps (default: steps/50)")
    parser.add_argument("--summary", action="store_true", help="print what was plotted (counts per series)")
    args = parser.parse_args(argv)

    out = args.out
    if not out:
        base = args.metrics
        for suffix in (".jsonl", ".metrics"):
            base = base[: -len(suffix)] if base.endswith(suffix) else base
        out = base + ".png"
    try:
        records, malformed = read_records(args.metrics)
        data = collect(records)
        if not data["train_steps"] and not data["eval_steps"]:
            raise UsageError(f"{args.metrics}: no train or eval records "
                             f"({len(records)} records, {malformed} unreadable lines): nothing to plot")
        draw(data, out, args.title or default_title(args.metrics, data), args.dpi, args.smooth)
    except UsageError as e:
        print(f"plot_metrics: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # e.g. the output directory does not exist
        print(f"plot_metrics: cannot write {out}: {e.strerror or e}", file=sys.stderr)
        return 1
    if args.summary:
        print_summary(data, malformed, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
