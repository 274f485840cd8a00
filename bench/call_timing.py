"""What every Python baseline of bench_unet measures around its calls, in one
place (bench/torch_unet.py, torch_vae.py and peer_onnx.py; plain Python, so
both the oracle venv and .venv-bench import it).

rss_mb(): the process's resident memory now, in MB.
measure(call, runs, after_first=None): call() returns its own wall time in
seconds; the first call is timed apart (warm-up), after_first() runs after it
(e.g. to check its output), then RUNS calls: {"first": s, "call": the median,
"cores": CPU time / wall time over the timed calls, "peak_rss_mb": MB}."""
import resource
import time


def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def measure(call, runs, after_first=None):
    first = call()
    if after_first is not None:
        after_first()
    cpu0, wall0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    times = sorted(call() for _ in range(runs))
    cpu1, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - wall0
    cores = (cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime) / wall
    return {"first": first, "call": times[len(times) // 2], "cores": cores,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}
