#!/usr/bin/python3
"""Tests for tools/plot_metrics.py, run as the user runs it (a subprocess), on a small
synthetic metrics file with what real runs produce: eval records (with the newer
metrics), a NaN loss written as the string "NaN", dynamic loss scaling with skipped
steps, tensor_stats records, and a resume that repeats steps (the later record wins).
"""

import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "tools", "plot_metrics.py")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def train(step, loss, scale=65536.0, skipped=False):
    return {"kind": "train", "step": step, "epoch": (step - 1) // 10, "loss": loss, "lr": 0.001 * step / 30,
            "loss_scale": scale, "skipped": skipped}


def synthetic_run():
    """30 steps, eval every 10; step 7's loss is NaN and skipped (the scale halves); the
    run is resumed from step 20's checkpoint after writing steps 21-22 and eval 20 once."""
    records = []
    for step in range(1, 23):
        nan = step == 7
        records.append(train(step, "NaN" if nan else 2.0 / step, 32768.0 if step >= 7 else 65536.0, skipped=nan))
        if step == 12:
            records.append({"kind": "tensor_stats", "step": 12, "tensor": "x", "amax": "Infinity"})
        if step % 10 == 0:
            records.append({"kind": "eval", "step": step, "epoch": step // 10 - 1, "loss": 1.0 / step,
                            "accuracy": 0.5 + step / 100, "examples": 100, "top_k": 5,
                            "top_k_accuracy": 0.8 + step / 200, "macro_f1": 0.4 + step / 100, "perplexity": -1})
            # The moving average's evaluation at the same step (spec ema.evaluate): its own series.
            records.append({"kind": "eval", "step": step, "epoch": step // 10 - 1, "loss": 0.9 / step,
                            "accuracy": 0.55 + step / 100, "examples": 100, "weights": "ema"})
    # The resume: steps 21 and 22 again (different losses) and onwards; step 25 skipped too.
    # (An older mpc appended like this; today's rewrites the file to step 20 and writes the
    # "resume" marker, which the plot ignores.)
    records.append({"kind": "resume", "step": 20})
    for step in range(21, 31):
        records.append(train(step, 0.05, 32768.0 if step < 25 else 16384.0, skipped=step == 25))
        if step == 30:
            records.append({"kind": "eval", "step": 30, "epoch": 2, "loss": 0.04, "accuracy": 0.9,
                            "examples": 100, "top_k": 5, "top_k_accuracy": 0.99, "macro_f1": 0.88, "perplexity": -1})
    records.append({"kind": "summary", "steps": 30, "wall_s": 1.5, "planned_peak_bytes": 1024, "skipped_steps": 2,
                    "final_accuracy": 0.9})
    return records


class PlotMetricsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def run_plot(self, *args):
        return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=120)

    def write_metrics(self, records, name="run.metrics.jsonl", tail=""):
        path = self.path(name)
        with open(path, "w") as f:
            f.write("".join(json.dumps(r) + "\n" for r in records) + tail)
        return path

    def assert_png(self, path):
        with open(path, "rb") as f:
            data = f.read()
        self.assertEqual(data[:8], PNG_SIGNATURE, "not a PNG")
        self.assertEqual(data[12:16], b"IHDR")
        width, height = struct.unpack(">II", data[16:24])
        self.assertTrue(600 <= width <= 2000 and 400 <= height <= 1500, f"odd size {width}x{height}")
        self.assertTrue(10_000 < len(data) < 150_000, f"{len(data)} bytes")

    def summary(self, stdout):
        return dict(line.split(": ", 1) for line in stdout.splitlines() if ": " in line)

    def test_synthetic_run(self):
        metrics = self.write_metrics(synthetic_run())
        out = self.path("plot.png")
        result = self.run_plot(metrics, "--out", out, "--title", "synthetic", "--summary")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assert_png(out)
        got = self.summary(result.stdout)
        self.assertEqual(got["train_steps"], "30")              # 32 train records, steps 21-22 twice
        self.assertEqual(got["train_duplicates_replaced"], "2")
        self.assertEqual(got["loss_non_finite"], "1")           # step 7's "NaN"
        self.assertEqual(got["loss_finite"], "29")
        self.assertEqual(got["skipped_steps"], "2")             # 7 and 25
        self.assertEqual(got["loss_scale_points"], "30")
        self.assertEqual(got["eval_steps"], "3")
        self.assertEqual(got["eval_accuracy_points"], "3")
        self.assertEqual(got["eval_macro_f1_points"], "3")
        self.assertEqual(got["eval_top_k_accuracy_points"], "3")
        self.assertEqual(got["eval_perplexity_points"], "0")    # -1: not applicable
        self.assertEqual(got["eval_duplicates_replaced"], "0")  # the EMA records are not duplicates
        self.assertEqual(got["ema_eval_points"], "2")           # steps 10 and 20
        self.assertEqual(got["malformed_lines"], "0")

    def test_later_record_wins(self):
        # A resume re-ran step 2, whose loss was NaN: the rerun's finite loss is what counts.
        records = [train(1, 1.0), train(2, "NaN"), train(1, 0.9), train(2, 0.8)]
        result = self.run_plot(self.write_metrics(records), "--out", self.path("p.png"), "--summary")
        self.assertEqual(result.returncode, 0, result.stderr)
        got = self.summary(result.stdout)
        self.assertEqual((got["train_steps"], got["train_duplicates_replaced"], got["loss_non_finite"]), ("2", "2", "0"))

    def test_default_out_and_partial_last_line(self):
        # A run killed mid-write leaves a partial line: warned about, the rest plotted; no
        # loss scaling and no eval: those panels say so. The PNG goes next to the metrics.
        records = [train(s, 1.0 / s, scale=1.0) for s in range(1, 40)]
        metrics = self.write_metrics(records, tail='{"kind":"train","st')
        result = self.run_plot(metrics, "--summary")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("not a JSON object", result.stderr)
        self.assertEqual(self.summary(result.stdout)["malformed_lines"], "1")
        self.assert_png(self.path("run.png"))

    def test_missing_file(self):
        result = self.run_plot(self.path("absent.jsonl"), "--out", self.path("p.png"))
        self.assertEqual(result.returncode, 1)
        self.assertIn("no such file", result.stderr)
        self.assertFalse(os.path.exists(self.path("p.png")))

    def test_empty_file(self):
        result = self.run_plot(self.write_metrics([]), "--out", self.path("p.png"))
        self.assertEqual(result.returncode, 1)
        self.assertIn("nothing to plot", result.stderr)
        self.assertFalse(os.path.exists(self.path("p.png")))


if __name__ == "__main__":
    unittest.main()
