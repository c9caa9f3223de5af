#!/bin/bash
# t_rawnewest.sh: the newest version is kept raw (-o raw_newest=1, the
# default), so it reads without decoding; history pays in the background.
#
#  1. A 32 MiB safetensors file of float32 weights, saved with fsync: once
#     the background is idle its blocks are still raw (ckptctl stats:
#     raw_newest, not raw_waiting), the file takes its full size, and it
#     reads exact, also cold.
#  2. The next version, in the next checkpoint-N directory: now it is kept
#     raw, and the first becomes reverse deltas against it (less than half
#     its size). Both exact, also cold.
#  3. Remounted with -o raw_newest=0: the holds go, the newest is
#     compressed too, both still exact; fsck and verify clean.
set -euo pipefail
# shellcheck source=tests/lib.sh
. "$TESTLIB"

weights_pair "$T/v1" "$T/v2" $((8 << 20)) 11
size=$(stat -c %s "$T/v1")
c1=/run/checkpoint-1/model.safetensors c2=/run/checkpoint-2/model.safetensors

log "1. a save is kept raw while it is the newest"
mount_fs
mkdir -p "$MNT/run/checkpoint-1" "$MNT/run/checkpoint-2"
dd if="$T/v1" of="$MNT$c1" bs=1M conv=fsync status=none
wait_reverse 120
held=$(stats_field raw_newest)
[ "$held" -ge 30 ] || fail "only $held blocks of the newest version are kept raw"
s1=$(file_stored "$c1")
[ "$s1" -ge $((size - 65536)) ] || fail "the newest version takes $s1 of $size bytes: compressed"
drop_caches
same_file "$T/v1" "$MNT$c1"

log "2. the next version supersedes it: the older becomes reverse deltas"
dd if="$T/v2" of="$MNT$c2" bs=1M conv=fsync status=none
wait_reverse 120
s1=$(file_stored "$c1") s2=$(file_stored "$c2")
[ "$s1" -lt $((size / 2)) ] || fail "checkpoint-1 takes $s1 bytes once superseded"
[ "$s2" -ge $((size - 65536)) ] || fail "the newest version takes $s2 of $size bytes"
drop_caches
same_file "$T/v2" "$MNT$c2"
same_file "$T/v1" "$MNT$c1"

log "3. -o raw_newest=0 compresses the newest too"
remount_fs raw_newest=0
wait_reverse 120
[ "$(stats_field raw_newest)" = 0 ] || fail "blocks still held raw with -o raw_newest=0"
s2=$(file_stored "$c2")
[ "$s2" -lt $((size * 95 / 100)) ] || fail "with -o raw_newest=0 the newest still takes $s2 of $size bytes"
drop_caches
same_file "$T/v2" "$MNT$c2"
same_file "$T/v1" "$MNT$c1"
umount_fs
store_clean "after the newest was compressed"
log "ok"
