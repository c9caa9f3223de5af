#!/bin/bash
# t_mmap.sh: mmap of files on the mount. MAP_PRIVATE and MAP_SHARED read-only
# mappings of a 10 MiB file equal the file; a writable MAP_SHARED mapping's
# changes (flush, munmap, close) reach the file and survive a remount; a
# writable MAP_PRIVATE mapping's changes do not reach the file.
set -euo pipefail
# shellcheck source=tests/lib.sh
. "$TESTLIB"

MIB=$((1 << 20))
rand_file "$REF/m" $((10 * MIB))
rand_file "$REF/odd" $((3 * MIB + 1234))

mount_fs
cp "$REF/m" "$MNT/m"
cp "$REF/odd" "$MNT/odd"
drop_caches

log "read-only mappings"
python3 - "$MNT/m" "$REF/m" "$MNT/odd" "$REF/odd" <<'EOF' || fail "read-only mmap differs from the file"
import mmap, sys
def check(mnt, ref):
    want = open(ref, "rb").read()
    for name, flags in (("MAP_PRIVATE", mmap.MAP_PRIVATE), ("MAP_SHARED", mmap.MAP_SHARED)):
        with open(mnt, "rb") as f:
            m = mmap.mmap(f.fileno(), 0, flags=flags, prot=mmap.PROT_READ)
            if len(m) != len(want):
                sys.exit("%s of %s: length %d, want %d" % (name, mnt, len(m), len(want)))
            # Touch pages in a scattered order first, then compare everything.
            for off in range(len(want) - 1, -1, -(1 << 20) - 4097):
                if m[off] != want[off]:
                    sys.exit("%s of %s: byte %d differs" % (name, mnt, off))
            if m[:] != want:
                sys.exit("%s of %s: content differs" % (name, mnt))
            m.close()
check(sys.argv[1], sys.argv[2])
check(sys.argv[3], sys.argv[4])
EOF

log "writable MAP_SHARED mapping"
# Same edits on the native copy through a native mapping, to compare.
cat >"$T/edit.py" <<'EOF'
import mmap, os, random, sys
path = sys.argv[1]
rng = random.Random(int(sys.argv[2]))
with open(path, "r+b") as f:
    m = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    size = len(m)
    # Byte edits, an edit across a page boundary and one across a 1 MiB block boundary.
    for _ in range(200):
        off = rng.randrange(size)
        m[off] = rng.randrange(256)
    m[4090:4102] = b"ACROSS-PAGE!"
    m[(1 << 20) - 5:(1 << 20) + 5] = b"BLOCKEDGE!"
    m[size - 3:size] = b"END"
    m[0:5] = b"START"
    m.flush()
    m.close()
EOF
check "edit a native file through mmap" python3 "$T/edit.py" "$REF/m" 1
check "edit a file on the mount through mmap" python3 "$T/edit.py" "$MNT/m" 1
same_file "$REF/m" "$MNT/m"
drop_caches
same_file "$REF/m" "$MNT/m"

# Mapping and plain writes mixed on one open file: write(2), then map and
# edit, then write(2) again; read back through read(2).
python3 - "$MNT/odd" "$REF/odd" <<'EOF' || fail "mixed mmap and write"
import mmap, os, sys
for path in sys.argv[1:]:
    fd = os.open(path, os.O_RDWR)
    os.pwrite(fd, b"W" * 5000, 2 << 20)
    m = mmap.mmap(fd, 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    m[(2 << 20) + 4000:(2 << 20) + 4010] = b"mmap-write"
    m[len(m) - 1] = 0x41
    m.flush()
    m.close()
    os.pwrite(fd, b"after", 10)
    os.close(fd)
a, b = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
if a != b:
    sys.exit("content differs")
EOF
same_file "$REF/odd" "$MNT/odd"

log "writable MAP_PRIVATE mapping does not change the file"
python3 - "$MNT/odd" <<'EOF' || fail "MAP_PRIVATE write leaked into the file"
import mmap, sys
path = sys.argv[1]
before = open(path, "rb").read()
with open(path, "r+b") as f:
    m = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    m[0:7] = b"PRIVATE"
    m[len(m) // 2] ^= 0xFF
    if m[0:7] != b"PRIVATE":
        sys.exit("private mapping does not show its own write")
    m.close()
if open(path, "rb").read() != before:
    sys.exit("file changed")
EOF
same_file "$REF/odd" "$MNT/odd"

log "after remount"
remount_fs
same_file "$REF/m" "$MNT/m"
same_file "$REF/odd" "$MNT/odd"
same_mapping "$MNT/m" "$REF/m"

# Edit through a mapping again on the remounted store, then remount again.
check "edit after remount" python3 "$T/edit.py" "$MNT/m" 2
python3 "$T/edit.py" "$REF/m" 2
same_file "$REF/m" "$MNT/m"
remount_fs
same_file "$REF/m" "$MNT/m"
umount_fs
