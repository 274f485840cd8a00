#!/usr/bin/env bash
# Installs everything NaNscope needs on Debian 12, idempotently:
#   - build and runtime packages from apt (Qt5, OpenCL ICD + PoCL, spdlog, ...,
#     Oclgrind, the OpenCL simulator test_oclgrind runs the GPU kernels on
#     (Debian ships it without an /etc/OpenCL/vendors/*.icd file and none is
#     added here: NaNscope loads its ICD library itself, so other OpenCL
#     programs on the machine never see it; docs/oclgrind.md), and help2man,
#     lintian and the AppStream checker for the Debian package, munge,
#     slurmctld, slurmd and the Slurm client commands for the test that runs
#     the sweep as a Slurm job array on a one-node cluster (tests/slurm/), and
#     clang with libFuzzer for tools/fuzz.sh)
#   - a Python venv at .venv over Debian's PyTorch, with pinned diffusers and
#     transformers, used only by the test oracles and the model trainer.
# Usage: tools/setup.sh [--no-python]
set -euo pipefail
cd "$(dirname "$0")/.."

want_python=1
[ "${1:-}" = "--no-python" ] && want_python=0

apt_packages=(
  build-essential cmake ninja-build pkg-config git
  qtbase5-dev libqt5charts5-dev libqt5svg5-dev
  ocl-icd-opencl-dev opencl-headers opencl-clhpp-headers pocl-opencl-icd clinfo oclgrind
  libspdlog-dev nlohmann-json3-dev libpng-dev libcli11-dev libssl-dev
  libutf8proc-dev libgtest-dev libgmock-dev libbenchmark-dev
  xvfb xauth fonts-dejavu-core clang-format
  # packaging (packaging/, tools/package.sh, the `package` test): manual pages,
  # and the checks of the .deb, its desktop entry and its AppStream metadata
  help2man dpkg-dev appstream desktop-file-utils lintian
  # the Slurm test (tests/slurm/test_slurm.sh) starts its own daemons on private
  # ports and sockets; the packages' services are left alone
  munge slurmctld slurmd slurm-client
  # the fuzz targets (tools/fuzz.sh, docs/fuzzing.md): clang with libFuzzer and the sanitizer runtimes
  clang libclang-rt-dev
)
if [ "$want_python" = 1 ]; then
  # python3-scipy: k-diffusion's sampling.py (the k-diffusion oracle) imports scipy.integrate;
  # python3-psutil, python3-yaml: peft and accelerate import them (the LoRA oracle)
  apt_packages+=(python3-venv python3-torch python3-numpy python3-scipy libopenblas0-pthread python3-psutil python3-yaml)
fi

missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ "$want_python" = 1 ]; then
  py=/usr/bin/python3
  if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv over Debian's PyTorch"
    "$py" -m venv --system-site-packages .venv
  fi
  pins=(diffusers==0.31.0 transformers==4.47.1 tokenizers==0.21.0 safetensors==0.4.5 huggingface_hub==0.26.5)
  if ! .venv/bin/python - "${pins[@]}" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    if version(name) != want:
        sys.exit(1)
PY
  then
    echo "setup: installing pinned Python packages into .venv"
    # torch comes from Debian (python3-torch); never let pip replace it.
    .venv/bin/pip install -q --disable-pip-version-check "${pins[@]}" "numpy<2" pillow regex requests filelock importlib_metadata
  fi
  # k-diffusion (tests/oracles/kdiffusion_oracle.py) and the pure-Python modules its
  # sampling.py imports, without their dependencies (torch, scipy: Debian's; the
  # oracle loads sampling.py without k-diffusion's training-code package __init__).
  # peft and accelerate: diffusers' own load_lora_weights / fuse_lora in
  # tests/oracles/lora_oracle.py (peft 0.13.2 and accelerate 1.1.1 take torch
  # >= 1.13 and what the pins above bring; without their deps, so torch stays Debian's).
  nodeps=(k-diffusion==0.1.1.post1 torchsde==0.2.6 trampoline==0.1.2 torchdiffeq==0.2.5 peft==0.13.2 accelerate==1.1.1)
  if ! .venv/bin/python - "${nodeps[@]}" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    if version(name) != want:
        sys.exit(1)
PY
  then
    echo "setup: installing k-diffusion, peft, accelerate and their pure-Python imports into .venv (--no-deps)"
    .venv/bin/pip install -q --disable-pip-version-check --no-deps "${nodeps[@]}"
  fi
  torch_path=$(.venv/bin/python -c 'import torch; print(torch.__file__)')
  case "$torch_path" in
    /usr/lib/python3/dist-packages/*) ;;
    *) echo "setup: error: .venv uses a torch from $torch_path; expected Debian's python3-torch. Remove .venv and run again." >&2; exit 1 ;;
  esac
fi
echo "setup: ok"
