#!/bin/bash
# t_enospc.sh: a store on a 64 MiB tmpfs mounted with -o reserve_mib=8.
# Filling it makes the writer fail with ENOSPC (not EIO, not a hang); files
# committed before stay intact across a remount; ckptctl stats still works;
# after the big file is deleted a new small file can be written again.
# Done twice: with a sequential (streaming) writer, and on a fresh store with
# a random-offset writer, whose body goes through STORE/staging.
set -euo pipefail
# shellcheck source=tests/lib.sh
. "$TESTLIB"

# full_store_recovers FILE...: the mounted full store unmounts, ckptctl stats
# reads it, it remounts with $REF/small intact; after FILEs are deleted a new
# file ($REF/after) is written with fsync and survives another remount.
full_store_recovers()
{
    umount_fs
    check "ckptctl stats of the full store" "$CKPTCTL" stats "$STORE" >/dev/null
    mount_fs reserve_mib=8
    same_file "$REF/small" "$MNT/small"
    check "ckptctl stats after remount" "$CKPTCTL" stats "$STORE" >/dev/null
    check "rm of the big files" rm -f "$@"
    check "write a new small file after deleting the big one" \
        dd if="$REF/after" of="$MNT/after" bs=64K conv=fsync status=none
    same_file "$REF/after" "$MNT/after"
    umount_fs
    mount_fs reserve_mib=8
    same_file "$REF/small" "$MNT/small"
    same_file "$REF/after" "$MNT/after"
    umount_fs
}
# new_disk DIR: a 64 MiB tmpfs on DIR, unmounted at exit; the store goes there.
new_disk()
{
    DISK=$1
    mkdir "$DISK"
    mount -t tmpfs -o size=64m tmpfs "$DISK" || fail "cannot mount a tmpfs on $DISK"
    on_exit "umount '$DISK' 2>/dev/null || umount -l '$DISK'"
    STORE=$DISK/store
}
avail_mib() { df -P -B1M "$DISK" | awk 'NR == 2 { print $4 }'; }

new_disk "$T/disk"

mount_fs reserve_mib=8

log "a small file, fsync'd"
rand_file "$REF/small" 100000
check "write+fsync of a small file" dd if="$REF/small" of="$MNT/small" bs=64K conv=fsync status=none
same_file "$REF/small" "$MNT/small"

log "fill the disk"
rc=0
timeout 120 dd if=/dev/urandom of="$MNT/big" bs=1M status=none 2>"$T/dd.err" || rc=$?
[ "$rc" -ne 124 ] || fail "writer hung on a full store (killed by timeout after 120 s)"
[ "$rc" -ne 0 ] || fail "dd of unlimited random data succeeded on a 64 MiB disk"
grep -q "No space left on device" "$T/dd.err" || fail "writer failed with status $rc but not ENOSPC: $(cat "$T/dd.err")"
big=$(stat -c %s "$MNT/big")
log "writer stopped with ENOSPC; big file now $big bytes; $(avail_mib) MiB free on the disk"
[ "$(avail_mib)" -ge 4 ] || fail "reserve not kept: only $(avail_mib) MiB free after ENOSPC (reserve_mib=8)"
# More writes keep failing with ENOSPC (not EIO) and do not hang.
rc=0
timeout 60 dd if=/dev/urandom of="$MNT/more" bs=1M count=16 status=none 2>"$T/dd2.err" || rc=$?
[ "$rc" -ne 124 ] || fail "second writer hung on a full store"
[ "$rc" -ne 0 ] || fail "16 MiB more fit on a store that reported ENOSPC"
grep -q "No space left on device" "$T/dd2.err" || fail "second writer failed with status $rc but not ENOSPC: $(cat "$T/dd2.err")"
# The mount still serves reads and metadata.
same_file "$REF/small" "$MNT/small"
check "ls of the full store" ls -l "$MNT" >/dev/null
check "ckptctl stats beside the full mount" "$CKPTCTL" stats "$STORE" >/dev/null

log "remount of the full store; delete the big files, write again"
rand_file "$REF/after" 200000
full_store_recovers "$MNT/big" "$MNT/more"

log "random-offset writer on a fresh 64 MiB store"
new_disk "$T/disk2"
mount_fs reserve_mib=8
check "write+fsync of a small file" dd if="$REF/small" of="$MNT/small" bs=64K conv=fsync status=none
rc=0
timeout 120 python3 - "$MNT/rnd" "$STORE/staging" >"$T/py.out" 2>&1 <<'EOF' || rc=$?
import errno, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
os.pwrite(fd, b"x", 1 << 20)
os.pwrite(fd, b"y", 0)  # back before the end: the body is staged
if not os.listdir(sys.argv[2]):
    sys.exit("a write at 0 after one at 1 MiB left STORE/staging empty")
chunk = os.urandom(1 << 20)
off = 0
try:
    while off < (1 << 30):
        os.pwrite(fd, chunk, off)
        off += len(chunk)
    sys.exit("1 GiB written on a 64 MiB disk")
except OSError as e:
    if e.errno != errno.ENOSPC:
        sys.exit("write at %d failed with %s, want ENOSPC" % (off, errno.errorcode.get(e.errno)))
print("ENOSPC after %d MiB" % (off >> 20))
for what, fn in (("fsync", os.fsync), ("close", os.close)):
    try:
        fn(fd)
    except OSError as e:  # the body could not be committed: ENOSPC, nothing else
        if e.errno != errno.ENOSPC:
            sys.exit("%s failed with %s, want ENOSPC or success" % (what, errno.errorcode.get(e.errno)))
        print("%s: ENOSPC" % what)
EOF
[ "$rc" -ne 124 ] || fail "random-offset writer hung on a full store (timeout after 120 s)"
[ "$rc" -eq 0 ] || fail "random-offset writer: $(cat "$T/py.out")"
log "random-offset writer: $(tr '\n' ' ' <"$T/py.out"); $(avail_mib) MiB free on the disk"
same_file "$REF/small" "$MNT/small"
check "ckptctl stats beside the full mount" "$CKPTCTL" stats "$STORE" >/dev/null

log "remount after the random-offset writer hit ENOSPC; delete, write again"
full_store_recovers "$MNT/rnd"
