#!/bin/bash
# t_coherence.sh: write-only opens bypass the kernel's page cache
# (-o direct_writes, the default) and every reader still sees the bytes
# last written:
#  - a file written write-only leaves no pages cached (fincore), and with
#    -o direct_writes=0 it leaves them all;
#  - a reader that read the file before an in-place write-only rewrite sees
#    the new bytes after it, through read(2) and through a mapping;
#  - so does a reader opened while a write-only handle writes (a kernel
#    without the page invalidation after FUSE direct writes fails this);
#  - a write-only handle opened while a reader holds the file is cached
#    like any other, and the reader sees its writes.
set -euo pipefail
# shellcheck source=tests/lib.sh
. "$TESTLIB"

MIB=$((1 << 20))
rand_file "$REF/f" $((6 * MIB + 777))

cached_pages() { fincore --noheadings --output PAGES --bytes "$1" | tr -d ' '; }

log "direct writes leave nothing cached"
mount_fs
cp "$REF/f" "$MNT/f"
pages=$(cached_pages "$MNT/f")
[ "$pages" = 0 ] || fail "a file written write-only left $pages pages cached"
same_file "$REF/f" "$MNT/f"
umount_fs

log "-o direct_writes=0 keeps them"
mount_fs direct_writes=0
cp "$REF/f" "$MNT/g"
pages=$(cached_pages "$MNT/g")
[ "$pages" -ge $((6 * MIB / 4096)) ] || fail "with direct_writes=0 only $pages pages were cached"
same_file "$REF/f" "$MNT/g"
umount_fs

mount_fs
# Rewrite [off, off+len) of path write-only (no O_TRUNC) with byte b, in
# place, on the mount and on the reference copy.
cat >"$T/poke.py" <<'EOF'
import os, sys
path, off, n, b = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4], 0)
fd = os.open(path, os.O_WRONLY)
os.pwrite(fd, bytes([b]) * n, off)
os.close(fd)
EOF
poke() { python3 "$T/poke.py" "$MNT/f" "$@"; python3 "$T/poke.py" "$REF/f" "$@"; }

log "reopen after a direct rewrite"
cat "$MNT/f" >/dev/null # every page cached
poke $((2 * MIB - 100)) 5000 0x41
same_file "$REF/f" "$MNT/f"
python3 - "$MNT/f" "$REF/f" <<'EOF' || fail "a mapping shows bytes from before the rewrite"
import mmap, sys
with open(sys.argv[1], "rb") as f:
    m = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    if m[:] != open(sys.argv[2], "rb").read():
        sys.exit("differs")
EOF

log "a reader opened while a direct writer writes"
python3 - "$MNT/f" "$REF/f" <<'EOF' || fail "a reader beside a direct writer read stale bytes"
import os, sys
mnt, ref = sys.argv[1:]
wr = [os.open(p, os.O_WRONLY) for p in (mnt, ref)] # first: direct on the mount
size = os.fstat(wr[0]).st_size
def poke(off, b):
    for w in wr:
        os.pwrite(w, bytes([b]) * 10, off)
poke(100, 0x61)
fd = os.open(mnt, os.O_RDONLY)
def check(what):
    if os.pread(fd, size, 0) != open(ref, "rb").read():
        sys.exit("%s: content differs" % what)
check("at open")
for i, off in enumerate((0, 3 << 20, size - 10)):
    poke(off, 0x62 + i)
    check("after rewrite %d at %d" % (i, off))
for f in wr + [fd]:
    os.close(f)
EOF
same_file "$REF/f" "$MNT/f"

log "a write-only handle opened beside a reader"
python3 - "$MNT/f" "$REF/f" <<'EOF' || fail "writes beside a reader were not seen"
import os, sys
rd = [os.open(p, os.O_RDONLY) for p in sys.argv[1:]]
size = os.fstat(rd[0]).st_size
os.pread(rd[0], size, 0)
wr = [os.open(p, os.O_WRONLY) for p in sys.argv[1:]]
for w in wr:
    os.pwrite(w, b"beside" * 1000, 12345)
    os.pwrite(w, b"tail!", size)
got, want = (os.pread(r, size + 5, 0) for r in rd)
if got != want:
    sys.exit("content differs")
for f in rd + wr:
    os.close(f)
EOF
same_file "$REF/f" "$MNT/f"

log "after remount"
remount_fs
same_file "$REF/f" "$MNT/f"
umount_fs
