#!/bin/bash
# One sweep cell per Slurm array task, submitted from the folder that holds the
# spec (docs/sweep/README.md):
#   N=$(nanscope-cli sweep spec.json --count)
#   sbatch --array=0-$((N-1)) slurm-array.sh spec.json
# The task starts in the submitting folder with the submitting shell's
# environment (sbatch's default --export=ALL): nanscope-cli is found on its
# PATH, and NANSCOPE_KERNEL_CACHE, NANSCOPE_DEVICE, ... apply as they would
# there. The folder (the spec, its "out" folder) must be one every node shares.
# The job name is what the merge's --dependency=singleton waits for.
#SBATCH --job-name=nanscope-sweep
#SBATCH --cpus-per-task=2
#SBATCH --mem=4G
#SBATCH --time=00:30:00
#SBATCH --output=nanscope-sweep-%A_%a.log
set -euo pipefail
SPEC=${1:?usage: sbatch --array=0-\$((N-1)) slurm-array.sh SPEC.json}
: "${SLURM_ARRAY_TASK_ID:?not a Slurm array task: submit with sbatch --array=0-\$((N-1))}"
# A cell whose report exists is skipped, so a requeued task resumes.
exec nanscope-cli sweep "$SPEC" --cell "$SLURM_ARRAY_TASK_ID"
