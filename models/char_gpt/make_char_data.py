"""Builds the character-level dataset for the GPT-style model from Debian's `fortunes`.

The corpus is every plain-text fortune file in /usr/share/games/fortunes (about 1.3 MB
of English; the strfile indexes *.dat and the *.u8 duplicates are skipped), read as
bytes in sorted file order. The vocabulary is the sorted set of bytes that occur
(about 100), written to vocab.txt as one decimal byte value per line. The text is cut
into non-overlapping windows of CONTEXT+1 bytes; a window's first CONTEXT ids are the
features and its last CONTEXT ids the labels (next character at every position). The
last 10% of windows are the evaluation split.

Writes into OUT_DIR (default: models/char_gpt/data):
  train_tokens.npy, train_targets.npy   int64 [N, CONTEXT]
  eval_tokens.npy,  eval_targets.npy    int64 [M, CONTEXT]
  vocab.txt

Run:  /usr/bin/python3 models/char_gpt/make_char_data.py [--context 256] [--out DIR]
Deterministic and idempotent (outputs are overwritten).
"""

import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS_DIR = "/usr/share/games/fortunes"


def read_corpus():
    if not os.path.isdir(CORPUS_DIR):
        sys.exit(f"{CORPUS_DIR} not found: install the Debian package `fortunes` (scripts/install-deps.sh does)")
    chunks = []
    for name in sorted(os.listdir(CORPUS_DIR)):
        path = os.path.join(CORPUS_DIR, name)
        if name.endswith((".dat", ".u8")) or os.path.islink(path) or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            chunks.append(f.read())
    return b"".join(chunks)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--out", default=os.path.join(HERE, "data"))
    args = parser.parse_args()
    text = np.frombuffer(read_corpus(), dtype=np.uint8)
    vocab = np.unique(text)
    ids = np.searchsorted(vocab, text).astype(np.int64)
    window = args.context + 1
    n = len(ids) // window
    windows = ids[: n * window].reshape(n, window)
    split = n - n // 10
    os.makedirs(args.out, exist_ok=True)
    for part, rows in (("train", windows[:split]), ("eval", windows[split:])):
        np.save(os.path.join(args.out, f"{part}_tokens.npy"), np.ascontiguousarray(rows[:, :-1]))
        np.save(os.path.join(args.out, f"{part}_targets.npy"), np.ascontiguousarray(rows[:, 1:]))
    with open(os.path.join(args.out, "vocab.txt"), "w") as f:
        f.write("".join(f"{int(b)}\n" for b in vocab))
    print(f"corpus {len(text)} bytes, vocab {len(vocab)}, windows {n} of {args.context} "
          f"(train {split}, eval {n - split}) -> {args.out}")


if __name__ == "__main__":
    main()
