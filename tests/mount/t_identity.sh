#!/bin/bash
# t_identity.sh: a store refuses what is not its own, touching nothing.
#
#  - A directory whose meta.db is another program's SQLite database, or not
#    SQLite at all: ckptfs and ckptctl refuse it, and every file in it is
#    byte-identical afterwards (no lock, no tables, no WAL added).
#  - A non-empty directory that is not a store: refused untouched; with
#    -o init_nonempty a store is made there, beside the files.
#  - Packs without a meta.db (its metadata lost): refused untouched.
#  - A store made before meta.db carried ckptfs's application id (id 0,
#    ckptfs's tables) mounts, and is stamped with the id.
set -euo pipefail
# shellcheck source=tests/lib.sh
. "$TESTLIB"

snapshot() { (cd "$1" && find . -printf '%p %s %m\n' | sort && find . -type f -exec md5sum {} + | sort); }

# refused DIR WHAT: ckptfs and ckptctl refuse DIR, which stays as it was.
refused()
{
    local dir=$1 what=$2 before
    before=$(snapshot "$dir")
    expect_status 1 "mounting $what" "$CKPTFS" "$dir" "$MNT"
    grep -q "left untouched" <<<"$ERR" || fail "mounting $what: unclear refusal: $ERR"
    MOUNT_ERR=$ERR
    is_mounted "$MNT" && fail "$what was mounted"
    expect_status 1 "ckptctl stats of $what" "$CKPTCTL" stats "$dir"
    expect_status 1 "ckptctl gc of $what" "$CKPTCTL" gc "$dir"
    [ "$(snapshot "$dir")" = "$before" ] || fail "$what changed: $(diff <(echo "$before") <(snapshot "$dir"))"
}

log "another program's SQLite database"
mkdir "$T/foreign"
python3 - "$T/foreign/meta.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")
db.execute("INSERT INTO notes (text) VALUES ('mine')")
db.commit()
PY
refused "$T/foreign" "a foreign meta.db"

log "a meta.db that is not SQLite"
mkdir "$T/junk"
head -c 5000 /dev/urandom >"$T/junk/meta.db"
refused "$T/junk" "a meta.db of random bytes"

log "a non-empty directory that is not a store"
mkdir -p "$T/home/sub"
echo "keep me" >"$T/home/notes.txt"
echo "and me" >"$T/home/sub/x"
refused "$T/home" "a non-empty directory"
log "-o init_nonempty makes a store there anyway"
STORE=$T/home
mount_fs init_nonempty
echo hi >"$MNT/f"
umount_fs
[ "$(cat "$T/home/notes.txt")" = "keep me" ] || fail "init_nonempty changed the files beside the store"
[ -f "$T/home/meta.db" ] || fail "init_nonempty made no store"

log "packs without meta.db"
STORE=$T/lost
mount_fs
head -c 300000 /dev/urandom >"$MNT/data"
umount_fs
rm -f "$STORE"/meta.db "$STORE"/meta.db-wal "$STORE"/meta.db-shm
refused "$STORE" "packs without a meta.db"
grep -q "metadata is lost" <<<"$MOUNT_ERR" || fail "packs without meta.db: $MOUNT_ERR"

log "a store from before the application id"
STORE=$T/old
mount_fs
head -c 300000 /dev/urandom >"$REF/old"
cp "$REF/old" "$MNT/old"
umount_fs
python3 - "$STORE/meta.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("PRAGMA application_id = 0")
db.commit()
assert db.execute("PRAGMA application_id").fetchone()[0] == 0
PY
check "ckptctl stats of a store without the id" "$CKPTCTL" stats "$STORE" >/dev/null
mount_fs
same_file "$MNT/old" "$REF/old"
umount_fs
id=$(python3 -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute("PRAGMA application_id").fetchone()[0])' "$STORE/meta.db")
[ "$id" = 1129009236 ] || fail "the store was not stamped with ckptfs's application id (it has $id)"
