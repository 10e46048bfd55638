#!/usr/bin/env python3
"""Checks mpc-train's TensorBoard output with TensorBoard's own reader.

    .venv/bin/python tests/tools/check_tensorboard_with_tensorboard.py EVENT_DIR METRICS.jsonl

EVENT_DIR is one --tensorboard directory (one TensorBoard run: every events.out.tfevents.*
file in it), METRICS.jsonl the --metrics file of the same run. The events are loaded the
way TensorBoard's scalars dashboard loads them without its Rust data server: a
plugin_event_multiplexer.EventMultiplexer (keeping every event, no reservoir sampling)
behind a MultiplexerDataProvider, asked for the "scalars" plugin's time series
(read_scalars). Every scalar is compared with the metrics file: the same (tag, step) pairs,
none repeated, and each value the metrics value as float32.

Tags from metrics records (engine/tensorboard_writer.h, engine/metrics.cc):
  "train":        train/{loss,lr,loss_scale,skipped,grad_norm}, train/skipped_total (the
                  running count of skipped steps; a "resume" record restarts it, as the
                  resumed run's writer does), fp8/<key> for each key of its "fp8" object
  "tensor_stats": stats/<tensor>/{amax,zero_fraction,nonfinite,subnormal_fraction}
  "eval":         eval/{loss,accuracy,top_k_accuracy,macro_f1,perplexity} (those present),
                  eval_ema/... for the record with "weights":"ema"
  "summary", "resume": no scalars.

The metrics file prints the double with 9 significant digits and the event file holds it
rounded to float32; a value agrees when the float32 equals the float32 rounding of some
number that prints as the metrics' digits (exactly, except when the double lies within
half a unit of the 9th digit of a float32 rounding boundary). NaN agrees with NaN.

Exit status 0 and one summary line when everything agrees; 1 with every disagreement
listed otherwise; 2 for unusable input. Development only (tools/pyenv/setup.sh installs
tensorboard into .venv); tests/integration/tensorboard_reader_test.cc runs it when present.
"""

import decimal
import json
import math
import os
import sys

import numpy as np

# TensorBoard's modules log through absl/`logging`; keep stderr for our messages.
import logging

logging.getLogger("tensorboard").setLevel(logging.ERROR)

import tensorboard  # noqa: E402
from tensorboard import context  # noqa: E402
from tensorboard.backend.event_processing import data_provider  # noqa: E402
from tensorboard.backend.event_processing import plugin_event_accumulator  # noqa: E402
from tensorboard.backend.event_processing import plugin_event_multiplexer  # noqa: E402

RUN = "run"


def fail_usage(message):
    print(f"check_tensorboard_with_tensorboard: {message}", file=sys.stderr)
    sys.exit(2)


def number(value, where):
    """A metrics value as a Decimal (exact digits), or a float for NaN and infinities."""
    if isinstance(value, bool):
        return decimal.Decimal(int(value))
    if isinstance(value, str):
        special = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
        if value not in special:
            fail_usage(f"{where}: {value!r} is not a number")
        return special[value]
    if isinstance(value, decimal.Decimal):
        return value
    if isinstance(value, int):
        return decimal.Decimal(value)
    fail_usage(f"{where}: {value!r} is not a number")


def expected_scalars(metrics_path):
    """{(tag, step): metrics value} for a metrics file, with the line each came from."""
    expected = {}
    problems = []
    skipped_total = 0
    with open(metrics_path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{metrics_path}:{line_no}"
            try:
                # Numbers as Decimals of their exact text: no double rounding before the check.
                r = json.loads(line, parse_float=decimal.Decimal, parse_int=decimal.Decimal)
            except json.JSONDecodeError as e:
                fail_usage(f"{where}: not JSON: {e}")
            kind = r.get("kind")

            def add(tag, key, record=r):
                step = int(record["step"])
                value = number(record[key], f"{where}: \"{key}\"")
                if (tag, step) in expected:
                    problems.append(f"the metrics file repeats {tag} at step {step} ({where})")
                expected[(tag, step)] = (value, where)

            if kind == "train":
                for key in ("loss", "lr", "loss_scale", "skipped"):
                    add(f"train/{key}", key)
                skipped_total += bool(r["skipped"])
                add("train/skipped_total", "skipped_total", {"step": r["step"], "skipped_total": skipped_total})
                if "grad_norm" in r:
                    add("train/grad_norm", "grad_norm")
                for name in r.get("fp8", {}):
                    add(f"fp8/{name}", name, {"step": r["step"], name: r["fp8"][name]})
            elif kind == "tensor_stats":
                for key in ("amax", "zero_fraction", "nonfinite", "subnormal_fraction"):
                    if key in r:
                        add(f"stats/{r['tensor']}/{key}", key)
            elif kind == "eval":
                prefix = "eval_ema" if r.get("weights") == "ema" else "eval"
                for key in ("loss", "accuracy", "top_k_accuracy", "macro_f1", "perplexity"):
                    if key in r:
                        add(f"{prefix}/{key}", key)
            elif kind == "resume":
                skipped_total = 0  # the resumed run's writer counts its own skipped steps
            elif kind == "summary":
                pass
            else:
                problems.append(f"{where}: unknown record kind {kind!r}: this script does not know its tags")
    return expected, problems


def read_event_scalars(event_dir):
    """{(tag, step): [float32 values]} as TensorBoard's scalars data provider returns them."""
    if not os.path.isdir(event_dir):
        fail_usage(f"{event_dir}: not a directory")
    files = sorted(n for n in os.listdir(event_dir) if "tfevents" in n)
    if not files:
        fail_usage(f"{event_dir}: no events.out.tfevents.* file")
    multiplexer = plugin_event_multiplexer.EventMultiplexer(
        {RUN: event_dir}, size_guidance=plugin_event_accumulator.STORE_EVERYTHING_SIZE_GUIDANCE
    )
    multiplexer.Reload()
    provider = data_provider.MultiplexerDataProvider(multiplexer, event_dir)
    ctx = context.RequestContext()
    series = provider.read_scalars(ctx, experiment_id="", plugin_name="scalars", downsample=2**62)
    # Anything that is not a scalar would not be shown by the scalars dashboard: none expected.
    others = {}
    for plugin in multiplexer.ActivePlugins():
        tags = multiplexer.PluginRunToTagToContent(plugin).get(RUN, {})
        if plugin != "scalars" and tags:
            others[plugin] = sorted(tags)
    points = {}
    for tag, data in series.get(RUN, {}).items():
        for datum in data:
            points.setdefault((tag, datum.step), []).append(datum.value)
    return points, files, others


def float32(x):
    with np.errstate(over="ignore"):
        return np.float32(x)


def agrees(want, got):
    """Whether the event file's float32 `got` is the metrics value `want` as float32."""
    got = float32(got)
    if isinstance(want, float):  # NaN or an infinity
        return bool(np.isnan(got)) if math.isnan(want) else got == float32(want)
    if want == 0:
        return got == 0
    # The doubles that print as these digits lie within half a unit of the last digit of
    # the 9 the writer prints (%.9g); float32 rounding is monotonic, so the float32 values
    # they round to are those between the ends' roundings.
    half = decimal.Decimal(5).scaleb(want.adjusted() - 9)
    lo, hi = float32(float(want - half)), float32(float(want + half))
    return lo <= got <= hi


def main(argv):
    if len(argv) != 3:
        fail_usage("usage: check_tensorboard_with_tensorboard.py EVENT_DIR METRICS.jsonl")
    event_dir, metrics_path = argv[1], argv[2]
    expected, problems = expected_scalars(metrics_path)
    points, files, others = read_event_scalars(event_dir)

    for plugin, tags in others.items():
        problems.append(f"TensorBoard reads non-scalar data of plugin {plugin!r}: {', '.join(tags)}")
    for (tag, step), values in sorted(points.items()):
        if len(values) > 1:
            shown = ", ".join(str(float32(v)) for v in values)
            problems.append(f"TensorBoard has {tag} at step {step} {len(values)} times: {shown}")
        if (tag, step) not in expected:
            problems.append(
                f"TensorBoard has {tag} at step {step} (= {float32(values[0])!s}); the metrics file does not"
            )
    compared = 0
    for (tag, step), (want, where) in sorted(expected.items()):
        if (tag, step) not in points:
            problems.append(f"TensorBoard lacks {tag} at step {step} (metrics: {want}, {where})")
            continue
        got = points[(tag, step)][0]
        compared += 1
        if not agrees(want, got):
            problems.append(
                f"{tag} at step {step}: TensorBoard reads {float32(got)!s} (float32), "
                f"the metrics file says {want} ({where}), as float32 {float32(float(want))!s}"
            )

    if problems:
        print(
            f"check_tensorboard_with_tensorboard: {len(problems)} disagreement(s) between {event_dir} "
            f"(TensorBoard {tensorboard.__version__}) and {metrics_path}:",
            file=sys.stderr,
        )
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        if len(files) > 1 and any(len(v) > 1 for v in points.values()):
            print(
                f"  ({len(files)} event files: a resumed run logs again the steps its crashed run logged after "
                "the checkpoint; TensorBoard drops the older ones only after a SessionLog START event)",
                file=sys.stderr,
            )
        return 1
    tags = {tag for tag, _ in expected}
    steps = {step for _, step in expected}
    print(
        f"TensorBoard {tensorboard.__version__} agrees with {os.path.basename(metrics_path)}: "
        f"{len(tags)} tags, {compared} points compared"
        + (f" (steps {min(steps)}-{max(steps)})" if steps else "")
        + f", {len(files)} event file(s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
