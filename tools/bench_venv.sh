#!/usr/bin/env bash
# Makes .venv-bench, the benches' own Python venv for the CPU inference engines
# bench_unet times NaNscope against besides PyTorch: ONNX Runtime and OpenVINO,
# pinned from PyPI with everything they pull in. A plain venv over Debian's
# Python (no --system-site-packages: neither Debian's torch nor the oracle
# venv .venv sees these packages, and nothing here touches .venv). Idempotent:
# a second run checks the pins and installs nothing.
# Usage: tools/bench_venv.sh
set -euo pipefail
cd "$(dirname "$0")/.."

pins=(
  onnxruntime==1.32.0
  openvino==2026.4.1
  numpy==2.4.6
  # what the two pull in, pinned too so that every machine times the same thing
  flatbuffers==25.12.19 openvino-telemetry==2025.2.0 packaging==26.4 protobuf==7.36.2
)

py=/usr/bin/python3
if [ ! -x .venv-bench/bin/python ]; then
  echo "bench_venv: creating .venv-bench (ONNX Runtime, OpenVINO; about 360 MB)"
  "$py" -m venv .venv-bench
fi
if ! .venv-bench/bin/pip install -q --disable-pip-version-check "${pins[@]}"; then
  echo "bench_venv: pip could not install ${pins[*]} into .venv-bench" >&2
  exit 1
fi
.venv-bench/bin/python -c 'import onnxruntime, openvino; print("bench_venv: .venv-bench has onnxruntime", onnxruntime.__version__, "and openvino", openvino.__version__)'
