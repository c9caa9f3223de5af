#!/bin/bash
# t_reclaim.sh: space reclaimed while the store stays mounted (gc.h, bg.h).
#
#  1. ckptctl gc --threshold 100 beside the mount, over and over (every
#     sealed pack rewritten each time), while a writer keeps saving new
#     versions and pruning old ones, and a reader hashes the kept versions
#     of a file and a live file with O_DIRECT (no kernel cache) through a
#     1 MiB block cache: never an error, never a wrong byte, though the
#     records the reader's open files name move under it.
#  2. kill -9 of the daemon at random points of an online gc, RECLAIM_KILLS
#     times (default 3; scripts/reclaim-crash runs 20 and more): after each,
#     fsck and verify are clean and every fsync'd file reads back exact.
#  3. A full store (256 MiB tmpfs, default 64 MiB reserve): rm, prune and
#     gc while mounted, then a 100 MiB write succeeds.
#  4. Pruning a rotated checkpoint frees it although the kept one was a
#     delta against it (its blocks re-encoded standalone in the background).
#  5. An excp directory's packs shrink while mounted, with no command: the
#     background reclaim drops the exact records the re-encoding replaced.
set -euo pipefail
# shellcheck source=tests/lib.sh
. "$TESTLIB"

MIB=$((1 << 20))
KILLS=${RECLAIM_KILLS:-3}

packs_bytes() { du -sb "$STORE/packs" | cut -f1; }

# packs_shrink BYTES SECONDS WHAT: wait until the packs hold at most BYTES,
# failing after SECONDS; SECS is set to how long it took.
packs_shrink()
{
    local i=0
    while [ "$(packs_bytes)" -gt "$1" ]; do
        i=$((i + 1))
        [ "$i" -le $(($2 * 2)) ] || fail "packs still $(packs_bytes) bytes (want <= $1) $2 s after $3"
        sleep 0.5
    done
    SECS=$((i / 2))
}

# gc_json: ckptctl gc --json with ARGS beside the mount; fails unless the
# daemon ran it.
gc_json()
{
    local out
    out=$("$CKPTCTL" gc --json "$@" "$STORE") || fail "ckptctl gc $* beside the mount failed: $out"
    grep -q '"online": true' <<<"$out" || fail "ckptctl gc beside the mount ran offline: $out"
    echo "$out"
}

#### 1. gc under a reader and a writer

log "gc --threshold 100 in a loop under a writer and an O_DIRECT reader"
mount_fs "block_kib=64,cache_mib=1,gc_interval=1"
for i in 1 2 3; do
    rand_file "$REF/hist.$i" $((2 * MIB))
    cp "$REF/hist.$i" "$MNT/hist"
done
rand_file "$REF/live" $((3 * MIB))
cp "$REF/live" "$MNT/live"
sync
for i in 1 2 3; do md5sum <"$REF/hist.$i"; done | cut -d' ' -f1 | sort >"$T/hist.want"
live_sum=$(md5sum <"$REF/live" | cut -d' ' -f1)

end=$((SECONDS + 15))
( # writer: new versions of churn, and checkpoint-like directories rotated out
    i=0
    while [ $SECONDS -lt $end ]; do
        head -c $((MIB + i * 4096)) /dev/urandom >"$MNT/churn"
        mkdir -p "$MNT/ck-$i" && head -c $((512 * 1024)) /dev/urandom >"$MNT/ck-$i/w"
        [ $i -lt 2 ] || rm -rf "$MNT/ck-$((i - 2))"
        i=$((i + 1))
    done
) &
writer=$!
( # pruner + gc
    moved=0
    while [ $SECONDS -lt $end ]; do
        "$CKPTCTL" prune --keep-last 3 "$STORE" >/dev/null
        out=$(gc_json --threshold 100)
        moved=$((moved + $(json_field "$out" records_moved)))
    done
    echo "$moved" >"$T/moved"
) &
gcer=$!
passes=0
while [ $SECONDS -lt $end ]; do
    for f in "$MNT"/.ckptfs/versions/hist/v*; do
        dd if="$f" iflag=direct bs=1M status=none 2>"$T/dd.err" | md5sum | cut -d' ' -f1 ||
            fail "reading $f: $(cat "$T/dd.err")"
        [ ! -s "$T/dd.err" ] || fail "reading $f during gc: $(cat "$T/dd.err")"
    done | sort >"$T/hist.got"
    cmp -s "$T/hist.got" "$T/hist.want" || fail "pass $passes: versions of hist read wrong during gc: $(cat "$T/hist.got")"
    got=$(dd if="$MNT/live" iflag=direct bs=1M status=none 2>"$T/dd.err" | md5sum | cut -d' ' -f1)
    [ ! -s "$T/dd.err" ] || fail "reading live during gc: $(cat "$T/dd.err")"
    [ "$got" = "$live_sum" ] || fail "pass $passes: live read wrong during gc"
    passes=$((passes + 1))
done
wait "$writer" || fail "the writer failed"
wait "$gcer" || fail "the prune + gc loop failed"
moved=$(cat "$T/moved")
log "$passes reader passes, $moved records moved by gc meanwhile"
[ "$passes" -ge 3 ] || fail "only $passes reader passes in 15 s"
[ "$moved" -gt 0 ] || fail "gc moved no record: nothing was tested"
same_file "$MNT/live" "$REF/live"
umount_fs
store_clean "after gc under load"

#### 2. kill -9 during online gc

log "kill -9 at random points of an online gc, $KILLS times"
rm -rf "$STORE"
declare -a KEPT=()
cut=0 gc_ms=300
for k in $(seq "$KILLS"); do
    mount_fs "block_kib=4,gc_interval=0"
    for j in 1 2 3; do # garbage: versions of churn, pruned below
        head -c $((2 * MIB)) /dev/urandom >"$MNT/churn"
    done
    rand_file "$REF/keep-$k" $((MIB + k * 12345))
    check "write+fsync keep-$k" dd if="$REF/keep-$k" of="$MNT/keep-$k" bs=256K conv=fsync status=none
    KEPT+=("keep-$k")
    "$CKPTCTL" prune --keep-last 1 "$STORE" >/dev/null
    "$CKPTCTL" gc --grace 0 --threshold 100 "$STORE" >/dev/null 2>&1 &
    gcpid=$!
    sleep "$(printf '0.%03d' $((RANDOM % gc_ms)))"
    crash
    wait "$gcpid" || cut=$((cut + 1)) # the gc lost its daemon mid-way
    store_clean "after kill $k"
    mount_fs "block_kib=4,gc_interval=0"
    for f in "${KEPT[@]}"; do same_file "$MNT/$f" "$REF/$f"; done
    t0=$(date +%s%N)
    out=$(gc_json --grace 0 --threshold 100)
    # the next kill lands within the time a whole run took
    gc_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    gc_ms=$(( gc_ms < 20 ? 20 : gc_ms > 999 ? 999 : gc_ms ))
    for f in "${KEPT[@]}"; do same_file "$MNT/$f" "$REF/$f"; done
    umount_fs
    store_clean "after the gc that followed kill $k"
done
log "$cut of $KILLS kills interrupted a running gc"
[ "$KILLS" -lt 10 ] || [ "$cut" -ge $((KILLS / 3)) ] ||
    fail "only $cut of $KILLS kills hit a running gc: nothing was interrupted"

#### 3. full disk

log "a full 256 MiB store: rm + prune + gc while mounted, then 100 MiB fit"
DISK=$T/disk
mkdir "$DISK"
mount -t tmpfs -o size=256m tmpfs "$DISK" || fail "cannot mount a tmpfs on $DISK"
on_exit "umount '$DISK' 2>/dev/null || umount -l '$DISK'"
STORE=$DISK/store
mount_fs
rand_file "$REF/small" 100000
check "write+fsync small" dd if="$REF/small" of="$MNT/small" bs=64K conv=fsync status=none
rc=0
timeout 120 dd if=/dev/urandom of="$MNT/fill" bs=1M status=none 2>"$T/dd.err" || rc=$?
[ "$rc" -ne 124 ] || fail "the writer hung on a full store"
grep -q "No space left on device" "$T/dd.err" || fail "filling the store: status $rc, not ENOSPC: $(cat "$T/dd.err")"
log "full at $(stat -c %s "$MNT/fill") bytes; $(df -P -B1M "$DISK" | awk 'NR == 2 { print $4 }') MiB free"
check_fails "a 100 MiB write into the full store" "No space left on device" \
    dd if=/dev/urandom of="$MNT/more" bs=1M count=100 conv=fsync status=none
rm -f "$MNT/fill" "$MNT/more"
sleep 1.1
check "prune beside the full mount" "$CKPTCTL" prune --json --keep-within 1s "$STORE" >/dev/null
out=$(gc_json)
log "gc: $out"
rand_file "$REF/after" $((100 * MIB))
check "a 100 MiB write after reclaim" dd if="$REF/after" of="$MNT/after" bs=1M conv=fsync status=none
same_file "$MNT/after" "$REF/after"
same_file "$MNT/small" "$REF/small"
umount_fs
store_clean "after the full disk was reclaimed"
rm -rf "$STORE"
STORE=$T/store

#### 4. pruning what a kept version was a delta of

need_torch
log "training a tiny model natively (4 checkpoints)"
train run --tiny --out "$REF/run" --steps 40 --save-every 10 --eval-iters 0 --seed 11
rm -rf "$STORE"
mount_fs "gc_interval=1"
mkdir "$MNT/run"
for c in 10 20 30 40; do cp -r "$REF/run/checkpoint-$c" "$MNT/run/"; done
sync
before=$(packs_bytes)
rm -rf "$MNT/run/checkpoint-10" "$MNT/run/checkpoint-20" "$MNT/run/checkpoint-30"
check "prune --keep-last 1 beside the mount" "$CKPTCTL" prune --json --keep-last 1 "$STORE" >/dev/null
packs_shrink $((before * 4 / 10)) 60 "pruning 3 of 4 checkpoints ($before before)"
log "packs: $before -> $(packs_bytes) bytes within $SECS s of the prune, no gc command"
for f in model.safetensors optimizer.pt; do
    same_file "$MNT/run/checkpoint-40/$f" "$REF/run/checkpoint-40/$f"
done
umount_fs
store_clean "after pruning under deltas"

#### 5. lossy: the store shrinks while mounted

log "excp: packs shrink while mounted as old checkpoints are re-encoded"
rm -rf "$STORE"
mount_fs "gc_interval=1"
mkdir "$MNT/lossy"
setfattr -n user.ckptfs.policy -v excp "$MNT/lossy"
for c in 10 20 30 40; do cp -r "$REF/run/checkpoint-$c" "$MNT/lossy/"; done
sync
written=$(du -sb "$REF/run" | cut -f1)
peak=$(packs_bytes)
packs_shrink $((peak * 7 / 10)) 120 "the copy (peak $peak, written $written)"
log "packs: $peak -> $(packs_bytes) bytes ($written written) within $SECS s, no command"
for f in model.safetensors optimizer.pt; do
    same_file "$MNT/lossy/checkpoint-40/$f" "$REF/run/checkpoint-40/$f"
done
umount_fs
store_clean "after lossy reclaim"

