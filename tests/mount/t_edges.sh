#!/bin/bash
# t_edges.sh: POSIX edge cases an outside filesystem suite found.
#
#  1. Sparse giants: 4 KiB written just under 16 TiB, into an empty file
#     (streamed) and into one with content (staged), then fsync: done in
#     seconds, the holes read as zeros and take no space in the packs; a
#     byte written at offset 2^63 - 2 is accepted (the VFS limit).
#  2. Mounting again while an unmounted holder keeps the store's lock (a
#     daemon still exiting) waits for it instead of failing; a store
#     mounted elsewhere is refused at once, naming the mount.
#  3. A non-owner's write (O_WRONLY, which bypasses the page cache, and
#     O_RDWR), truncate and fallocate clear setuid (and setgid on a
#     group-executable file) and succeed, under allow_other and
#     default_permissions; the owner's chmod is still the only other way
#     to change the mode; root's writes keep the bits.
#  4. fallocate past the free space fails with ENOSPC; KEEP_SIZE does not
#     change the size, and a write into the range grows it as written.
#  5. O_DIRECT and buffered handles of one file see each other's writes.
# (The virtual user.ckptfs.* attributes not being listed is t_posix's and
# t_history's.)
set -euo pipefail
# shellcheck source=tests/lib.sh
. "$TESTLIB"

mount_fs allow_other,default_permissions
chmod 0777 "$MNT"

#### 1. sparse giants

log "sparse giants: 4 KiB at (2^32 - 2) x 4096, streamed and staged, then fsync"
rc=0
timeout 120 python3 - "$MNT" <<'PY' || rc=$?
import os, sys, time
mnt = sys.argv[1]
off = ((1 << 32) - 2) * 4096
for name, before in (("stream", b""), ("stage", b"s" * 100000)):
    p = os.path.join(mnt, name)
    with open(p, "wb") as f:
        f.write(before)
    t = time.time()
    fd = os.open(p, os.O_WRONLY)
    os.pwrite(fd, b"y" * 4096, off)
    os.fsync(fd)
    os.close(fd)
    took = time.time() - t
    if took > 20:
        sys.exit(f"{name}: write + fsync took {took:.1f} s")
    st = os.stat(p)
    assert st.st_size == off + 4096, (name, st.st_size)
    fd = os.open(p, os.O_RDONLY)
    assert os.pread(fd, 4096, off) == b"y" * 4096, name
    assert os.pread(fd, 4096, off - 4096) == bytes(4096), name
    assert os.pread(fd, 100000, 0) == before + bytes(100000 - len(before)), name
    assert os.pread(fd, 4096, off // 2) == bytes(4096), name
    os.close(fd)
    print(f"{name}: {took:.3f} s", file=sys.stderr)
p = os.path.join(mnt, "maxoff")
fd = os.open(p, os.O_WRONLY | os.O_CREAT)
os.pwrite(fd, b"z", (1 << 63) - 2)
os.fsync(fd)
os.close(fd)
assert os.stat(p).st_size == (1 << 63) - 1
fd = os.open(p, os.O_RDONLY)
assert os.pread(fd, 2, (1 << 63) - 3) == b"\0z"
os.close(fd)
PY
[ "$rc" -ne 124 ] || fail "sparse giant writes did not finish within 120 s"
[ "$rc" -eq 0 ] || fail "sparse giant writes"
packs=$(du -sb "$STORE/packs" | cut -f1)
[ "$packs" -lt $((4 * 1024 * 1024)) ] || fail "the sparse files take $packs bytes of packs"
remount_fs allow_other,default_permissions
python3 - "$MNT" <<'PY' || fail "sparse giants after a remount"
import os, sys
off = ((1 << 32) - 2) * 4096
for name in ("stream", "stage"):
    fd = os.open(os.path.join(sys.argv[1], name), os.O_RDONLY)
    assert os.pread(fd, 4096, off) == b"y" * 4096, name
    os.close(fd)
PY
rm -f "$MNT/stream" "$MNT/stage" "$MNT/maxoff"

#### 2. mounting again at once

log "a mount waits for a store lock held by something that is not a mount"
umount_fs
python3 - "$STORE/lock" "$T/held" <<'PY' &
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)
open(sys.argv[2], "w").close()
time.sleep(2)
PY
holder=$!
i=0
until [ -e "$T/held" ]; do # the mount must come after the lock is taken
    i=$((i + 1))
    [ "$i" -le 600 ] || fail "the lock holder did not take the lock"
    sleep 0.05
done
t0=$(date +%s%N)
mount_fs allow_other,default_permissions
waited=$(( ($(date +%s%N) - t0) / 1000000 ))
wait "$holder"
log "mounted ${waited} ms after asking (the lock was held for 2000 ms)"
[ "$waited" -ge 1000 ] || fail "the mount did not wait for the lock ($waited ms)"
mkdir -p "$T/mnt2"
expect_status 1 "a second mount of a mounted store" "$CKPTFS" "$STORE" "$T/mnt2"
grep -q "already mounted at $MNT" <<<"$ERR" || fail "the refusal does not name the mount: $ERR"

#### 3. setuid and setgid under a non-owner's writes

log "setuid/setgid cleared by a non-owner's write, truncate and fallocate"
chmod 0755 "$T" # uid 65534 must reach the mount
python3 - "$MNT" <<'PY' || fail "setuid/setgid cases"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
d = sys.argv[1]
# name, mode, what the non-owner does, the mode bits that must be gone
cases = [("w_sgid", 0o2777, "wronly", 0o2000), ("rw_sgid", 0o2777, "rdwr", 0o2000),
         ("w_suid", 0o4777, "wronly", 0o4000), ("rw_suid", 0o4777, "rdwr", 0o4000),
         ("tr", 0o6666, "trunc", 0o4000), ("fa", 0o6666, "falloc", 0o4000)]
for name, mode, _, _ in cases:
    p = os.path.join(d, name)
    with open(p, "wb") as f:
        f.write(b"hello")
    os.chmod(p, mode)
pid = os.fork()
if pid == 0:
    os.setgid(65534)
    os.setuid(65534)
    bad = 0
    for name, mode, how, gone in cases:
        p = os.path.join(d, name)
        try:
            if how in ("wronly", "rdwr"):
                fd = os.open(p, os.O_WRONLY if how == "wronly" else os.O_RDWR)
                os.write(fd, b"x")
                os.close(fd)
            elif how == "trunc":
                os.truncate(p, 2)
            else:
                fd = os.open(p, os.O_RDWR)
                r = libc.fallocate(fd, 0, 0, 8192)
                e = ctypes.get_errno()
                os.close(fd)
                if r:
                    raise OSError(e, os.strerror(e))
        except OSError as e:
            print(f"{name}: {how} by a non-owner failed: {e}", file=sys.stderr)
            bad = 1
            continue
        now = os.stat(p).st_mode & 0o7777
        if now & gone or now & 0o777 != mode & 0o777:
            print(f"{name}: {oct(mode)} became {oct(now)} after {how}", file=sys.stderr)
            bad = 1
    try:  # any other mode change stays the owner's
        os.chmod(os.path.join(d, "w_suid"), 0o700)
        print("a non-owner's chmod succeeded", file=sys.stderr)
        bad = 1
    except PermissionError:
        pass
    os._exit(bad)
_, status = os.waitpid(pid, 0)
p = os.path.join(d, "root_suid")
with open(p, "wb") as f:
    f.write(b"x")
os.chmod(p, 0o4755)
with open(p, "ab") as f:
    f.write(b"y")
if os.stat(p).st_mode & 0o7777 != 0o4755:
    print("root's write cleared setuid", file=sys.stderr)
    status = 1
sys.exit(1 if status else 0)
PY

#### 4. fallocate

log "fallocate: ENOSPC past the free space; KEEP_SIZE keeps the size"
python3 - "$MNT" <<'PY' || fail "fallocate cases"
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
p = os.path.join(sys.argv[1], "fa-big")
fd = os.open(p, os.O_RDWR | os.O_CREAT)
r = libc.fallocate(fd, 0, 0, 1 << 50)
assert r == -1 and ctypes.get_errno() == errno.ENOSPC, ("1 PiB", r, ctypes.get_errno())
assert os.fstat(fd).st_size == 0
assert libc.fallocate(fd, 1, 0, 4096) == 0  # FALLOC_FL_KEEP_SIZE
assert os.fstat(fd).st_size == 0, os.fstat(fd).st_size
os.pwrite(fd, b"k" * 100, 0)
assert os.fstat(fd).st_size == 100, os.fstat(fd).st_size
os.close(fd)
assert os.stat(p).st_size == 100
PY

#### 5. O_DIRECT beside buffered handles

log "O_DIRECT and buffered handles of one file"
python3 - "$MNT" <<'PY' || fail "O_DIRECT coherence"
import fcntl, mmap, os, sys
p = os.path.join(sys.argv[1], "od")
buf = mmap.mmap(-1, 4096)
for mode in (os.O_RDWR, os.O_WRONLY):
    for first in ("direct", "buffered"):
        with open(p, "wb") as f:
            f.write(b"A" * 65536)
        if first == "direct":
            d = os.open(p, mode | os.O_DIRECT)
            r = os.open(p, os.O_RDONLY)
        else:
            r = os.open(p, os.O_RDONLY)
            d = os.open(p, mode | os.O_DIRECT)
        os.pread(r, 65536, 0)  # cached
        buf.seek(0)
        buf.write(b"B" * 4096)
        os.pwritev(d, [buf], 4096)
        r2 = os.open(p, os.O_RDONLY)
        for fd in (r, r2):
            got = os.pread(fd, 4096, 4096)
            assert got == b"B" * 4096, (mode, first, got[:8])
        os.close(r2)
        os.close(d)
        os.close(r)
    # a buffered write, then an O_DIRECT read
    w = os.open(p, os.O_RDWR)
    os.pwrite(w, b"C" * 4096, 0)
    d = os.open(p, os.O_RDONLY | os.O_DIRECT)
    os.preadv(d, [buf], 0)
    assert buf[:4096] == b"C" * 4096
    os.close(d)
    os.close(w)
fd = os.open(p, os.O_RDWR)  # O_DIRECT switched on and off on one handle
os.pread(fd, 8192, 0)
fl = fcntl.fcntl(fd, fcntl.F_GETFL)
fcntl.fcntl(fd, fcntl.F_SETFL, fl | os.O_DIRECT)
buf.seek(0)
buf.write(b"E" * 4096)
os.pwritev(fd, [buf], 0)
fcntl.fcntl(fd, fcntl.F_SETFL, fl)
assert os.pread(fd, 4096, 0) == b"E" * 4096
os.close(fd)
PY
umount_fs
store_clean "after the edge cases"
