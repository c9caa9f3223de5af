#!/bin/bash
# t_remote.sh: a store pushed to an S3 bucket (a real one-node Ceph RADOS
# Gateway, scripts/ceph-dev) and read back from it on a fresh store.
#
# A series is written through a mount (three versions of a model file, a
# safetensors checkpoint, small files, a file deleted afterwards, 40 MiB
# of noise so that a pack is uploaded in parts), then
# `ckptctl push` copies the store to s3://BUCKET/PREFIX; a second push sends
# nothing. The store is then mounted read-only beside an empty NEWSTORE
# mounted with -o remote=...,ro: the live tree and every version under
# .ckptfs/seq read the same on both, writes to the remote mount fail with
# EROFS, and what was read is cached in NEWSTORE (sparse packs and their
# .have maps). The original store is deleted; a second fresh NEWSTORE still
# reads every version byte-exact from the bucket alone. A later version
# pushed is seen by the next mount of the first NEWSTORE. Last, with the
# pack objects damaged in the bucket, `ckptctl verify --remote` reports
# them and reads fail with EIO, never wrong bytes.
#
# The gateway: $AWS_ENDPOINT_URL and keys from the environment when set,
# else scripts/ceph-dev starts one in /var/tmp/ckptfs-ceph (and stops it at
# the end). Without Ceph's packages the test is skipped, except under CI,
# where it fails.
#
# Then a writing mount with -o remote= (uploads behind the writer): ckptctl
# push beside it, a fresh read-only store sees its files, a second writing
# mount of the prefix is refused naming the holder, another store's push
# there is refused, and (when this test runs the gateway) a save while the
# gateway is down goes on locally and reaches the bucket after it is back.
# With local_gib, uploaded packs are dropped locally and read back from the
# bucket, by the mount and by ckptctl; a mount without remote= is refused.
# A push through tests/s3fault.py (every third request fails with 503 or
# 500, every reply delayed) completes and reads back exact. A push aborts
# the multipart uploads a killed one left.
set -euo pipefail
# shellcheck source=tests/lib.sh
. "$TESTLIB"

CEPH_DEV=${CEPH_DEV:-$(dirname "$TESTLIB")/../scripts/ceph-dev}
cdir=
if [ -z "${AWS_ENDPOINT_URL:-}" ]; then
    cdir=/var/tmp/ckptfs-ceph
    rc=0
    "$CEPH_DEV" status "$cdir" >/dev/null 2>&1 || {
        "$CEPH_DEV" start "$cdir" >/dev/null || rc=$?
        [ "$rc" -ne 0 ] || on_exit "\"$CEPH_DEV\" stop $cdir >/dev/null 2>&1 || true"
    }
    if [ "$rc" -eq 2 ] && [ "${CI:-}" != true ]; then
        echo "$TNAME: SKIP: no Ceph here (apt-get install ceph-mon ceph-osd ceph-mgr radosgw ceph-common)"
        exit 77
    fi
    [ "$rc" -eq 0 ] || fail "scripts/ceph-dev start $cdir failed (status $rc)"
    # shellcheck disable=SC1091
    . "$cdir/env"
fi
BUCKET=${CKPTFS_TEST_BUCKET:-ckptfs}
URL=s3://$BUCKET/t-remote-$$-$RANDOM
export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_ENDPOINT_URL AWS_REGION
S3_PURGE=$(dirname "$CEPH_DEV")/s3-purge
# purge_at_exit URL: the prefix goes when the test ends (the cluster is small).
purge_at_exit() { on_exit "\"$S3_PURGE\" $1 >/dev/null 2>&1 || true"; }
purge_at_exit "$URL"

# put REL BYTES: random bytes at REL in the mount and in $REF, fsync'd.
put()
{
    mkdir -p "$(dirname "$MNT/$1")" "$(dirname "$REF/$1")"
    head -c "$2" /dev/urandom >"$REF/$1"
    dd if="$REF/$1" of="$MNT/$1" bs=1M conv=fsync status=none
}

# step REL: change 64 KiB in the middle of REL, as a new version.
step()
{
    python3 - "$REF/$1" <<'PY'
import os, sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
m = len(b) // 2
b[m:m + 65536] = os.urandom(65536)
open(p, "wb").write(b)
PY
    dd if="$REF/$1" of="$MNT/$1" bs=1M conv=fsync status=none
}

# s3curl URL-PATH [curl args]: a signed request to the gateway.
s3curl()
{
    local path=$1
    shift
    curl -sf --aws-sigv4 "aws:amz:${AWS_REGION:-us-east-1}:s3" \
        --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
        -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$@" "$AWS_ENDPOINT_URL/$path"
}

# enc TEXT: TEXT for a query value ('/' as %2F: curl signs it so, RGW too).
enc() { printf %s "$1" | sed 's|/|%2F|g'; }

# s3has KEY: the object BUCKET/KEY exists (a listing; fails loudly when the
# listing itself fails, so that "absent" is never a failed request).
s3has()
{
    local out
    out=$(s3curl "$BUCKET?list-type=2&prefix=$(enc "$1")") ||
        fail "cannot list $1 in the bucket"
    echo "$out" | grep -q "<Key>$1</Key>"
}

# mount_at STORE DIR OPTS: a second mount beside $MNT, unmounted at exit.
mount_at()
{
    mkdir -p "$2"
    "$CKPTFS" "$1" "$2" -o "$3" || fail "ckptfs $1 $2 -o $3 failed"
    on_exit "fusermount3 -u $2 2>/dev/null || true"
    timeout 60 stat "$2" >/dev/null || fail "$2 does not answer"
}

# same_trees A B WHAT: every file under A and B has the same bytes.
same_trees()
{
    diff -r --no-dereference "$1" "$2" >"$T/diff" 2>&1 || {
        head -20 "$T/diff" >&2
        fail "$3: $1 and $2 differ"
    }
}

mount_fs keep_all
put run/model.bin $((6 << 20))
step run/model.bin
step run/model.bin
cp "$(dirname "$TESTLIB")/fixtures/model.safetensors" "$MNT/run/ckpt.safetensors"
cp "$MNT/run/ckpt.safetensors" "$REF/run/ckpt.safetensors"
for i in $(seq 1 20); do put "small/s$i" $((i * 101)); done
put gone.bin 300000
rm "$MNT/gone.bin" "$REF/gone.bin"
put big.bin $((40 << 20)) # a pack past 32 MiB: a multipart upload
sync "$MNT"
umount_fs

out=$("$CKPTCTL" push --remote "$URL" "$STORE") || fail "ckptctl push failed: $out"
echo "$out" | grep -q ", [1-9][0-9]* sent" || fail "the first push sent no pack: $out"
# A multipart upload a killed push left behind: the next push aborts it.
uploads() { s3curl "$BUCKET?prefix=$(enc "${URL#s3://"$BUCKET"/}/")&uploads=" ||
    fail "cannot list multipart uploads"; }
s3curl "${URL#s3://}/packs/99999999.pack?uploads=" -X POST | grep -q "<UploadId>" ||
    fail "cannot start a multipart upload"
uploads | grep -q "<UploadId>" || fail "the listing of multipart uploads does not show one started"
out=$("$CKPTCTL" push "$STORE") || fail "a second push (remote remembered) failed: $out"
uploads | grep -q "<UploadId>" && fail "a push left an unfinished multipart upload in place"
echo "$out" | grep -q ", 0 sent" || fail "a second push sent packs again: $out"

NEW=$T/new
mount_at "$STORE" "$T/local" ro
mount_at "$NEW" "$T/remote" "remote=$URL,ro"
same_trees "$REF" "$T/remote" "live tree from the bucket against the reference copies"
same_trees "$T/local/.ckptfs/seq" "$T/remote/.ckptfs/seq" "every version (.ckptfs/seq)"
[ "$(ls "$T/remote/.ckptfs/seq" | wc -l)" -ge 25 ] || fail ".ckptfs/seq of the remote mount lists too few versions"
expect_status 1 "touch in the read-only remote mount" touch "$T/remote/new"
err=$(touch "$T/remote/new" 2>&1 || true)
echo "$err" | grep -q "Read-only file system" || fail "a write to the remote mount did not fail with EROFS: $err"
ls "$NEW"/packs/*.have >/dev/null 2>&1 || fail "NEWSTORE keeps no fetched granule maps"
mkdir -p "$T/remote-b"
err=$("$CKPTFS" "$NEW" "$T/remote-b" -o "remote=$URL,ro" 2>&1) && fail "a second mount of a mounted copy was not refused"
echo "$err" | grep -q "in use" || fail "the refusal of a second mount of a copy says: $err"
fusermount3 -u "$T/local"
fusermount3 -u "$T/remote"
STORE=$NEW wait_daemon_gone
err=$("$CKPTCTL" push --remote "$URL" "$NEW" 2>&1) && fail "a push from a read-only copy was not refused"
echo "$err" | grep -q "read-only copy" || fail "the refusal of a push from a copy says: $err"

# The original store gone: a fresh NEWSTORE reads from the bucket alone.
mv "$STORE" "$T/store.kept"
mount_at "$T/new2" "$T/remote2" "remote=$URL,ro"
same_trees "$REF" "$T/remote2" "live tree, the original store gone"
v=$(ls "$T/remote2/.ckptfs/versions/run/model.bin" | wc -l)
[ "$v" -eq 3 ] || fail "model.bin has $v versions from the bucket, not 3"
fusermount3 -u "$T/remote2"
mv "$T/store.kept" "$STORE"

# A later version pushed is seen by the next mount of the same NEWSTORE.
mount_fs keep_all
step run/model.bin
umount_fs
"$CKPTCTL" push "$STORE" >/dev/null || fail "third push failed"
mount_at "$NEW" "$T/remote" "remote=$URL,ro"
cmp "$REF/run/model.bin" "$T/remote/run/model.bin" || fail "the remount of NEWSTORE does not show the version pushed since"
fusermount3 -u "$T/remote"

# -o remote=,ro on a store of its own reads its own metadata, never the bucket's.
sum=$(sha256sum "$STORE/meta.db")
mount_at "$STORE" "$T/ownro" "remote=$URL,ro"
same_trees "$REF" "$T/ownro" "a store of its own mounted ro with remote="
fusermount3 -u "$T/ownro"
[ "$sum" = "$(sha256sum "$STORE/meta.db")" ] ||
    fail "a read-only mount with remote= replaced the store's own meta.db"
[ ! -e "$STORE/remote.snapshot" ] || fail "a store of its own became a copy"

# Packs compacted away locally stay in the bucket while a kept snapshot
# names them: a reader of the previous LATEST still reads every byte.
cp -a "$REF" "$T/ref.old"
s3curl "${URL#s3://}/meta/LATEST" -o "$T/latest.old" || fail "cannot read LATEST"
mount_fs keep_all
rm "$MNT/big.bin" "$REF/big.bin"
umount_fs
"$CKPTCTL" prune --keep-last 1 "$STORE" >/dev/null || fail "prune failed"
"$CKPTCTL" gc --threshold 100 "$STORE" >/dev/null || fail "gc failed"
[ ! -e "$STORE/packs/00000001.pack" ] || fail "gc --threshold 100 kept pack 1"
out=$("$CKPTCTL" push "$STORE") || fail "push after gc failed: $out"
echo "$out" | grep -q ", 0 deleted" || fail "a push deleted packs a kept snapshot names: $out"
s3curl "${URL#s3://}/meta/LATEST" -T "$T/latest.old" || fail "cannot put LATEST back"
mount_at "$T/new4" "$T/remote4" "remote=$URL,ro"
same_trees "$T/ref.old" "$T/remote4" "the previous snapshot after its packs were compacted away"
fusermount3 -u "$T/remote4"
for i in 1 2 3 4; do out=$("$CKPTCTL" push "$STORE") || fail "push $i failed: $out"; done
# Of the last hour, the first snapshot of each 10 minutes stays, and the
# packs it names.
s3has "${URL#s3://"$BUCKET"/}/packs/00000001.pack" ||
    fail "pack 1, which the first snapshot of the hour names, left the bucket"
out=$(CKPTFS_SNAPSHOT_KEEP_S=0 "$CKPTCTL" push --json "$STORE") || fail "push failed: $out"
n=$(echo "$out" | sed -n 's/.*"packs_deleted": \([0-9]*\).*/\1/p')
[ "$n" -ge 1 ] || fail "packs no kept snapshot names were not deleted: $out"
s3has "${URL#s3://"$BUCKET"/}/packs/00000001.pack" &&
    fail "pack 1, which no kept snapshot names, is still in the bucket"
mount_at "$T/new5" "$T/remote5" "remote=$URL,ro"
same_trees "$REF" "$T/remote5" "live tree after the old packs were deleted in the bucket"
fusermount3 -u "$T/remote5"

"$CKPTCTL" verify --remote "$STORE" >"$T/vr" || fail "verify --remote of an intact bucket: $(cat "$T/vr")"
grep -q ": 0 bad" "$T/vr" || fail "verify --remote says: $(cat "$T/vr")"

# Damaged pack objects in the bucket: EIO, never wrong bytes.
for obj in "$STORE"/packs/*.pack; do
    python3 - "$obj" "$T/bad.pack" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
for i in range(4096, len(b), 65536):
    b[i] ^= 0xFF
open(sys.argv[2], "wb").write(b)
PY
    s3curl "${URL#s3://}/packs/$(basename "$obj")" -T "$T/bad.pack" ||
        fail "cannot damage the pack object $(basename "$obj")"
done
expect_status 3 "verify --remote of damaged objects" "$CKPTCTL" verify --remote "$STORE"
mount_at "$T/new3" "$T/remote3" "remote=$URL,ro"
bad=0
for f in "$REF"/run/* ; do
    rel=${f#"$REF"/}
    if ! cat "$T/remote3/$rel" >"$T/out" 2>"$T/err"; then
        grep -q "Input/output error" "$T/err" || fail "a damaged record failed without EIO: $(cat "$T/err")"
        bad=$((bad + 1))
    else
        cmp -s "$T/out" "$f" || fail "$rel read wrong bytes from a damaged pack object"
    fi
done
[ "$bad" -ge 1 ] || fail "no read failed after the pack object was damaged"
fusermount3 -u "$T/remote3"

# A gateway failing every third request (503 SlowDown, 500) and slow: the
# push retries and completes, and the bucket then reads back byte-exact.
URL3=s3://$BUCKET/t-remote-f-$$-$RANDOM
purge_at_exit "$URL3"
python3 "$(dirname "$TESTLIB")/s3fault.py" "$AWS_ENDPOINT_URL" "$T/fport" --every 3 --delay 0.05 \
    2>"$T/fault.log" &
fpid=$!
on_exit "kill $fpid 2>/dev/null || true"
i=0
until [ -s "$T/fport" ]; do i=$((i + 1)); [ "$i" -le 100 ] || fail "s3fault did not start"; sleep 0.1; done
out=$("$CKPTCTL" push --remote "$URL3" --endpoint "http://127.0.0.1:$(cat "$T/fport")" "$STORE" 2>&1) ||
    fail "a push through a failing gateway failed: $out"
kill "$fpid"
wait "$fpid" 2>/dev/null || true
grep -q "s3fault: 503 on" "$T/fault.log" && grep -q "s3fault: 500 on" "$T/fault.log" &&
    grep -q "s3fault: 50[03] on PUT" "$T/fault.log" ||
    fail "s3fault did not fail both ways: $(cat "$T/fault.log")"
mount_at "$T/new6" "$T/remote6" "remote=$URL3,ro"
same_trees "$REF" "$T/remote6" "the live tree pushed through a failing gateway"
fusermount3 -u "$T/remote6"

# A writing mount of a prefix: uploads behind the writer.
export CKPTFS_S3_RETRIES=1 # a stopped gateway fails an upload in seconds
URL2=s3://$BUCKET/t-remote-w-$$-$RANDOM
purge_at_exit "$URL2"
W=$T/wmnt
mount_at "$T/wstore" "$W" "remote=$URL2,upload_interval=1"
head -c $((3 << 20)) /dev/urandom >"$REF/w1.bin"
dd if="$REF/w1.bin" of="$W/w1.bin" bs=1M conv=fsync status=none
out=$("$CKPTCTL" push "$T/wstore") || fail "ckptctl push beside a writing mount failed: $out"
echo "$out" | grep -q "(by the mount)" || fail "push beside the mount was not done by it: $out"
mount_at "$T/wnew" "$T/wread" "remote=$URL2,ro"
cmp "$REF/w1.bin" "$T/wread/w1.bin" || fail "a file of the writing mount differs in the bucket"
fusermount3 -u "$T/wread"
mkdir -p "$T/w2mnt"
err=$("$CKPTFS" "$T/w2store" "$T/w2mnt" -o "remote=$URL2" 2>&1) &&
    fail "a second writing mount of $URL2 was not refused"
echo "$err" | grep -q "written by another mount.*$T/wstore" ||
    fail "the refusal of a second writer does not name the holder: $err"
mount_fs
put other.bin 1000
umount_fs
err=$("$CKPTCTL" push --remote "$URL2" "$STORE" 2>&1) &&
    fail "a push into $URL2 beside its writing mount was not refused"
echo "$err" | grep -q "written by .*$T/wstore" || fail "the refusal of a push beside the writer says: $err"

if [ -n "$cdir" ]; then
    "$CEPH_DEV" stop "$cdir" >/dev/null 2>&1
    head -c $((2 << 20)) /dev/urandom >"$REF/w2.bin"
    dd if="$REF/w2.bin" of="$W/w2.bin" bs=1M conv=fsync status=none ||
        fail "a save while the gateway is down failed"
    sleep 3 # an upload tries and fails meanwhile
    "$CEPH_DEV" start "$cdir" >/dev/null 2>&1 || fail "cannot restart the gateway"
    out=$("$CKPTCTL" push "$T/wstore") || fail "push after the gateway came back failed: $out"
    mount_at "$T/wnew" "$T/wread" "remote=$URL2,ro"
    cmp "$REF/w1.bin" "$T/wread/w1.bin" || fail "w1.bin differs after the gateway's outage"
    cmp "$REF/w2.bin" "$T/wread/w2.bin" || fail "w2.bin, saved during the outage, differs"
    fusermount3 -u "$T/wread"
else
    log "gateway outage not tested: the gateway is not this test's"
fi
# Another writer took the lease (as after 120 s without renewal): the
# mount stops uploading, and its unmount leaves the other's lease alone.
printf 'ckptfs-lease 1\nholder otherhost 1\nstore /elsewhere\nrenewed %s\n' "$(date +%s%N)" >"$T/lease"
s3curl "${URL2#s3://}/lease" -T "$T/lease" || fail "cannot write a foreign lease"
err=$("$CKPTCTL" push "$T/wstore" 2>&1) && fail "a push by a mount that lost its lease succeeded: $err"
echo "$err" | grep -q "resource busy" || fail "a push by a mount that lost its lease failed otherwise: $err"
fusermount3 -u "$W"
STORE=$T/wstore wait_daemon_gone
s3curl "${URL2#s3://}/lease" | grep -q otherhost || fail "the unmount deleted another holder's lease"
s3curl "${URL2#s3://}/lease" -X DELETE || fail "cannot delete the foreign lease"
mount_at "$T/wstore" "$W" "remote=$URL2"
fusermount3 -u "$W"
i=0
until "$CKPTFS" "$T/wstore" "$W" -o "remote=$URL2" 2>/dev/null; do
    i=$((i + 1))
    [ "$i" -le 100 ] || fail "the lease was not dropped at unmount"
    sleep 0.2
done
fusermount3 -u "$W"
err=$("$CKPTCTL" push --remote "$URL2" "$STORE" 2>&1) &&
    fail "a push of another store into $URL2 was not refused"
echo "$err" | grep -q "another store's copy" || fail "the refusal of another store says: $err"

# local_gib: uploaded packs dropped locally, oldest first, read back.
E=$T/emnt
URL4=s3://$BUCKET/t-remote-e-$$-$RANDOM
purge_at_exit "$URL4"
mount_at "$T/estore" "$E" "remote=$URL4,upload_interval=1,local_gib=0.01"
for i in 1 2 3 4; do
    head -c 8000000 /dev/urandom >"$REF/e$i"
    dd if="$REF/e$i" of="$E/e$i" bs=1M conv=fsync status=none
    sleep 1.2 # one upload each: packs sealed one by one
done
i=0
until [ "$(du -sk "$T/estore/packs" | cut -f1)" -le 20000 ]; do
    i=$((i + 1))
    [ "$i" -le 100 ] || fail "packs still take $(du -sk "$T/estore/packs" | cut -f1) KiB locally with local_gib=0.01"
    sleep 0.2
done
ls "$T/estore/packs"/*.have >/dev/null 2>&1 || fail "no pack was dropped locally"
drop_caches
for i in 1 2 3 4; do cmp "$REF/e$i" "$E/e$i" || fail "e$i differs after its pack was dropped locally"; done
fusermount3 -u "$E"
sleep 1
"$CKPTCTL" verify "$T/estore" >/dev/null || fail "ckptctl verify of a store with dropped packs failed"
out=$("$CKPTCTL" fsck "$T/estore" 2>&1) || fail "ckptctl fsck of a store with dropped packs: $out"
err=$("$CKPTCTL" push --remote "s3://$BUCKET/t-remote-x-$$" "$T/estore" 2>&1) &&
    fail "a push of a store with dropped packs to another bucket was not refused"
echo "$err" | grep -q "only in" || fail "the refusal of a push elsewhere says: $err"
err=$("$CKPTFS" "$T/estore" "$E" 2>&1) && fail "a mount without remote= of a store with dropped packs was not refused"
echo "$err" | grep -q "only in its bucket" || fail "the refusal says: $err"
log "pass"
