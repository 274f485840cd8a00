#!/bin/bash
# One sweep cell per Slurm array task: sbatch --array=0-$((N-1)) slurm-array.sh SPEC.json
#SBATCH --job-name=nanscope-sweep
#SBATCH --cpus-per-task=2
#SBATCH --mem=4G
#SBATCH --time=00:30:00
#SBATCH --output=nanscope-sweep-%A_%a.log
set -euo pipefail
SPEC=${1:?usage: sbatch --array=0-N slurm-array.sh SPEC.json}
# A cell whose report exists is skipped, so a requeued task resumes.
exec nanscope-cli sweep "$SPEC" --cell "${SLURM_ARRAY_TASK_ID}"
