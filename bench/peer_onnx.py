"""The CPU inference engines bench_unet times NaNscope against besides PyTorch:
one call of an ONNX graph exported by bench/export_onnx.py (the same UNet or
VAE decoder, the same inputs), in ONNX Runtime or OpenVINO on the CPU.

usage: peer_onnx.py onnxruntime|openvino EXPORT_DIR RUNS THREADS
Runs in .venv-bench (tools/bench_venv.sh), never in the oracle venv.
  onnxruntime  CPUExecutionProvider, all graph optimizations, THREADS intra-op
               threads, one inter-op thread, sequential execution
  openvino     core.compile_model on "CPU", INFERENCE_NUM_THREADS = THREADS,
               PERFORMANCE_HINT LATENCY, and INFERENCE_PRECISION_HINT f32: left
               to itself OpenVINO computes in bf16 on CPUs with AVX-512 BF16
               (Zen 4, Sapphire Rapids), and this row is f32
The first call's output is checked against PyTorch's (expected.npy): a relative
L2 error above 1e-3 refuses the row (exit 1, saying by how much).
Prints one JSON object, as bench/torch_unet.py does: {"load": s (reading and
compiling the graph), "first": s, "call": s (median of RUNS), "cores": CPU time /
wall time over the timed calls, "peak_rss_mb": MB, "loaded_rss_mb": MB,
"rel_l2": the check's error, "engine": name and version}.
Runs in its own process so that the peak resident memory is this engine's alone."""
import json
import os
import sys
import time

import numpy as np

from call_timing import measure, rss_mb

TOLERANCE = 1e-3  # relative L2 error against PyTorch f32: f32 engines land around 1e-6
engine, folder, runs, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
path = os.path.join(folder, "model.onnx")
with np.load(os.path.join(folder, "inputs.npz")) as npz:
    feeds = {name: npz[name] for name in npz.files}
expected = np.load(os.path.join(folder, "expected.npy"))

t0 = time.perf_counter()
if engine == "onnxruntime":
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    name = f"ONNX Runtime {ort.__version__}"

    def run():
        return session.run(None, feeds)[0]
elif engine == "openvino":
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(core.read_model(path), "CPU", {
        "INFERENCE_NUM_THREADS": threads,
        "INFERENCE_PRECISION_HINT": "f32",
        "PERFORMANCE_HINT": "LATENCY",
    })
    precision = compiled.get_property("INFERENCE_PRECISION_HINT")
    if precision != ov.Type.f32:
        sys.exit(f"peer_onnx.py: OpenVINO compiled the graph for {precision}, not f32")
    request = compiled.create_infer_request()
    name = f"OpenVINO {ov.__version__.split('-')[0]}"

    def run():
        return request.infer(feeds)[0]
else:
    sys.exit(f"peer_onnx.py: engine must be onnxruntime or openvino, not {engine!r}")
load = time.perf_counter() - t0
loaded_rss = rss_mb()


outputs = []


def call():
    start = time.perf_counter()
    out = run()
    elapsed = time.perf_counter() - start
    if not outputs:
        outputs.append(out)  # the first call's, checked before the timed calls
    return elapsed


def check():
    out = np.asarray(outputs[0], dtype=np.float64)
    ref = expected.astype(np.float64)
    if out.shape != ref.shape:
        sys.exit(f"peer_onnx.py: {name}'s output has shape {list(out.shape)}, PyTorch's {list(ref.shape)}; "
                 "row refused")
    err = float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30))
    if not np.isfinite(err):
        sys.exit(f"peer_onnx.py: {name}'s output or PyTorch's is not finite (NaN or Inf); row refused")
    if err > TOLERANCE:
        sys.exit(f"peer_onnx.py: {name}'s output differs from PyTorch's by a relative L2 error of {err:.3g} "
                 f"(allowed {TOLERANCE:g}, {err / TOLERANCE:.3g}x that); row refused")
    outputs.append(err)


result = measure(call, runs, after_first=check)
result.update({"load": load, "loaded_rss_mb": loaded_rss, "rel_l2": outputs[1], "engine": name})
print(json.dumps(result))
