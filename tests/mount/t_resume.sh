#!/bin/bash
# t_resume.sh: a real training run through the mount resumes bit-exactly.
# scripts/check-resume trains the tiny GPT of scripts/train.py with every
# checkpoint written into the mount (rotation deletes old checkpoint-N trees),
# stops, resumes from the mount and compares per-step losses bit for bit
# with an uninterrupted run, for bf16 and fp32 weights. Then the store is
# remounted and every kept checkpoint, evaluated again from the mount, must
# give the validation loss logged when it was saved, bit for bit.
set -euo pipefail
# shellcheck source=tests/lib.sh
. "$TESTLIB"

SCRIPTS=$(cd "$(dirname "$TESTLIB")/.." && pwd)/scripts
need_torch

mount_fs
log "check-resume with all checkpoints in the mount"
"$SCRIPTS/check-resume" --keep "$MNT/work" >"$T/resume.log" 2>&1 ||
    { cat "$T/resume.log"; fail "resume through the mount was not exact"; }
remount_fs
drop_caches
for d in "$MNT"/work/check-resume-*/resumed/checkpoint-*; do
    train "$d evaluated as logged after remount" --eval-from "$d" --expect-logged
done
[ "$(stats_field delta_chunks)" -gt 0 ] || fail "no delta blocks for a training run"
umount_fs
