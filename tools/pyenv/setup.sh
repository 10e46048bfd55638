#!/usr/bin/env bash
# Creates .venv/ (ignored by git) with the pinned packages of requirements.txt beside this
# file: PyTorch 2.x with its ONNX exporters, onnx, onnxscript, transformers and timm, for
# generating models and references. PyPI's Linux torch wheel is the CUDA build and pulls
# several GB of NVIDIA wheels; it runs on the CPU too. CI never runs this script.
# Safe to run again: an existing environment is only brought up to the pins.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then "$PY" -m venv .venv; fi
.venv/bin/python -m pip install -q -r tools/pyenv/requirements.txt
.venv/bin/python -c "import torch, onnx, onnxscript; print('torch', torch.__version__, 'onnx', onnx.__version__, 'onnxscript', onnxscript.__version__)"
