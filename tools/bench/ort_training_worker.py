"""ONNX Runtime training worker for tools/bench/bench.py (CPU, the `ort` variant of --torch-blas).

Run by bench.py as a child process, one per measurement, with onnxruntime-training 1.19.2
importable (it wants numpy < 2 and its optimizer package imports torch), e.g.

    PYTHONPATH=.venv-ort/lib/python3.11/site-packages:.venv/lib/python3.11/site-packages \\
        .venv/bin/python tools/bench/ort_training_worker.py '<json config>'

It trains the ONNX file the mpc row trains: onnxruntime.training.artifacts.generate_artifacts
(requires_grad: every finite float initializer except BatchNorm running statistics, the rest
frozen; loss CrossEntropyLoss on the `logits` output, reshaped to [N*T, V] when the labels are
per position; optimizer AdamW with the row's betas/eps/weight decay, or ORT's SGD, which has no
momentum and no weight decay), then onnxruntime.training.api (CheckpointState, Module,
Optimizer) on the CPU execution provider with --threads intra-op threads, on the same batches
in the same order. Each step (batch copy, Module forward+backward, Optimizer.step,
lazy_reset_grad, the loss as a Python float) is timed with time.perf_counter; warm-up dropped;
median. Prints one JSON line; on a failure {"error": <first line of ORT's message>, ...}.
"""
import ctypes
import gc
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import proc_status_bytes  # noqa: E402  (bench.py imports only the standard library)


def first_line(e):
    """The informative first line of an ORT exception (they are long one-liners)."""
    text = " ".join(str(e).split()) or type(e).__name__
    if "[ONNXRuntimeError]" in text:   # drop the C++ source location and signature in front
        text = text[text.index("[ONNXRuntimeError]"):]
    for marker in ("The gradient builder has not been registered: ", "No Op registered for ",
                   "failed to find NodeArg by name: ", "Failed to load model with error: "):
        if marker in text:
            return (marker + text.split(marker, 1)[1])[:240]
    return f"{type(e).__name__}: {text}"[:240]


def trainable(model, np, onnx, numpy_helper):
    """Every finite float initializer except BatchNorm running statistics (what the model trains)."""
    bn_stats = set()
    for node in model.graph.node:
        if node.op_type == "BatchNormalization":
            bn_stats.update(node.input[3:5])
    used = {i for node in model.graph.node for i in node.input}
    out = []
    for t in model.graph.initializer:
        if t.data_type != onnx.TensorProto.FLOAT or t.name in bn_stats or t.name not in used:
            continue
        if np.isfinite(numpy_helper.to_array(t)).all():
            out.append(t.name)
    return out


def main():
    cfg = json.loads(sys.argv[1])
    result = {"python": platform.python_version()}
    try:
        import numpy as np
        import onnx
        from onnx import helper, numpy_helper
        import onnxruntime
        from onnxruntime.training import artifacts, onnxblock
        from onnxruntime.training.api import CheckpointState, Module, Optimizer
    except Exception as e:  # noqa: BLE001
        print(json.dumps(dict(result, error=f"import: {first_line(e)}")), flush=True)
        return 0
    result.update(onnxruntime=onnxruntime.__version__, numpy=np.__version__, onnx=onnx.__version__)
    X = np.load(cfg["features"])
    Y = np.load(cfg["labels"])
    rss_before = proc_status_bytes("self", "VmRSS")
    work = tempfile.mkdtemp(prefix="mpc-bench-ort-")
    stage = "load"
    try:
        model = onnx.load(cfg["onnx"])
        params = trainable(model, np, onnx, numpy_helper)
        frozen = [t.name for t in model.graph.initializer if t.name not in params]
        out_name = "logits" if any(o.name == "logits" for o in model.graph.output) else model.graph.output[0].name
        if Y.ndim == 2:  # per-position labels: logits [N, T, V] -> [N*T, V], labels flattened
            shape = helper.make_tensor("ort_bench_flat_shape", onnx.TensorProto.INT64, [2],
                                       [cfg["batch"] * Y.shape[1], -1])
            model.graph.initializer.append(shape)
            frozen.append("ort_bench_flat_shape")
            model.graph.node.append(helper.make_node("Reshape", [out_name, "ort_bench_flat_shape"],
                                                     ["ort_bench_flat_logits"]))
            del model.graph.output[:]
            model.graph.output.append(helper.make_tensor_value_info("ort_bench_flat_logits",
                                                                    onnx.TensorProto.FLOAT, None))
            out_name = "ort_bench_flat_logits"
        if cfg.get("optimizer") == "sgd":
            optim = onnxblock.optim.SGD()
            result["optimizer"] = (f"ORT SGD (lr {cfg['lr']}; ORT's SGD has no momentum and no weight decay, so "
                                   f"this is not the row's SGD(momentum {cfg['momentum']}, wd {cfg['weight_decay']}))")
        else:
            optim = onnxblock.optim.AdamW(betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"],
                                          weight_decay=cfg["weight_decay"])
            result["optimizer"] = (f"ORT AdamW (lr {cfg['lr']}, betas ({cfg['beta1']}, {cfg['beta2']}), eps "
                                   f"{cfg['eps']}, wd {cfg['weight_decay']}, bias correction, adam_mode 1)")
        result["trained_initializers"] = len(params)
        result["frozen_initializers"] = len(frozen)
        stage = "generate_artifacts"
        artifacts.generate_artifacts(model, requires_grad=params, frozen_params=frozen,
                                     loss=artifacts.LossType.CrossEntropyLoss, optimizer=optim,
                                     artifact_directory=work, loss_input_names=[out_name])
        del model
        gc.collect()
        stage = "session"
        so = onnxruntime.SessionOptions()
        so.intra_op_num_threads = cfg["threads"]
        so.inter_op_num_threads = 1
        state = CheckpointState.load_checkpoint(os.path.join(work, "checkpoint"))
        # No eval model: nothing is evaluated, and ORT refuses to load some (a BatchNormalization exported
        # in training mode fails shape inference once generate_artifacts sets it to inference).
        module = Module(os.path.join(work, "training_model.onnx"), state, device="cpu", session_options=so)
        optimizer = Optimizer(os.path.join(work, "optimizer_model.onnx"), module)
        optimizer.set_learning_rate(cfg["lr"])
        module.train()
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except OSError:
            pass
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            pass
        stage = "training"
        b = cfg["batch"]
        nb = X.shape[0] // b
        times, losses = [], []
        for step in range(cfg["warmup"] + cfg["steps"]):
            t0 = time.perf_counter()
            j = step % nb
            xb = np.ascontiguousarray(X[j * b:(j + 1) * b])
            yb = np.ascontiguousarray(Y[j * b:(j + 1) * b].reshape(-1))
            loss = float(module(xb, yb))
            optimizer.step()
            module.lazy_reset_grad()
            losses.append(loss)
            times.append(time.perf_counter() - t0)
        max_rss = proc_status_bytes("self", "VmHWM")
        timed = times[cfg["warmup"]:]
        result.update(step_times=timed, median_s=statistics.median(timed), mean_s=statistics.fmean(timed),
                      first_step_s=times[0], losses=losses, max_rss=max_rss, rss_before_model=rss_before,
                      rss_growth=max_rss - rss_before, threads=cfg["threads"],
                      providers=onnxruntime.get_available_providers())
    except Exception as e:  # noqa: BLE001
        result["error"] = f"{stage}: {first_line(e)}"
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
