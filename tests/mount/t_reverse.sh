#!/bin/bash
# t_reverse.sh: reverse deltas (src/reverse.h) through a real mount.
#
#  1. Six versions of a checkpoint-k/model.safetensors family (float32
#     weights taking small steps) are saved while readers hash, with
#     O_DIRECT, every version in .ckptfs/versions and the live files, over
#     and over, as the background re-encodes the older versions against
#     the newer: never an error, never a wrong byte. Once settled, the
#     newest decodes alone (no block of it is a delta) and the older ones
#     are deltas, stored in fewer bytes.
#  2. kill -9 of the daemon at random points while it makes reverse deltas,
#     REVERSE_KILLS times (default 3; scripts/reverse-crash runs 20): after
#     each, fsck and verify are clean, every fsync'd version is exact, and
#     the next mount finishes the work.
#  3. A store of format 4 (no reverse_todo table): read-only commands ask
#     for a read-write open; a mount upgrades it and new versions pair up.
set -euo pipefail
# shellcheck source=tests/lib.sh
. "$TESTLIB"

KILLS=${REVERSE_KILLS:-3}

# mkckpt FILE STEP: a safetensors file of two float32 tensors (1.5 MiB): the
# same random weights, a seventh of them moved by STEP's small drift.
mkckpt()
{
    python3 - "$1" "$2" <<'PY'
import array, json, random, struct, sys
path, step = sys.argv[1], int(sys.argv[2])
sizes = {"w": 262144, "v": 131072}
data, hdr, off = b"", {"__metadata__": {"step": str(step)}}, 0
for name, n in sizes.items():
    r = random.Random(name)
    w = array.array("f", (r.gauss(0, 0.05) for _ in range(n)))
    rs = random.Random(f"{name}-{step}")
    for i in range(0, n, 7):  # a seventh of the weights moved, by step's drift
        w[i] += step * 1e-4 + rs.gauss(0, 1e-5)
    if sys.byteorder == "big":
        w.byteswap()
    b = w.tobytes()
    hdr[name] = {"dtype": "F32", "shape": [n], "data_offsets": [off, off + len(b)]}
    data += b
    off += len(b)
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)
PY
}

# hash_all: md5 of every committed version of checkpoint-*/model.safetensors
# (.ckptfs/versions: a file being written is not there yet), read with
# O_DIRECT (no kernel cache), sorted.
hash_all()
{
    local f
    for f in "$MNT"/.ckptfs/versions/checkpoint-*/model.safetensors/v*; do
        [ -e "$f" ] || continue
        dd if="$f" iflag=direct bs=1M status=none 2>>"$T/read.err" | md5sum | cut -d' ' -f1
    done | sort
}

#### 1. readers while the background makes reverse deltas

log "six versions saved while readers hash every version with O_DIRECT"
for k in 1 2 3 4 5 6; do mkckpt "$REF/ck.$k" "$k"; done
for k in 1 2 3 4 5 6; do md5sum <"$REF/ck.$k" | cut -d' ' -f1; done | sort >"$T/want.all"
mount_fs "block_kib=64,cache_mib=1"
stop=$T/stop
( # reader
    passes=0
    while [ ! -e "$stop" ]; do
        hash_all >"$T/got"
        # every hash read must be one of the versions written
        if comm -23 "$T/got" "$T/want.all" | grep -q .; then
            echo "wrong bytes: $(comm -23 "$T/got" "$T/want.all" | head -3)" >>"$T/read.err"
        elif [ -s "$T/got" ]; then
            passes=$((passes + 1))
        fi
    done
    echo "$passes" >"$T/passes"
) &
reader=$!
for k in 1 2 3 4 5 6; do
    mkdir "$MNT/checkpoint-$k"
    cp "$REF/ck.$k" "$MNT/checkpoint-$k/model.safetensors"
    sleep 0.3
done
wait_reverse 120
sleep 1
touch "$stop"
wait "$reader"
[ ! -s "$T/read.err" ] || fail "readers met errors: $(head -5 "$T/read.err")"
log "$(cat "$T/passes") reader passes, all exact"
[ "$(cat "$T/passes")" -ge 2 ] || fail "the readers made fewer than 2 passes"
hash_all >"$T/got"
[ "$(uniq "$T/got")" = "$(cat "$T/want.all")" ] || fail "after settling, the versions read back wrong"
for k in 1 2 3 4 5 6; do same_file "$MNT/checkpoint-$k/model.safetensors" "$REF/ck.$k"; done
newest=$("$CKPTCTL" log "$STORE" /checkpoint-6/model.safetensors | tail -1)
[[ "$newest" != *delta* ]] || fail "the newest version holds deltas: $newest"
oldest=$("$CKPTCTL" log "$STORE" /checkpoint-1/model.safetensors | tail -1)
[[ "$oldest" == *tensor-delta* ]] || fail "the oldest version holds no delta: $oldest"
s1=$(file_stored /checkpoint-1/model.safetensors) s6=$(file_stored /checkpoint-6/model.safetensors)
log "stored: checkpoint-1 $s1 bytes, checkpoint-6 $s6 bytes"
[ "$s1" -lt "$s6" ] || fail "the oldest version stores $s1 bytes, not fewer than the newest's $s6"
umount_fs
store_clean "after reverse deltas under readers"

#### 2. kill -9 while making reverse deltas

log "kill -9 while the background makes reverse deltas, $KILLS times"
rm -rf "$STORE"
cut=0
n=0
for i in $(seq "$KILLS"); do
    mount_fs "block_kib=64"
    for k in 1 2 3; do
        n=$((n + 1))
        mkckpt "$REF/kill.$n" "$((n * 3))"
        mkdir -p "$MNT/checkpoint-$n"
        check "write+fsync checkpoint-$n" dd if="$REF/kill.$n" of="$MNT/checkpoint-$n/model.safetensors" bs=256K conv=fsync status=none
    done
    sleep "0.$((RANDOM % 40))"
    [ "$(stats_field reverse_waiting)" = 0 ] || cut=$((cut + 1))
    crash
    store_clean "after kill $i"
    mount_fs "block_kib=64"
    for k in $(seq "$n"); do same_file "$MNT/checkpoint-$k/model.safetensors" "$REF/kill.$k"; done
    wait_reverse 60
    for k in $(seq "$n"); do same_file "$MNT/checkpoint-$k/model.safetensors" "$REF/kill.$k"; done
    umount_fs
    store_clean "after the mount that followed kill $i"
done
log "$cut of $KILLS kills came while reverse deltas were waiting"
[ "$KILLS" -lt 10 ] || [ "$cut" -ge $((KILLS / 3)) ] || fail "only $cut of $KILLS kills hit pending work"

#### 3. upgrading a format-4 store

log "a store of format 4 is upgraded by a mount"
rm -rf "$STORE"
mount_fs
mkdir "$MNT/checkpoint-1"
cp "$REF/ck.1" "$MNT/checkpoint-1/model.safetensors"
umount_fs
python3 - "$STORE/meta.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("DROP TABLE reverse_todo")
db.commit()
PY
expect_status 1 "ckptctl stats of a format-4 store" "$CKPTCTL" stats "$STORE"
grep -q "mount it read-write once" <<<"$ERR" || fail "the refusal does not say how to upgrade: $ERR"
mount_fs
same_file "$MNT/checkpoint-1/model.safetensors" "$REF/ck.1"
mkdir "$MNT/checkpoint-2"
cp "$REF/ck.2" "$MNT/checkpoint-2/model.safetensors"
wait_reverse 60
old=$("$CKPTCTL" log "$STORE" /checkpoint-1/model.safetensors | tail -1)
[[ "$old" == *tensor-delta* ]] || fail "after the upgrade, checkpoint-1 did not become a delta: $old"
same_file "$MNT/checkpoint-1/model.safetensors" "$REF/ck.1"
same_file "$MNT/checkpoint-2/model.safetensors" "$REF/ck.2"
umount_fs
store_clean "after the upgrade"
