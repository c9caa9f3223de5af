#!/bin/bash
# t_spill.sh: saves larger than the write buffer while the encoder is slow
# (-o write_buffer_mib=1,threads=1; -o spill=1 is the default), with the
# newest version compressed at once (-o raw_newest=0; t_rawnewest.sh tests
# the default, which keeps it raw). The blocks
# the workers cannot take are stored raw by the writer, which goes on, and
# compressed later by the background (src/compress.h).
#
#  1. A 96 MiB safetensors file of float32 weights, saved with gc off:
#     exact through the mount; once the background has compressed
#     everything (raw_waiting 0) the packs still hold the raw records it
#     replaced, an eighth of the file or more (the writer went on while
#     one worker encoded, on the other core), the file is stored in fewer
#     bytes than it has, and it reads exact, also after a remount.
#     The same save with -o spill=0 (the writer waits) leaves no such
#     garbage: the check can fail.
#  2. A second version a small step from the first, in the next
#     checkpoint-N directory: exact while raw and once settled; the older
#     version becomes a reverse delta against the newer. fsck and verify
#     clean.
#  3. kill -9 of the daemon at a random point in the 3 s after a save
#     past the buffer (while it compresses, or once done), SPILL_KILLS
#     times (default 3): fsck and verify clean, every fsync'd file exact,
#     and the next mount finishes the work.
set -euo pipefail
# shellcheck source=tests/lib.sh
. "$TESTLIB"

KILLS=${SPILL_KILLS:-3}
OPTS=write_buffer_mib=1,threads=1,gc_interval=0,raw_newest=0
weights_pair "$T/v1" "$T/v2" $((24 << 20)) 7
size=$(stat -c %s "$T/v1")

# garbage: bytes of the packs that no live block uses.
garbage() { echo $(($(stats_field pack_bytes) - $(stats_field stored_bytes))); }

log "1. a save past the write buffer, stored raw, compressed behind"
mount_fs "$OPTS"
mkdir -p "$MNT/run/checkpoint-1" "$MNT/run/checkpoint-2"
dd if="$T/v1" of="$MNT/run/checkpoint-1/model.safetensors" bs=1M conv=fsync status=none
same_file "$T/v1" "$MNT/run/checkpoint-1/model.safetensors"
wait_compressed 120
g=$(garbage)
[ "$g" -ge $((size / 8)) ] ||
    fail "only $g bytes of raw records were replaced: the writer waited for the encoder"
stored=$(file_stored /run/checkpoint-1/model.safetensors)
[ "$stored" -lt "$size" ] || fail "compressed behind, the file still takes $stored bytes"
same_file "$T/v1" "$MNT/run/checkpoint-1/model.safetensors"
remount_fs "$OPTS,spill=0"
dd if="$T/v1" of="$MNT/waited.bin" bs=1M conv=fsync status=none
same_file "$T/v1" "$MNT/waited.bin"
[ "$(stats_field raw_waiting)" = 0 ] || fail "-o spill=0 stored raw blocks"
[ "$(garbage)" -le $((g + 8 * 1048576)) ] ||
    fail "-o spill=0 made $(($(garbage) - g)) bytes of garbage"
rm "$MNT/waited.bin"
remount_fs "$OPTS"
same_file "$T/v1" "$MNT/run/checkpoint-1/model.safetensors"

log "2. the next version: raw, then compressed, then the older a reverse delta"
dd if="$T/v2" of="$MNT/run/checkpoint-2/model.safetensors" bs=1M conv=fsync status=none
same_file "$T/v2" "$MNT/run/checkpoint-2/model.safetensors"
same_file "$T/v1" "$MNT/run/checkpoint-1/model.safetensors"
wait_reverse 120 # compressed first, then the reverse delta
same_file "$T/v2" "$MNT/run/checkpoint-2/model.safetensors"
same_file "$T/v1" "$MNT/run/checkpoint-1/model.safetensors"
older=$(file_stored /run/checkpoint-1/model.safetensors)
[ "$older" -lt $((stored / 2)) ] ||
    fail "checkpoint-1 takes $older bytes after its reverse delta (was $stored)"
umount_fs
store_clean "after saves compressed behind"

log "3. kill -9 while compressing, $KILLS times"
for k in $(seq 1 "$KILLS"); do
    mount_fs "$OPTS"
    dd if="$T/v2" of="$MNT/k$k.bin" bs=1M conv=fsync status=none
    sleep "$(awk -v s="$RANDOM" 'BEGIN { srand(s); printf "%.2f", rand() * 3 }')"
    crash
    store_clean "after kill -9 number $k"
    mount_fs "$OPTS"
    for j in $(seq 1 "$k"); do same_file "$T/v2" "$MNT/k$j.bin"; done
    wait_compressed 120
    for j in $(seq 1 "$k"); do same_file "$T/v2" "$MNT/k$j.bin"; done
    umount_fs
done
store_clean "after the kills"
log "ok"
