#!/bin/bash
# t_writebehind.sh: close(2) of a streamed file returns before its commit
# (write-behind, ckptfs(1)); whoever looks next must still see the file as
# the writer closed it. The mount runs one worker at nice 19, so 64 MiB of
# random data is usually still being compressed when the next step looks:
#  1. reads right after close are byte-exact;
#  2. the history view lists the version at once (.ckptfs/versions/PATH);
#  3. ckptctl stats beside the mount counts the new bytes at once (it fsyncs
#     the mount's root, which pays every owed commit);
#  4. user.ckptfs.version of a just-closed file names a committed version;
#  5. a file rewritten right after its close keeps both versions;
#  6. a writer that closes a dup of its descriptor, then writes more, leaves
#     one version with all of its bytes (no partial one);
#  7. unmount right after close loses nothing: all of it reads back after a
#     remount, and fsck and verify find the store clean.
# shellcheck disable=SC2012
set -euo pipefail
# shellcheck source=tests/lib.sh
. "$TESTLIB"

command -v getfattr >/dev/null || fail "needs getfattr (attr)"
MIB=$((1 << 20))
OPTS=threads=1,worker_nice=19
mount_fs "$OPTS"

for f in a b c; do rand_file "$REF/$f" $((64 * MIB)); done
bytes_now() { json_field "$("$CKPTCTL" stats --json "$STORE")" logical_bytes; }

log "1, 2: read back and list the version right after close"
cp "$REF/a" "$MNT/a"
n=$(ls "$MNT/.ckptfs/versions/a/" | wc -l)
[ "$n" -eq 1 ] || fail "versions/a lists $n versions right after close, want 1"
same_file "$REF/a" "$MNT/a"
same_file "$REF/a" "$MNT/.ckptfs/versions/a/$(ls "$MNT/.ckptfs/versions/a/")"

log "3: ckptctl stats beside the mount"
before=$(bytes_now)
cp "$REF/b" "$MNT/b"
after=$(bytes_now)
[ "$((after - before))" -eq $((64 * MIB)) ] ||
    fail "ckptctl stats counted $((after - before)) new bytes right after close, want $((64 * MIB))"

log "4: user.ckptfs.version right after close"
cp "$REF/c" "$MNT/d"
v=$(getfattr --absolute-names --only-values -n user.ckptfs.version "$MNT/d")
[ -n "$v" ] && [ "$v" -gt 0 ] || fail "user.ckptfs.version of a just-closed file is '$v'"

log "5: a rewrite right after close keeps both versions"
cp "$REF/a" "$MNT/e"
cp "$REF/b" "$MNT/e"
vs=$(ls "$MNT/.ckptfs/versions/e/")
[ "$(wc -l <<<"$vs")" -eq 2 ] || fail "versions/e lists: $vs; want 2 versions"
same_file "$REF/a" "$MNT/.ckptfs/versions/e/$(head -n 1 <<<"$vs")"
same_file "$REF/b" "$MNT/.ckptfs/versions/e/$(tail -n 1 <<<"$vs")"
same_file "$REF/b" "$MNT/e"

log "6: close of a dup, then more writes"
python3 - "$MNT/g" "$REF/a" "$REF/b" <<'EOF'
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
with open(sys.argv[2], "rb") as f:
    os.write(fd, f.read(8 << 20))
os.close(os.dup(fd))  # a FUSE flush while the descriptor stays open
with open(sys.argv[3], "rb") as f:
    os.write(fd, f.read(8 << 20))
os.close(fd)
EOF
head -c $((8 * MIB)) "$REF/a" >"$REF/g"
head -c $((8 * MIB)) "$REF/b" >>"$REF/g"
same_file "$REF/g" "$MNT/g"
n=$(ls "$MNT/.ckptfs/versions/g/" | wc -l)
[ "$n" -eq 1 ] || fail "versions/g lists $n versions, want 1 (the whole file)"
same_file "$REF/g" "$MNT/.ckptfs/versions/g/$(ls "$MNT/.ckptfs/versions/g/")"

log "7: unmount right after close"
cp "$REF/c" "$MNT/h"
umount_fs
mount_fs "$OPTS"
same_file "$REF/a" "$MNT/a"
same_file "$REF/b" "$MNT/b"
same_file "$REF/b" "$MNT/e"
same_file "$REF/c" "$MNT/d"
same_file "$REF/g" "$MNT/g"
same_file "$REF/c" "$MNT/h"
umount_fs
store_clean "after the write-behind checks"
log "ok"
