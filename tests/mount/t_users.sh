#!/bin/bash
# t_users.sh: a mount with -o allow_other,default_permissions used by an
# unprivileged user (nobody): files and directories are created owned by the
# caller, the owner may chmod, write, read and remove them; root's files and
# the sticky bit are enforced (EACCES/EPERM). Ownership survives a remount.
set -euo pipefail
# shellcheck source=tests/lib.sh
. "$TESTLIB"

id nobody >/dev/null 2>&1 || fail "user nobody does not exist"
NOGROUP=$(id -gn nobody)

# A python3 that nobody may run (python3 on PATH may live in root's home).
NPY=/usr/bin/python3
[ -x "$NPY" ] || NPY=$(command -v python3)

# The user must be able to reach the mount point.
chmod 0755 "$T"

# as_nobody CMD...: run CMD as nobody:$NOGROUP with no supplementary groups.
as_nobody() { setpriv --reuid=nobody --regid="$NOGROUP" --clear-groups -- "$@"; }
# nsh SCRIPT ARGS...: run a shell script as nobody; $1.. are ARGS.
nsh() { local s=$1; shift; as_nobody sh -c "$s" sh "$@"; }

mount_fs allow_other,default_permissions

PUB=$MNT/pub
mkdir "$PUB"
chmod 1777 "$PUB"
[ "$(stat -c %a "$PUB")" = 1777 ] || fail "chmod 1777 gave $(stat -c %a "$PUB")"

log "nobody creates, chmods, writes, reads and removes its own files"
check "nobody creates a file" nsh 'echo "from nobody" >"$1"' "$PUB/nf"
[ "$(stat -c %U:%G "$PUB/nf")" = "nobody:$NOGROUP" ] ||
    fail "file made by nobody is owned by $(stat -c %U:%G "$PUB/nf")"
check "nobody chmods its file" as_nobody chmod 0600 "$PUB/nf"
[ "$(stat -c %a "$PUB/nf")" = 600 ] || fail "mode after nobody's chmod is $(stat -c %a "$PUB/nf")"
check "nobody appends to its file" nsh 'echo "second line" >>"$1"' "$PUB/nf"
got=$(as_nobody cat "$PUB/nf") || fail "nobody cannot read its own file"
[ "$got" = "from nobody
second line" ] || fail "nobody reads back '$got'"
rand_file "$REF/big" $((3 << 20))
chmod 0644 "$REF/big"
check "nobody writes 3 MiB with dd" as_nobody dd if="$REF/big" of="$PUB/big" bs=64K status=none
same_file "$REF/big" "$PUB/big"
check "nobody overwrites at an offset" as_nobody dd if="$REF/big" of="$PUB/big" bs=4096 count=3 seek=100 conv=notrunc status=none
dd if="$REF/big" of="$REF/big" bs=4096 count=3 seek=100 conv=notrunc status=none
same_file "$REF/big" "$PUB/big"
check "nobody truncates its file" as_nobody truncate -s 1000 "$PUB/big"
[ "$(stat -c %s "$PUB/big")" -eq 1000 ] || fail "truncate by nobody gave size $(stat -c %s "$PUB/big")"
check "nobody sets an xattr on its file" as_nobody setfattr -n user.owner -v nobody "$PUB/nf"
check "nobody utimes its file" as_nobody touch -d '2010-01-01 00:00:00 UTC' "$PUB/nf"
[ "$(stat -c %Y "$PUB/nf")" -eq 1262304000 ] || fail "touch -d by nobody gave mtime $(stat -c %Y "$PUB/nf")"

check "nobody makes a directory" as_nobody mkdir "$PUB/nd"
[ "$(stat -c %U:%G "$PUB/nd")" = "nobody:$NOGROUP" ] || fail "dir made by nobody is owned by $(stat -c %U:%G "$PUB/nd")"
check "nobody creates a file in its directory" nsh 'echo x >"$1/inner"' "$PUB/nd"
check "nobody makes a symlink" as_nobody ln -s inner "$PUB/nd/link"
[ "$(stat -c %U "$PUB/nd/link")" = nobody ] || fail "symlink made by nobody owned by $(stat -c %U "$PUB/nd/link")"
check "nobody renames its file" as_nobody mv "$PUB/nd/inner" "$PUB/nd/renamed"
check "nobody hard-links its file" as_nobody ln "$PUB/nd/renamed" "$PUB/nd/hard"

# chown of one's own file to another user is refused; to one's own group is fine.
check_fails "nobody chowns its file to root" "Operation not permitted" as_nobody chown root "$PUB/nf"
check "nobody chgrps its file to its own group" as_nobody chgrp "$NOGROUP" "$PUB/nf"

log "root's files are protected from nobody"
echo "root data" >"$PUB/rootfile"
chmod 0644 "$PUB/rootfile"
[ "$(as_nobody cat "$PUB/rootfile")" = "root data" ] || fail "nobody cannot read a 0644 root file"
check_fails "nobody writes a root 0644 file" "Permission denied" nsh 'echo evil >"$1"' "$PUB/rootfile"
check_fails "nobody appends to a root 0644 file" "Permission denied" nsh 'echo evil >>"$1"' "$PUB/rootfile"
check_fails "nobody truncates a root 0644 file" "Permission denied" as_nobody truncate -s 0 "$PUB/rootfile"
check_fails "nobody removes a root file in a sticky dir" "Operation not permitted" as_nobody rm -f "$PUB/rootfile"
check_fails "nobody renames a root file in a sticky dir" "Operation not permitted" as_nobody mv "$PUB/rootfile" "$PUB/stolen"
check_fails "nobody chmods a root file" "Operation not permitted" as_nobody chmod 0666 "$PUB/rootfile"
check_fails "nobody chowns a root file" "Operation not permitted" as_nobody chown nobody "$PUB/rootfile"
check_fails "nobody sets times of a root file" "Operation not permitted" \
    as_nobody "$NPY" -c 'import os, sys; os.utime(sys.argv[1], (0, 0))' "$PUB/rootfile"
check_fails "nobody sets times of a root file to now" "Permission denied" \
    as_nobody "$NPY" -c 'import os, sys; os.utime(sys.argv[1])' "$PUB/rootfile"
check_fails "nobody sets an xattr on a root file" "Permission denied" as_nobody setfattr -n user.x -v y "$PUB/rootfile"
[ "$(cat "$PUB/rootfile")" = "root data" ] || fail "root file changed: $(cat "$PUB/rootfile")"
[ "$(stat -c %a:%U "$PUB/rootfile")" = 644:root ] || fail "root file attributes changed: $(stat -c %a:%U "$PUB/rootfile")"

echo secret >"$MNT/secret"
chmod 0600 "$MNT/secret"
check_fails "nobody reads a root 0600 file" "Permission denied" as_nobody cat "$MNT/secret"
check_fails "nobody creates a file in root's 0755 dir" "Permission denied" nsh 'echo x >"$1"' "$MNT/intruder"
check_fails "nobody makes a dir in root's 0755 dir" "Permission denied" as_nobody mkdir "$MNT/intruder"
check_fails "nobody removes a root file from root's dir" "Permission denied" as_nobody rm -f "$MNT/secret"
mkdir "$MNT/private"
chmod 0700 "$MNT/private"
check_fails "nobody lists a root 0700 dir" "Permission denied" as_nobody ls "$MNT/private"
# Root may still read nobody's 0600 file.
[ "$(cat "$PUB/nf")" = "from nobody
second line" ] || fail "root cannot read nobody's 0600 file"

# A setgid directory hands its group to new entries.
mkdir "$MNT/sgid"
chgrp 4321 "$MNT/sgid"
chmod 2777 "$MNT/sgid"
check "nobody creates a file in a setgid dir" nsh 'echo g >"$1"' "$MNT/sgid/f"
check "nobody creates a dir in a setgid dir" as_nobody mkdir "$MNT/sgid/d"
[ "$(stat -c %u:%g "$MNT/sgid/f")" = "$(id -u nobody):4321" ] || fail "file in setgid dir owned by $(stat -c %u:%g "$MNT/sgid/f")"
[ "$(stat -c %g "$MNT/sgid/d")" = 4321 ] || fail "dir in setgid dir has group $(stat -c %g "$MNT/sgid/d")"
[ $(( 0$(stat -c %a "$MNT/sgid/d") & 02000 )) -ne 0 ] || fail "dir in setgid dir lacks setgid: $(stat -c %a "$MNT/sgid/d")"

log "ownership survives a remount"
remount_fs allow_other,default_permissions
[ "$(stat -c %U:%G:%a "$PUB/nf")" = "nobody:$NOGROUP:600" ] || fail "after remount nf is $(stat -c %U:%G:%a "$PUB/nf")"
[ "$(stat -c %U "$PUB/nd")" = nobody ] || fail "after remount nd owned by $(stat -c %U "$PUB/nd")"
[ "$(stat -c %a "$PUB")" = 1777 ] || fail "after remount pub has mode $(stat -c %a "$PUB")"
check_fails "after remount nobody still cannot write root's file" "Permission denied" nsh 'echo evil >"$1"' "$PUB/rootfile"

log "nobody removes its own files"
check "nobody removes its file" as_nobody rm "$PUB/nf"
check "nobody removes its big file" as_nobody rm "$PUB/big"
check "nobody removes its directory tree" as_nobody rm -r "$PUB/nd"
[ "$(ls -A "$PUB")" = rootfile ] || fail "pub holds other than root's file: $(ls -A "$PUB")"

log "without allow_other other users are kept out"
remount_fs
check_fails "nobody stats a mount without allow_other" "Permission denied" as_nobody stat "$MNT/pub"
umount_fs
