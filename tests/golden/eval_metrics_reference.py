"""Reference values of mpc's evaluation metrics (engine/evaluation.h, EvalScorer), in float64
NumPy, for tests/engine/eval_metrics_test.cc. Written out by hand from the definitions
(scikit-learn is not a dependency): sklearn's precision_recall_fscore_support and
f1_score(average='macro') with zero_division=0, PyTorch's cross_entropy(label_smoothing)
and BCEWithLogitsLoss.

    /usr/bin/python3 tests/golden/eval_metrics_reference.py IN OUT

IN, written by the test:
  line 1: "softmax CLASSES TOP_K SMOOTHING LANGUAGE_MODEL" or "bce WIDTH"
  then one line per labelled row:
    softmax: "LABEL LOGIT_0 ... LOGIT_{C-1}"
    bce:     "TARGET_0 ... TARGET_{W-1} LOGIT_0 ... LOGIT_{W-1}"
  (values are float32 numbers printed as exact decimals)
OUT: one metric per line, "NAME V..." ("%.17g"): loss, accuracy and, for softmax,
  precision, recall, f1 (one value per class), macro_f1, top_k_accuracy (TOP_K > 1),
  perplexity (LANGUAGE_MODEL 1).

Conventions (what mpc documents):
  - accuracy: the first index of the maximum logit is the prediction (numpy's argmax).
  - top-k: the label counts when fewer than k logits are strictly greater than its own.
  - precision of a class never predicted, recall of a class never labelled: 0; F1 is the
    harmonic mean of precision and recall, 0 when both are 0.
  - macro F1: the mean over the classes that occur in the labels or the predictions
    (sklearn's default labels=unique_labels(y_true, y_pred)); the per-class arrays cover
    every class, 0 for a class that occurs in neither.
  - loss with label smoothing eps: -sum_c q_c log softmax(x)_c with q = (1-eps)*onehot + eps/C;
    the perplexity is exp of the mean unsmoothed cross-entropy.
"""

import sys

import numpy as np


def softmax_metrics(header, rows, out):
    classes, top_k, eps, language_model = int(header[1]), int(header[2]), float(header[3]), header[4] == "1"
    data = np.array(rows, dtype=np.float64)
    y = data[:, 0].astype(np.int64)
    x = data[:, 1:]
    assert x.shape[1] == classes
    mx = x.max(axis=1, keepdims=True)
    logp = x - mx - np.log(np.exp(x - mx).sum(axis=1, keepdims=True))
    q = np.full(x.shape, eps / classes)
    q[np.arange(len(y)), y] += 1 - eps
    ce = -logp[np.arange(len(y)), y]
    out["loss"] = [float(np.mean(-(q * logp).sum(axis=1)))]
    pred = np.argmax(x, axis=1)
    out["accuracy"] = [float(np.mean(pred == y))]
    precision, recall, f1 = np.zeros(classes), np.zeros(classes), np.zeros(classes)
    for c in range(classes):
        tp = np.sum((pred == c) & (y == c))
        predicted, actual = np.sum(pred == c), np.sum(y == c)
        precision[c] = tp / predicted if predicted else 0.0
        recall[c] = tp / actual if actual else 0.0
        f1[c] = 2 * precision[c] * recall[c] / (precision[c] + recall[c]) if precision[c] + recall[c] else 0.0
    present = sorted(set(y.tolist()) | set(pred.tolist()))
    out["precision"], out["recall"], out["f1"] = list(precision), list(recall), list(f1)
    out["macro_f1"] = [float(np.mean(f1[present]))]
    if top_k > 1:
        label_logit = x[np.arange(len(y)), y][:, None]
        out["top_k_accuracy"] = [float(np.mean((x > label_logit).sum(axis=1) < top_k))]
    if language_model:
        out["perplexity"] = [float(np.exp(np.mean(ce)))]


def bce_metrics(header, rows, out):
    width = int(header[1])
    data = np.array(rows, dtype=np.float64)
    y, x = data[:, :width], data[:, width:]
    loss = np.maximum(x, 0) - x * y + np.log1p(np.exp(-np.abs(x)))
    out["loss"] = [float(loss.mean())]
    out["accuracy"] = [float(np.mean((x > 0) == (y > 0.5)))]


def main():
    with open(sys.argv[1]) as f:
        lines = [line.split() for line in f if line.strip()]
    header, rows = lines[0], [[float(v) for v in line] for line in lines[1:]]
    out = {}
    if header[0] == "softmax":
        softmax_metrics(header, rows, out)
    else:
        bce_metrics(header, rows, out)
    with open(sys.argv[2], "w") as f:
        for name, values in out.items():
            f.write("%s %s\n" % (name, " ".join("%.17g" % v for v in values)))


if __name__ == "__main__":
    main()
