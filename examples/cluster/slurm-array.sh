#!/bin/sh
# A Slurm job array: sbatch --array=0-7 slurm-array.sh
# Each task pulls the environment (only missing layers) into node-local
# storage and runs its shard; strata reads SLURM_ARRAY_TASK_ID and
# SLURM_ARRAY_TASK_COUNT. Then: strata batch-merge --jobs jobs.jsonl results/shard-*.jsonl > all.jsonl
#SBATCH --job-name=strata-batch
#SBATCH --cpus-per-task=4
#SBATCH --output=logs/%A_%a.log
set -e
home=${TMPDIR:-/var/tmp}/strata-$USER
strata --home "$home" pull registry.example/team/swe-env:v1 -b env
mkdir -p results
strata --home "$home" batch jobs.jsonl -j "$SLURM_CPUS_PER_TASK" \
  --shard auto --out "results/shard-$SLURM_ARRAY_TASK_ID.jsonl"
