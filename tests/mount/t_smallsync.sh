#!/bin/bash
# t_smallsync.sh: group commit (src/commit.h) against kill -9.
#
# Writers create small files in a loop (in two directories, with renames
# and unlinks between): each file is written, fsync'd, and only then its
# name and hash go to a manifest outside the mount. The daemon is killed at
# a random moment, SMALLSYNC_KILLS times (default 3; scripts/smallsync-crash
# runs 30). After each kill: fsck and verify are clean, the store mounts,
# and every file of the manifest reads back byte-exact; a file the writer
# fsync'd the removal of (the directory fsync'd after unlink) stays gone.
set -euo pipefail
# shellcheck source=tests/lib.sh
. "$TESTLIB"

KILLS=${SMALLSYNC_KILLS:-3}
MANIFEST=$T/manifest
GONE=$T/gone
: >"$MANIFEST"
: >"$GONE"

# writer ROUND: until killed, create files of 1 to 9000 bytes, fsync each
# and record it; every 7th is renamed (the directory fsync'd, then
# recorded under its new name), every 11th unlinked (recorded as gone once
# the directory is fsync'd).
writer()
{
    python3 - "$MNT" "$1" "$MANIFEST" "$GONE" <<'PY'
import hashlib, os, random, sys
mnt, rnd, manifest, gone = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
rng = random.Random(rnd)
dirs = [f"{mnt}/r{rnd}a", f"{mnt}/r{rnd}b"]
for d in dirs:
    os.makedirs(d, exist_ok=True)
man = open(manifest, "a", buffering=1)
gon = open(gone, "a", buffering=1)
def fsync_dir(d):
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(fd)
    os.close(fd)
i = 0
while True:
    d = dirs[i % 2]
    name = f"{d}/f{i:06d}"
    data = rng.randbytes(rng.randint(1, 9000))
    fd = os.open(name, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    os.write(fd, data)
    os.fsync(fd)
    os.close(fd)
    h = hashlib.sha256(data).hexdigest()
    if i % 7 == 3:
        new = f"{dirs[(i + 1) % 2]}/g{i:06d}"
        os.rename(name, new)
        fsync_dir(os.path.dirname(new))
        fsync_dir(d)
        name = new
    if i % 11 == 5:
        os.unlink(name)
        fsync_dir(os.path.dirname(name))
        gon.write(name[len(mnt):] + "\n")
    else:
        man.write(f"{h}  {name[len(mnt):]}\n")
    i += 1
PY
}

# Files closed but not fsync'd, and other traffic, beside the writers.
noise()
{
    python3 - "$MNT" "$1" <<'PY'
import os, random, sys
mnt, rnd = sys.argv[1], sys.argv[2]
d = f"{mnt}/noise{rnd}"
os.makedirs(d, exist_ok=True)
rng = random.Random(rnd)
i = 0
while True:
    with open(f"{d}/n{i % 500:04d}", "wb") as f:
        f.write(rng.randbytes(rng.randint(0, 3000)))
    if i % 3 == 0:
        try:
            os.unlink(f"{d}/n{rng.randrange(500):04d}")
        except FileNotFoundError:
            pass
    i += 1
PY
}

check_manifest()
{
    python3 - "$MNT" "$MANIFEST" "$GONE" "$1" <<'PY' || fail "fsync'd files lost or wrong after kill -9 $1"
import hashlib, os, sys
mnt, manifest, gone, k = sys.argv[1:5]
bad = n = 0
for line in open(manifest):
    h, p = line.rstrip("\n").split("  ", 1)
    n += 1
    try:
        ok = hashlib.sha256(open(mnt + p, "rb").read()).hexdigest() == h
    except OSError:
        ok = False
    if not ok:
        bad += 1
        print(f"t_smallsync: lost or wrong after kill {k}: {p}")
back = [p for p in open(gone).read().split() if os.path.lexists(mnt + p)]
for p in back:
    print(f"t_smallsync: removal fsync'd before kill {k} undone: {p}")
print(f"t_smallsync: kill {k}: {n - bad} of {n} fsync'd files exact, "
      f"{len(open(gone).read().split()) - len(back)} removals kept")
sys.exit(1 if bad or back else 0)
PY
}

mount_fs
for k in $(seq "$KILLS"); do
    writer "$k" &
    w1=$!
    writer "$k.2" &
    w2=$!
    noise "$k" &
    w3=$!
    sleep "$(python3 -c "import random; print(round(random.uniform(1.5, 4.0), 2))")"
    crash
    for w in $w1 $w2 $w3; do
        wait "$w" 2>/dev/null || true
    done
    [ -s "$MANIFEST" ] || fail "the writers recorded no file before kill $k"
    store_clean "after kill $k"
    mount_fs
    check_manifest "$k"
done
n=$(wc -l <"$MANIFEST")
[ "$n" -ge 500 ] || fail "only $n fsync'd files in $KILLS rounds: the test did not test much"
umount_fs
store_clean "at the end"
log "ok: $n small fsync'd files over $KILLS kills"
