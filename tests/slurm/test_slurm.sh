#!/usr/bin/env bash
# docs/sweep/README.md's Slurm job array on a real Slurm: a one-node cluster on
# localhost (Debian's munge, slurmctld and slurmd, a slurm.conf generated into a
# temporary folder, private ports and sockets, so a Slurm the machine may
# already run is untouched) runs the README's "Slurm job array" commands, taken
# from the README itself, on the example sweep (docs/sweep/example-spec.json),
# and the merged table must equal, cell by cell, the one `--workers 2` makes from
# the same spec: every column but the timings (cell, id, config, seed, size,
# device, verdict, origin, first bad step, summary). The comparison is shown to
# fail on a table with one cell's verdict changed before it is trusted.
#   test_slurm.sh NANSCOPE_CLI SOURCE_DIR
# Exit 77 (CTest: skipped), saying why, where the cluster cannot start: Slurm or
# munge not installed, not root (slurmd starts the jobs, as the user who
# submits them, only as root), fewer than 2 CPUs or 4 GiB (what slurm-array.sh
# asks per task), or a daemon that does not come up. Under CI=true, where
# tools/setup.sh installs Slurm and munge, only the lack of root (with no
# passwordless sudo to get it) and of those resources skips; a missing package
# or a daemon that does not start fails.
# Environment: NANSCOPE_SLURM_TIMEOUT (seconds to wait for the jobs, default
# 480), NANSCOPE_SLURM_KEEP=1 (keep the temporary folder), NANSCOPE_KERNEL_CACHE
# (passed to the jobs, as sbatch passes the whole environment).
set -euo pipefail
cli=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
src=$(cd "$2" && pwd)
timeout_s=${NANSCOPE_SLURM_TIMEOUT:-480}

skip() {
  echo "SKIPPED: $*"
  exit 77
}
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
# Something CI provides (tools/setup.sh installs it) is missing or broken.
cannot_start() {
  [ "${CI:-}" = true ] && fail "$* (CI=true: tools/setup.sh installs Slurm and munge, so the test must run)"
  skip "$*"
}

[ -x "$cli" ] || fail "$cli is not an executable"
for c in munged slurmctld slurmd sbatch squeue sinfo scancel python3; do
  command -v "$c" >/dev/null || cannot_start "$c is missing (tools/setup.sh installs munge, slurmctld, slurmd and slurm-client)"
done
if [ "$(id -u)" -ne 0 ]; then
  # slurmd runs jobs as their user, which only root can; rerun as root where that is
  # free, with a kernel cache of its own (root must not leave files in the caller's).
  if [ "${CI:-}" = true ] && [ -z "${NANSCOPE_SLURM_SUDO:-}" ] && sudo -n true 2>/dev/null; then
    echo "not root: rerunning under sudo"
    exec sudo -n env "PATH=$PATH" CI=true NANSCOPE_SLURM_SUDO=1 "NANSCOPE_SLURM_TIMEOUT=$timeout_s" \
      "NANSCOPE_SLURM_KEEP=${NANSCOPE_SLURM_KEEP:-}" "$0" "$@"
  fi
  skip "not root: slurmd starts jobs as their user only when it runs as root"
fi

cpus=$(nproc)
hw=$(slurmd -C 2>/dev/null | head -n 1) || true
mem=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$hw")
hw_cpus=$(sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' <<<"$hw")
if [ -z "$mem" ] || [ -z "$hw_cpus" ]; then cannot_start "slurmd -C describes no node: $hw"; fi
if [ "$hw_cpus" -lt "$cpus" ]; then cpus=$hw_cpus; fi
# slurm-array.sh asks for 2 CPUs and 4 GiB per task.
[ "$cpus" -ge 2 ] || skip "$cpus CPU(s): slurm-array.sh asks for 2 per task"
[ "$mem" -ge 4096 ] || skip "$mem MiB of memory: slurm-array.sh asks for 4 GiB per task"

work=$(mktemp -d "${TMPDIR:-/tmp}/nanscope-slurm-test.XXXXXX")
if [ -n "${NANSCOPE_SLURM_SUDO:-}" ] || [ -z "${NANSCOPE_KERNEL_CACHE:-}" ]; then
  export NANSCOPE_KERNEL_CACHE=$work/kernel-cache
fi
# munged insists that everyone may reach its socket's folder.
chmod 755 "$work"
mkdir -p "$work/munge" "$work/run" "$work/log" "$work/state" "$work/spool" "$work/slurm" "$work/local"
chmod 700 "$work/munge"
chmod 755 "$work/run"
pids=()
teardown() {
  set +e
  if [ "${#pids[@]}" -gt 0 ]; then
    # Jobs first (slurmd ends their processes), then the daemons, newest first.
    if squeue -h 2>/dev/null | grep -q .; then
      scancel --user="$(id -un)" 2>/dev/null
      for _ in $(seq 20); do squeue -h 2>/dev/null | grep -q . || break; sleep 0.5; done
    fi
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[i]}" 2>/dev/null; done
    for p in "${pids[@]}"; do
      for _ in $(seq 40); do kill -0 "$p" 2>/dev/null || break; sleep 0.25; done
      kill -KILL "$p" 2>/dev/null
    done
    wait 2>/dev/null
  fi
  if [ "${NANSCOPE_SLURM_KEEP:-}" = 1 ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap teardown EXIT
t0=$(date +%s)
step() { echo "== [$(($(date +%s) - t0)) s] $*"; }
show_logs() {
  for f in "$work"/log/*; do
    echo "--- ${f#"$work"/} (last 30 lines)"
    tail -n 30 "$f"
  done
}

# --- the cluster ---
step "munged, slurmctld, slurmd ($cpus CPUs, $mem MiB)"
dd if=/dev/urandom of="$work/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$work/munge/munge.key"
read -r ctld_port slurmd_port < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
host=$(hostname -s 2>/dev/null || uname -n)
export SLURM_CONF=$work/slurm.conf
cat >"$SLURM_CONF" <<CONF
ClusterName=nanscope-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$work/run/munge.socket
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/run/slurmctld.pid
SlurmdPidFile=$work/run/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/builtin
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=sweep Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
munged --foreground --key-file="$work/munge/munge.key" --socket="$work/run/munge.socket" \
  --pid-file="$work/munge/munged.pid" --seed-file="$work/munge/munged.seed" \
  --log-file="$work/log/munged.log" >"$work/log/munged.out" 2>&1 &
pids+=($!)
for _ in $(seq 40); do [ -S "$work/run/munge.socket" ] && break; sleep 0.25; done
[ -S "$work/run/munge.socket" ] || { show_logs; cannot_start "munged did not start"; }
slurmctld -D -f "$SLURM_CONF" >"$work/log/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" -N "$host" >"$work/log/slurmd.out" 2>&1 &
pids+=($!)
state=
for _ in $(seq 120); do
  state=$(sinfo -h -n "$host" -o %t 2>/dev/null) || true
  [ "$state" = idle ] && break
  kill -0 "${pids[1]}" 2>/dev/null || { show_logs; cannot_start "slurmctld exited"; }
  kill -0 "${pids[2]}" 2>/dev/null || { show_logs; cannot_start "slurmd exited"; }
  sleep 0.5
done
[ "$state" = idle ] || { show_logs; cannot_start "node $host is not idle after 60 s (state: ${state:-none})"; }

# --- the README's commands, from the README, on a copy of the example spec ---
# The copy's preset is made absolute; its "out" stays relative (sweep-out beside the spec).
spec_text=$(sed 's|"preset": *"\([^"/][^"]*\)"|"preset": "'"$src"'/docs/sweep/\1"|' "$src/docs/sweep/example-spec.json")
grep -q "\"preset\": \"$src/" <<<"$spec_text" || fail "could not make the example spec's preset absolute"
printf '%s\n' "$spec_text" >"$work/slurm/spec.json"
printf '%s\n' "$spec_text" >"$work/local/spec.json"
readme_cmds=$(awk '/^## Slurm job array/ { s = 1; next }
  s && /^## / { exit }
  s && /^```/ { if (b) exit; b = 1; next }
  b' "$src/docs/sweep/README.md")
# shellcheck disable=SC2016 # literal text of the README
for want in 'N=$(' 'sbatch --array' 'slurm-array.sh spec.json' 'sbatch --dependency=' 'sweep spec.json --merge'; do
  grep -qF -- "$want" <<<"$readme_cmds" || fail "docs/sweep/README.md's Slurm block lacks \"$want\": $readme_cmds"
done
# The block names the script as the source tree holds it; the jobs run in the spec's folder.
printf '%s\n' "${readme_cmds//docs\/sweep\/slurm-array.sh/$src/docs/sweep/slurm-array.sh}" >"$work/slurm/submit.sh"
step "docs/sweep/README.md's Slurm commands:"
cat "$work/slurm/submit.sh"
# The README's commands call nanscope-cli; sbatch passes PATH on to the jobs.
PATH="$(dirname "$cli"):$PATH"
export PATH
(cd "$work/slurm" && bash -euo pipefail submit.sh) 2>&1 | tee "$work/submit.out" ||
  { show_logs; fail "the README's Slurm commands failed"; }
n=$("$cli" sweep "$work/slurm/spec.json" --count)
merge_job=$(sed -n 's/^Submitted batch job \([0-9]*\)$/\1/p' "$work/submit.out" | tail -n 1)
[ "$(grep -c '^Submitted batch job' "$work/submit.out")" = 2 ] || fail "expected two submitted jobs"

step "waiting for $n array tasks and the merge (at most $timeout_s s)"
deadline=$(($(date +%s) + timeout_s))
last=
while squeue -h | grep -q .; do
  now=$(squeue -h -o '%i %T %r' | tr '\n' ';')
  if [ "$now" != "$last" ]; then echo "   [$(($(date +%s) - t0)) s] $now"; fi
  last=$now
  state=$(sinfo -h -n "$host" -o %t)
  case $state in down* | drain* | fail*) show_logs; fail "node $host is $state" ;; esac
  [ "$(date +%s)" -lt "$deadline" ] || { show_logs; squeue; fail "jobs still queued after $timeout_s s"; }
  sleep 2
done
step "Slurm done"
merge_log=$work/slurm/slurm-$merge_job.out
[ -f "$merge_log" ] || { show_logs; fail "the merge job $merge_job left no $merge_log"; }
cat "$merge_log"
grep -q "^$n of $n cells finished" "$merge_log" || {
  tail -n 20 "$work"/slurm/nanscope-sweep-*.log
  fail "the merge job did not find all $n cells finished"
}
logs=("$work"/slurm/nanscope-sweep-*_*.log)
[ "${#logs[@]}" = "$n" ] || fail "expected $n array task logs, found ${#logs[@]}"
done_cells=$(cat "${logs[@]}" | grep -c '^cell [0-9]* (.*): done$') || true
[ "$done_cells" = "$n" ] || fail "expected $n cells run by array tasks, found $done_cells"

# --- the same spec with local workers ---
step "nanscope-cli sweep spec.json --workers 2"
(cd "$work/local" && "$cli" sweep spec.json --workers 2 >"$work/local.out" 2>&1) || {
  tail -n 30 "$work/local.out"
  fail "the local sweep failed"
}
tail -n 1 "$work/local.out"

# --- cell by cell ---
compare() {
  python3 - "$1" "$2" <<'PY'
import csv, sys
keys = ["cell", "id", "config", "seed", "size", "device", "verdict", "origin", "first_bad_step", "summary"]
def rows(path):
    with open(path, newline="") as f:
        r = list(csv.DictReader(f))
    missing = [k for k in keys if r and k not in r[0]]
    if missing:
        sys.exit(f"{path}: no column {missing}")
    return r
a, b = rows(sys.argv[1]), rows(sys.argv[2])
bad = 0
if len(a) != len(b):
    print(f"{len(a)} rows against {len(b)}")
    bad += 1
for x, y in zip(a, b):
    for k in keys:
        if x[k] != y[k]:
            print(f"cell {x['cell']} ({x['id']}): {k} {x[k]!r} (Slurm) != {y[k]!r} (--workers 2)")
            bad += 1
    if x["verdict"] in ("", "not run", "unreadable report"):
        print(f"cell {x['cell']} ({x['id']}): verdict {x['verdict']!r}")
        bad += 1
print(f"{len(a)} cells, {bad} difference(s); verdicts:",
      ", ".join(sorted({f"{r['verdict']}" for r in a})))
sys.exit(1 if bad else 0)
PY
}
slurm_csv=$work/slurm/sweep-out/summary.csv
local_csv=$work/local/sweep-out/summary.csv
[ "$(($(wc -l <"$slurm_csv") - 1))" -ge "$n" ] || fail "$slurm_csv lacks rows"
# First the comparison must see one changed cell (the middle one's verdict).
python3 - "$slurm_csv" "$work/corrupt.csv" <<'PY'
import csv, sys
with open(sys.argv[1], newline="") as f:
    r = list(csv.DictReader(f))
r[len(r) // 2]["verdict"] += "-changed"
with open(sys.argv[2], "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(r[0].keys()))
    w.writeheader()
    w.writerows(r)
PY
if compare "$work/corrupt.csv" "$local_csv" >"$work/corrupt.out"; then
  cat "$work/corrupt.out"
  fail "the comparison passed a table with one cell changed"
fi
grep -q -- "-changed" "$work/corrupt.out" || { cat "$work/corrupt.out"; fail "the comparison missed the changed cell"; }
step "Slurm's table against --workers 2's"
compare "$slurm_csv" "$local_csv" || fail "the Slurm sweep's table differs from --workers 2's"
cat "$work/slurm/sweep-out/summary.md"
step "ok"
