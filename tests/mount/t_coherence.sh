#!/bin/bash
# t_coherence.sh: write-only opens bypass the kernel's page cache
# (-o direct_writes, the default) and every reader still sees the bytes
# last written:
#  - a write-only handle leaves no page cached (cachestat(2) on the
#    writer's own descriptor), and with -o direct_writes=0 it leaves them;
#  - after an in-place write-only rewrite, the next open drops the pages
#    cached before it (fincore), and read(2) and a mapping see the new
#    bytes; a write-only open that writes nothing drops nothing;
#  - a reader opened while a direct writer writes sees each later write;
#  - a write-only handle opened beside a reader is cached like any other,
#    and the reader sees its writes;
#  - appends, truncation, sendfile(2) and O_DIRECT writes through
#    write-only handles read back as natively, before and after a remount.
set -euo pipefail
# shellcheck source=tests/lib.sh
. "$TESTLIB"
command -v fincore >/dev/null || fail "fincore (util-linux) is needed"
hold_page_cache # it counts cached pages: other tests' drop_caches wait

MIB=$((1 << 20))
rand_file "$REF/f" $((6 * MIB + 777))
PAGES=$(((6 * MIB + 777 + 4095) / 4096))

cached_pages() { fincore --noheadings --output PAGES --bytes "$1" | tr -d ' '; }

# write.py SRC DST: copy SRC to DST write-only and print the pages of DST
# cached on the writer's descriptor just before it closes.
cat >"$T/write.py" <<'EOF'
import ctypes, os, sys
def cached(fd):
    rng = (ctypes.c_uint64 * 2)(0, 0)  # the whole file
    st = (ctypes.c_uint64 * 5)()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(451, fd, rng, st, 0) != 0:  # cachestat(2), Linux 6.5
        sys.exit("cachestat: %s" % os.strerror(ctypes.get_errno()))
    return st[0]
data = open(sys.argv[1], "rb").read()
fd = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
for off in range(0, len(data), 1 << 20):
    os.write(fd, data[off:off + (1 << 20)])
print(cached(fd))
os.close(fd)
EOF

log "direct writes leave nothing cached"
mount_fs
pages=$(python3 "$T/write.py" "$REF/f" "$MNT/f")
[ "$pages" = 0 ] || fail "a write-only handle left $pages pages cached"
same_file "$REF/f" "$MNT/f"
umount_fs

log "-o direct_writes=0 keeps them"
mount_fs direct_writes=0
pages=$(python3 "$T/write.py" "$REF/f" "$MNT/g")
# Most, not all: the kernel may reclaim a few meanwhile (a drop leaves 0).
[ "$pages" -gt $((PAGES / 2)) ] || fail "with direct_writes=0 only $pages of $PAGES pages were cached"
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

log "a write-only open that writes nothing keeps the cache"
cat "$MNT/f" >/dev/null # every page cached
python3 -c 'import os, sys; os.close(os.open(sys.argv[1], os.O_WRONLY))' "$MNT/f"
pages=$(cached_pages "$MNT/f")
[ "$pages" -gt $((PAGES / 2)) ] || fail "$pages of $PAGES pages cached after a write-only open without writes"
log "($pages of $PAGES pages cached)"

log "the next open after a direct rewrite drops the cache"
poke $((2 * MIB - 100)) 5000 0x41
pages=$(cached_pages "$MNT/f") # fincore's own open drops them
[ "$pages" = 0 ] || fail "$pages pages still cached after a direct rewrite"
same_file "$REF/f" "$MNT/f"
same_mapping "$MNT/f" "$REF/f"

log "a reader opened while a direct writer writes"
python3 - "$MNT/h" "$REF/h" "$REF/f" <<'EOF' || fail "a reader beside a direct writer read stale bytes"
import os, sys
mnt, ref, src = sys.argv[1:]
data = open(src, "rb").read()
# The first handle of a new file: direct on the mount.
wr = [os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) for p in (mnt, ref)]
for w in wr:
    os.write(w, data)
size = len(data)
def poke(off, b):
    for w in wr:
        os.pwrite(w, bytes([b]) * 10, off)
fd = os.open(mnt, os.O_RDONLY)
def check(what):
    if os.pread(fd, size, 0) != open(ref, "rb").read():
        sys.exit("%s: content differs" % what)
check("at open")
for i, off in enumerate((0, 100, 3 << 20, size - 10)):
    poke(off, 0x62 + i)
    check("after rewrite %d at %d" % (i, off))
for f in wr + [fd]:
    os.close(f)
EOF
same_file "$REF/h" "$MNT/h"

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

log "append, truncate, O_DIRECT and sendfile through write-only handles"
python3 - "$MNT" "$REF" <<'EOF' || fail "a write-only handle's append, truncate or sendfile went wrong"
import os, sys
mnt, ref = sys.argv[1:]
blob = os.urandom(3 << 20)
for d in (mnt, ref):
    fd = os.open(d + "/app", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for i in range(0, len(blob), 700000):
        os.write(fd, blob[i:i + 700000])
    os.ftruncate(fd, (2 << 20) + 5)  # down, through the same handle
    os.write(fd, b"after")           # O_APPEND: at the new end
    os.close(fd)
    src = os.open(ref + "/f", os.O_RDONLY)
    fd = os.open(d + "/sent", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    left, off = os.fstat(src).st_size, 0
    while left:
        n = os.sendfile(fd, src, off, left)
        off, left = off + n, left - n
    os.close(fd)
    os.close(src)
EOF
same_file "$REF/app" "$MNT/app"
same_file "$REF/sent" "$MNT/sent"
dd if="$REF/f" of="$MNT/odirect" bs=1M oflag=direct status=none
same_file "$REF/f" "$MNT/odirect"

log "after remount"
remount_fs
same_file "$REF/app" "$MNT/app"
same_file "$REF/sent" "$MNT/sent"
same_file "$REF/f" "$MNT/odirect"
same_file "$REF/f" "$MNT/f"
same_file "$REF/h" "$MNT/h"
umount_fs
