#!/bin/bash
# t_rebuild.sh: metadata made anew from the packs (ckptctl rebuild,
# src/rebuild.h).
#
# Files are written through a mount (checkpoint-like ones in nested
# directories, small ones, one with a second version, one removed), each
# fsync'd, then the daemon is killed. Then, each on a copy of that store:
#   1. meta.db, its WAL and index deleted: the mount refuses and names
#      ckptctl rebuild;
#   2. the WAL deleted; 3. the WAL cut to half; 4. cut to 0 bytes;
#   5. meta.db replaced by a copy taken before the last files were written.
# In cases 2-5 the mount itself finds the commits meta.db lost in the packs
# and commits them again (rebuild_replay), saying so in its log (in case 5
# after an offline `ckptctl recode`, which must leave that to the mount),
# and a clean unmount then moves the replay mark to the end of the packs
# (nothing left for the next mount to scan); in every
# case `ckptctl rebuild` does too. Either way every fsync'd file is back
# byte-exact at its path, with both versions of the file written twice,
# fsck and verify are clean afterwards, the old metadata is kept beside it
# (rebuild), and the store mounts and takes new files.
set -euo pipefail
# shellcheck source=tests/lib.sh
. "$TESTLIB"

REF=$T/ref
mkdir -p "$REF"
MANIFEST=$T/manifest

# put REL BYTES: a file of random bytes at REL in the mount and in $REF,
# fsync'd.
put()
{
    mkdir -p "$(dirname "$MNT/$1")" "$(dirname "$REF/$1")"
    head -c "$2" /dev/urandom >"$REF/$1"
    dd if="$REF/$1" of="$MNT/$1" bs=1M conv=fsync status=none
}

mount_fs
put run/checkpoint-100/model.bin $((3 << 20))
put run/checkpoint-100/optim.bin $((2 << 20))
put run/config.json 700
for i in $(seq 1 40); do put "small/s$i" $((i * 37)); done
sync "$MNT/run"
umount_fs
cp "$STORE/meta.db" "$T/meta.db.early" # an old copy: before what follows
[ ! -e "$STORE/meta.db-wal" ] || cp "$STORE/meta.db-wal" "$T/meta.db.early-wal"
mount_fs
put run/checkpoint-200/model.bin $((3 << 20))
cp "$REF/run/config.json" "$T/config.v1"
put run/config.json 900 # a second version
put gone.bin 5000
rm "$MNT/gone.bin"
rm -f "$REF/gone.bin"
sync "$MNT" # the removal made durable
(cd "$REF" && find . -type f -printf '%P\n' | sort) >"$MANIFEST"
crash

# check_rebuilt WHAT: rebuild the store, then every file of the manifest
# exact, both versions of config.json, fsck and verify clean, a new file
# takes.
check_rebuilt()
{
    expect_status 0 "$1: ckptctl rebuild" "$CKPTCTL" rebuild --json "$STORE"
    [ "$(json_field "$OUT" files)" -ge 44 ] || fail "$1: rebuild made too few files: $OUT"
    [ "$(json_field "$OUT" incomplete)" -eq 0 ] || fail "$1: rebuild lost versions: $OUT"
    ls "$STORE"/meta.db.before-rebuild-* >/dev/null 2>&1 || [ "$1" = "meta.db deleted" ] ||
        fail "$1: the old metadata was not kept"
    store_clean "$1: after rebuild"
    mount_fs
    check_files "$1"
    echo after >"$MNT/run/after.txt"
    umount_fs
    mount_fs
    [ "$(cat "$MNT/run/after.txt")" = after ] || fail "$1: a file written after the rebuild is wrong"
    umount_fs
    store_clean "$1: after new writes"
    log "$1: rebuilt, $(wc -l <"$MANIFEST") files exact"
}

# check_files WHAT: the mounted store holds every file of the manifest,
# and both versions of config.json.
check_files()
{
    while read -r f; do same_file "$REF/$f" "$MNT/$f"; done <"$MANIFEST"
    local vdir=$MNT/.ckptfs/versions/run/config.json
    [ "$(ls "$vdir" | wc -l)" -eq 2 ] || fail "$1: config.json has $(ls "$vdir" | wc -l) versions"
    same_file "$T/config.v1" "$vdir/$(ls "$vdir" | head -1)"
}

# mark_at_end WHAT: the replay mark (ckptfs(5), config replay_from) names
# the end of the newest pack.
mark_at_end()
{
    python3 - "$STORE" <<'PY' || fail "$1: the replay mark is not at the end of the packs"
import os, sqlite3, sys
store = sys.argv[1]
db = sqlite3.connect(f"file:{store}/meta.db?mode=ro", uri=True)
row = db.execute("SELECT value FROM config WHERE CAST(key AS TEXT) = 'replay_from'").fetchone()
last = sorted(f for f in os.listdir(f"{store}/packs") if f.endswith(".pack"))[-1]
want = f"{int(last[:-5])} {os.path.getsize(os.path.join(store, 'packs', last))}"
sys.exit(0 if row and row[0] == want else f"mark {row}, packs end at {want}")
PY
}

# check_replayed WHAT: the mount alone brings every file back.
check_replayed()
{
    mount_fs
    check_files "$1 (mount)"
    umount_fs
    mark_at_end "$1: after the mount's replay"
    store_clean "$1: after the mount's replay"
    log "$1: the mount replayed what meta.db lost"
}

cp -a "$STORE" "$T/crashed"
# restore_crashed: the store as the crash left it.
restore_crashed() { rm -rf "$STORE"; cp -a "$T/crashed" "$STORE"; }

log "1. meta.db deleted"
rm -f "$STORE/meta.db" "$STORE/meta.db-wal" "$STORE/meta.db-shm"
check_fails "mount without meta.db" "ckptctl rebuild" "$CKPTFS" "$STORE" "$MNT"
check_rebuilt "meta.db deleted"

# damage N: the crashed store, damaged as case N says.
damage()
{
    restore_crashed
    case $1 in
    2) [ -s "$STORE/meta.db-wal" ] || fail "the crash left no WAL to lose"
       rm -f "$STORE/meta.db-wal" ;;
    3) truncate -s $(($(stat -c %s "$STORE/meta.db-wal") / 2)) "$STORE/meta.db-wal" ;;
    4) truncate -s 0 "$STORE/meta.db-wal" ;;
    5) cp "$T/meta.db.early" "$STORE/meta.db"
       rm -f "$STORE/meta.db-wal" "$STORE/meta.db-shm"
       [ ! -e "$T/meta.db.early-wal" ] || cp "$T/meta.db.early-wal" "$STORE/meta.db-wal" ;;
    esac
}

names=("" "" "WAL deleted" "WAL cut to half" "WAL cut to 0" "older meta.db")
for c in 2 3 4 5; do
    log "$c. ${names[$c]}"
    damage "$c"
    [ "$c" -ne 5 ] || expect_status 0 "an offline tool before the mount" "$CKPTCTL" recode "$STORE"
    check_replayed "${names[$c]}"
    damage "$c"
    check_rebuilt "${names[$c]}"
done

log "6. metadata backups"
rm -rf "$STORE"
mount_fs backup_interval=1
for i in 1 2 3 4 5; do
    put "b/f$i" $((i * 1000))
    sleep 1.2
done
umount_fs
n=$(find "$STORE/backups" -name 'meta-*.db' | wc -l)
[ "$n" -ge 1 ] && [ "$n" -le 3 ] || fail "backups kept: $n (want 1 to 3): $(ls "$STORE/backups")"
[ -z "$(find "$STORE/backups" -name '*.tmp')" ] || fail "a backup was left half-written"
newest=$(find "$STORE/backups" -name 'meta-*.db' | sort | tail -1)
# The newest copy as meta.db, and one more file written after it: the
# mount brings that back from the packs.
mount_fs backup_interval=0
put b/after 4321
sync "$MNT/b"
umount_fs
rm -f "$STORE/meta.db-wal" "$STORE/meta.db-shm"
cp "$newest" "$STORE/meta.db"
mount_fs
for i in 1 2 3 4 5 after; do
    f=b/f$i
    [ "$i" != after ] || f=b/after
    same_file "$REF/$f" "$MNT/$f"
done
umount_fs
store_clean "a backup put back as meta.db"
log "backups: $n kept; the newest as meta.db, and the mount replayed the rest"
