#!/bin/bash
# t_spill.sh: -o spill=1, saves larger than the write buffer while the
# encoder is slow (-o write_buffer_mib=1,threads=1). Blocks the workers
# cannot take go to an unnamed spill file in STORE/staging and are encoded
# from there (ingest.c spill): the writer goes on, memory stays bounded.
#
#  1. A 96 MiB float32 file and a second version a small step from it
#     (deltas coded from spilled blocks): both exact through the mount,
#     again after a remount; fsck and verify clean; the daemon opened a
#     spill file while saving (seen in /proc/PID/fd).
#  2. kill -9 while a big save spills: the store mounts again, a file
#     fsync'd before is exact, fsck and verify are clean, and nothing is
#     left in STORE/staging.
set -euo pipefail
# shellcheck source=tests/lib.sh
. "$TESTLIB"

OPTS=write_buffer_mib=1,threads=1,spill=1
/usr/bin/python3 - "$T/v1" "$T/v2" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(7)
w = (rng.standard_normal(24 << 20, dtype=np.float32) * 0.02)
open(sys.argv[1], "wb").write(w.tobytes())
step = np.zeros_like(w)
idx = rng.choice(w.size, w.size // 10, replace=False)
step[idx] = rng.standard_normal(idx.size, dtype=np.float32) * 1e-4
open(sys.argv[2], "wb").write((w + step).astype(np.float32).tobytes())
PY

log "1. saves past the write buffer"
mount_fs "$OPTS"
pid=$(daemon_pid)
# Watch the daemon's descriptors for the unnamed spill file while saving.
( while kill -0 "$pid" 2>/dev/null; do
      find "/proc/$pid/fd" -lname "*staging/#*" 2>/dev/null | grep -q . && { touch "$T/spilled"; exit 0; }
      sleep 0.01
  done ) &
watcher=$!
on_exit "kill $watcher 2>/dev/null || true"
mkdir -p "$MNT/run/checkpoint-1" "$MNT/run/checkpoint-2"
dd if="$T/v1" of="$MNT/run/checkpoint-1/w.bin" bs=1M status=none
dd if="$T/v2" of="$MNT/run/checkpoint-2/w.bin" bs=1M status=none
same_file "$T/v1" "$MNT/run/checkpoint-1/w.bin"
same_file "$T/v2" "$MNT/run/checkpoint-2/w.bin"
kill "$watcher" 2>/dev/null || true
[ -e "$T/spilled" ] || fail "no spill file was seen while saving 96 MiB past a 1 MiB buffer"
remount_fs "$OPTS"
same_file "$T/v1" "$MNT/run/checkpoint-1/w.bin"
same_file "$T/v2" "$MNT/run/checkpoint-2/w.bin"
sync "$MNT"
umount_fs
store_clean "after spilled saves"

log "2. kill -9 while spilling"
mount_fs "$OPTS"
dd if="$T/v1" of="$MNT/before.bin" bs=1M conv=fsync status=none
( for _ in 1 2 3 4; do cat "$T/v2"; done >"$MNT/big.bin" ) 2>/dev/null &
writer=$!
sleep 0.3
crash
wait "$writer" 2>/dev/null || true
[ -z "$(ls -A "$STORE/staging")" ] || fail "left in staging after the crash: $(ls -A "$STORE/staging")"
store_clean "after kill -9 while spilling"
mount_fs "$OPTS"
same_file "$T/v1" "$MNT/before.bin"
umount_fs
log "ok"
