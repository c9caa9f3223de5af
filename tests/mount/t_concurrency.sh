#!/bin/bash
# t_concurrency.sh: 4 processes each writing a distinct 64 MiB random file at
# the same time, all byte-exact; 2 readers reading one file concurrently;
# concurrent random-offset writers (staging) next to streaming readers; all
# again after remount.
set -euo pipefail
# shellcheck source=tests/lib.sh
. "$TESTLIB"

MIB=$((1 << 20))
NW=4

# wait_all DESC PID...: wait for every pid, fail if any failed.
wait_all()
{
    local desc=$1 pid rc bad=0
    shift
    for pid in "$@"; do
        rc=0
        wait "$pid" || rc=$?
        [ "$rc" -eq 0 ] || { echo "$TNAME: $desc: job $pid exited with status $rc" >&2; bad=1; }
    done
    [ "$bad" -eq 0 ] || fail "$desc: some jobs failed"
}

for i in $(seq 1 $NW); do rand_file "$REF/w$i" $((64 * MIB)); done

mount_fs

log "$NW concurrent writers of 64 MiB"
pids=()
for i in $(seq 1 $NW); do
    # Different write sizes per writer: 1 MiB, 128 KiB, 4 KiB, 1 MiB+1.
    case $i in
        1) bs=1M ;; 2) bs=128K ;; 3) bs=4K ;; *) bs=1048577 ;;
    esac
    dd if="$REF/w$i" of="$MNT/w$i" bs=$bs status=none &
    pids+=($!)
done
wait_all "concurrent writers" "${pids[@]}"
for i in $(seq 1 $NW); do
    [ "$(stat -c %s "$MNT/w$i")" -eq $((64 * MIB)) ] || fail "w$i has size $(stat -c %s "$MNT/w$i")"
    cmp "$REF/w$i" "$MNT/w$i" || fail "w$i differs after concurrent writes"
done

log "2 concurrent readers of one file"
drop_caches
want=$(sha256sum <"$REF/w1")
pids=()
dd if="$MNT/w1" bs=1M status=none | sha256sum >"$T/r1" &
pids+=($!)
dd if="$MNT/w1" bs=7000 status=none | sha256sum >"$T/r2" &
pids+=($!)
wait_all "concurrent readers" "${pids[@]}"
[ "$(cat "$T/r1")" = "$want" ] || fail "reader 1 (bs=1M) saw different data"
[ "$(cat "$T/r2")" = "$want" ] || fail "reader 2 (bs=7000) saw different data"

# Readers at different offsets of the same file at the same time (python
# preads, random order), the page cache dropped first.
drop_caches
pids=()
for seed in 1 2; do
    python3 - "$MNT/w2" "$REF/w2" "$seed" <<'EOF' &
import os, random, sys
mnt, ref, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = random.Random(seed)
fm, fr = os.open(mnt, os.O_RDONLY), os.open(ref, os.O_RDONLY)
size = os.fstat(fr).st_size
for _ in range(400):
    off, ln = rng.randrange(size), rng.randrange(1, 3 << 20)
    if os.pread(fm, ln, off) != os.pread(fr, ln, off):
        sys.exit("pread(%d, %d) differs" % (ln, off))
EOF
    pids+=($!)
done
wait_all "concurrent random readers" "${pids[@]}"

log "random-offset writers beside streaming readers"
pids=()
for i in 1 2; do
    rand_file "$REF/s$i" $((8 * MIB))
    cp "$REF/s$i" "$MNT/s$i"
    python3 - "$REF/s$i" "$MNT/s$i" "$i" <<'EOF' &
import os, random, sys
ref, mnt, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = random.Random(seed)
fr, fm = os.open(ref, os.O_RDWR), os.open(mnt, os.O_RDWR)
for _ in range(300):
    off = rng.randrange(10 << 20)
    data = rng.randbytes(rng.randrange(1, 200000))
    os.pwrite(fr, data, off)
    os.pwrite(fm, data, off)
os.fsync(fm)
os.close(fr)
os.close(fm)
EOF
    pids+=($!)
done
for i in 3 4; do
    (cmp "$REF/w$i" "$MNT/w$i" || exit 1) &
    pids+=($!)
done
wait_all "random writers and readers" "${pids[@]}"
for i in 1 2; do same_file "$REF/s$i" "$MNT/s$i"; done

log "a reader following a writer; two writers sharing one file"
python3 - "$MNT" "$REF/shared" <<'EOF' || fail "reader following a writer / writers sharing a file"
import os, random, sys, threading
M = sys.argv[1]
# A reader (own fd, reopened each time) sees every byte written so far.
data = random.Random(1).randbytes(10 << 20)
w = os.open(M + "/follow", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
for i in range(0, len(data), 300001):
    os.write(w, data[i:i + 300001])
    r = os.open(M + "/follow", os.O_RDONLY)
    got = os.pread(r, len(data), 0)
    os.close(r)
    if got != data[:i + 300001]:
        sys.exit("reader of a file being written: %d bytes read, %d written, content %s" % (
            len(got), min(len(data), i + 300001), "differs" if len(got) == min(len(data), i + 300001) else "short"))
os.close(w)
if open(M + "/follow", "rb").read() != data:
    sys.exit("followed file differs after close")
# Two threads, each with its own fd, write disjoint 128 KiB pieces of one file.
ref = bytearray(16 << 20)
os.close(os.open(M + "/shared", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644))
errs = []
def writer(k):
    try:
        fd = os.open(M + "/shared", os.O_WRONLY)
        rng = random.Random(10 + k)
        order = list(range(64))
        rng.shuffle(order)
        for j in order:
            off = k * (8 << 20) + j * (128 << 10)
            b = rng.randbytes(128 << 10)
            ref[off:off + len(b)] = b
            os.pwrite(fd, b, off)
        os.close(fd)
    except Exception as e:
        errs.append(e)
ts = [threading.Thread(target=writer, args=(k,)) for k in (0, 1)]
for t in ts: t.start()
for t in ts: t.join()
if errs:
    sys.exit("writer error: %r" % errs)
if open(M + "/shared", "rb").read() != bytes(ref):
    sys.exit("file written by two writers differs")
open(sys.argv[2], "wb").write(ref)
EOF

# Many small files from several processes at once (create/commit in parallel).
log "parallel small files"
pids=()
for p in 1 2 3 4; do
    (
        mkdir "$MNT/small$p"
        for k in $(seq 1 100); do
            printf 'process %d file %d\n' "$p" "$k" >"$MNT/small$p/f$k"
        done
    ) &
    pids+=($!)
done
wait_all "parallel small files" "${pids[@]}"
for p in 1 2 3 4; do
    for k in 1 50 100; do
        [ "$(cat "$MNT/small$p/f$k")" = "process $p file $k" ] || fail "small$p/f$k content"
    done
    [ "$(ls "$MNT/small$p" | wc -l)" -eq 100 ] || fail "small$p has $(ls "$MNT/small$p" | wc -l) files"
done

remount_fs
log "verify after remount"
pids=()
for i in $(seq 1 $NW); do
    cmp "$REF/w$i" "$MNT/w$i" &
    pids+=($!)
done
wait_all "verification after remount" "${pids[@]}"
for i in 1 2; do same_file "$REF/s$i" "$MNT/s$i"; done
same_file "$REF/shared" "$MNT/shared"
[ "$(stats_field files)" -eq $((NW + 4 + 400)) ] || fail "ckptctl stats reports $(stats_field files) files, want $((NW + 4 + 400))"
umount_fs
