#!/bin/bash
# t_history.sh: the read-only history view at MOUNT/.ckptfs.
#  1. A file overwritten 5 times, 5 different ways (cp, the shell's `cat >`,
#     rename-over, fsync halfway, two writers): .ckptfs/versions/d/f/ lists
#     exactly 5 versions vNNNNNNNN-YYYYMMDDTHHMMSSZ in time order, each the
#     matching reference byte for byte, with its size, mtime, sequence number
#     (= user.ckptfs.version of the live file after that write) and time; and
#     .ckptfs/seq/N/d/f shows the right one for the N after each write.
#  2. A deleted file and a deleted tree (rm -rf) read back byte-exact under
#     .ckptfs/seq/N and .ckptfs/time/T (listed name, @EPOCH and fractions) for
#     a point before the deletion, and are absent after it.
#  3. Every change under .ckptfs fails with EROFS; mkdir .ckptfs fails with
#     EEXIST; .ckptfs is hidden from `ls -A MNT`; user.ckptfs.* cannot be set.
#  4. user.ckptfs.{version,stored_bytes,ratio,codec} of live and view files.
#  5. A training run with save_total_limit 1 rotates checkpoint-N dirs away;
#     the deleted ones, read from the view, equal a native run's files, torch
#     loads their optimizer.pt and --eval-from reproduces the logged loss.
# Parts 1, 2 and 5 are checked again after a remount with cold caches.
# The listings are what is under test, hence ls (names here are plain).
# shellcheck disable=SC2012,SC2015
set -euo pipefail
# shellcheck source=tests/lib.sh
. "$TESTLIB"

need_torch
command -v getfattr >/dev/null && command -v setfattr >/dev/null || fail "needs getfattr and setfattr (attr)"

H=$MNT/.ckptfs
ROFS="Read-only file system"

# xget NAME FILE: the value of one xattr.
xget()
{
    local v
    v=$(getfattr --absolute-names --only-values -n "$1" -- "$2" 2>&1) ||
        fail "getfattr -n $1 $2: $v"
    printf '%s' "$v"
}
# last_seq: the newest entry of .ckptfs/seq.
last_seq()
{
    local l
    l=$(ls "$H/seq" | sort -n | tail -n 1)
    [ -n "$l" ] || fail "ls $H/seq is empty"
    echo "$l"
}
utc() { date -u +%Y%m%dT%H%M%SZ; }
# has_entry DIR NAME: DIR's listing (ls -A) has NAME.
has_entry()
{
    local e names
    mapfile -t names < <(ls -A -- "$1")
    for e in "${names[@]}"; do [ "$e" != "$2" ] || return 0; done
    return 1
}
# vnum NAME: the sequence number in a version file name vNNNNNNNN-...
vnum()
{
    [[ $1 =~ ^v([0-9]{8})- ]] || fail "'$1' is not a version file name"
    echo $((10#${BASH_REMATCH[1]}))
}

mount_fs

# ---- 1. five versions of one file ----------------------------------------
log "1. one file overwritten 5 times"
mkdir "$MNT/d"
sizes=(150001 70000 300013 1048583 102400)
VER=() MT=() T0=() T1=() RS=()
for i in 0 1 2 3 4; do
    rand_file "$REF/f.$i" "${sizes[$i]}"
    T0[i]=$(utc)
    case $i in
    0) cp "$REF/f.$i" "$MNT/d/f" ;;
    1) cat "$REF/f.$i" >"$MNT/d/f" ;; # the shell opens, dup2s and closes
    2) cp "$REF/f.$i" "$MNT/d/f.tmp" && mv "$MNT/d/f.tmp" "$MNT/d/f" ;;
    3) "$PY" - "$REF/f.$i" "$MNT/d/f" <<'PY' ;; # an fsync halfway: provisional
import os, sys
data = open(sys.argv[1], "rb").read()
with open(sys.argv[2], "wb") as f:
    f.write(data[:len(data) // 2]); f.flush(); os.fsync(f.fileno())
    f.write(data[len(data) // 2:])
PY
    4) "$PY" - "$REF/f.$i" "$MNT/d/f" <<'PY' ;; # two writers: the last close commits
import os, sys
data = open(sys.argv[1], "rb").read()
a = os.open(sys.argv[2], os.O_WRONLY | os.O_TRUNC)
b = os.open(sys.argv[2], os.O_WRONLY)
h = len(data) // 2
os.pwrite(a, data[:h], 0); os.fsync(a); os.close(a)
os.pwrite(b, data[h:], h); os.close(b)
PY
    esac
    same_file "$MNT/d/f" "$REF/f.$i"
    # The last close commits behind the writer (the kernel does not wait
    # for a release): the write ends once its version is known, which pays
    # that commit (vfs_xattr.c).
    VER[i]=$(xget user.ckptfs.version "$MNT/d/f")
    T1[i]=$(utc)
    MT[i]=$(stat -c %.9Y "$MNT/d/f")
    RS[i]=$(last_seq)
    [[ ${VER[$i]} =~ ^[1-9][0-9]*$ ]] || fail "user.ckptfs.version of d/f after write $((i + 1)) is '${VER[$i]}'"
    [ "${RS[$i]}" -ge "${VER[$i]}" ] || fail "last entry of .ckptfs/seq (${RS[$i]}) < version ${VER[$i]} just committed"
    [ "$i" -eq 0 ] || [ "${VER[$i]}" -gt "${VER[$((i - 1))]}" ] ||
        fail "write $((i + 1)) of d/f did not make a newer version (${VER[$((i - 1))]} -> ${VER[$i]})"
done

verify_versions()
{
    local when=$1 vdir=$H/versions/d/f names i name n t prev=0 prevt=
    mapfile -t names < <(ls -U -A "$vdir") # the file system's own order
    [ "${#names[@]}" -eq 5 ] ||
        fail "$when: $vdir lists ${#names[@]} entries, expected 5 versions: ${names[*]}"
    for i in 0 1 2 3 4; do
        name=${names[$i]}
        [[ $name =~ ^v([0-9]{8})-([0-9]{8}T[0-9]{6}Z)$ ]] ||
            fail "$when: '$name' in $vdir is not named vNNNNNNNN-YYYYMMDDTHHMMSSZ"
        n=$((10#${BASH_REMATCH[1]})) t=${BASH_REMATCH[2]}
        [ "$n" -gt "$prev" ] && [[ ! $t < $prevt ]] ||
            fail "$when: $vdir is not in time order: ${names[*]}"
        prev=$n prevt=$t
        [ "$n" -eq "${VER[$i]}" ] ||
            fail "$when: version $((i + 1)) is $name but the live file showed user.ckptfs.version ${VER[$i]} then"
        [[ ! $t < ${T0[$i]} && ! $t > ${T1[$i]} ]] ||
            fail "$when: $name: time $t not within the write (${T0[$i]} .. ${T1[$i]})"
        [ "$(stat -c %s "$vdir/$name")" -eq "${sizes[$i]}" ] ||
            fail "$when: $name has size $(stat -c %s "$vdir/$name"), expected ${sizes[$i]}"
        cmp -- "$vdir/$name" "$REF/f.$i" || fail "$when: $vdir/$name differs from write $((i + 1))"
        [ "$(stat -c %.9Y "$vdir/$name")" = "${MT[$i]}" ] ||
            fail "$when: $name has mtime $(stat -c %.9Y "$vdir/$name"), the file had ${MT[$i]}"
        [ "$(xget user.ckptfs.version "$vdir/$name")" = "$n" ] ||
            fail "$when: $name has user.ckptfs.version $(xget user.ckptfs.version "$vdir/$name")"
        cmp -- "$H/seq/${RS[$i]}/d/f" "$REF/f.$i" ||
            fail "$when: .ckptfs/seq/${RS[$i]}/d/f is not write $((i + 1))"
        cmp -- "$H/seq/${VER[$i]}/d/$([ "$i" -eq 2 ] && echo f.tmp || echo f)" "$REF/f.$i" ||
            fail "$when: .ckptfs/seq/${VER[$i]} (the commit of write $((i + 1))) does not show it"
    done
    # Before the rename, d/f still showed write 2.
    cmp -- "$H/seq/${VER[2]}/d/f" "$REF/f.1" || fail "$when: .ckptfs/seq/${VER[2]}/d/f is not write 2"
    # versions/d lists every name d held, f.tmp included.
    has_entry "$H/versions/d" f.tmp || fail "$when: versions/d does not list the renamed-away f.tmp"
    has_entry "$H/versions/d" f || fail "$when: versions/d does not list f"
    same_file "$MNT/d/f" "$REF/f.4"
}
verify_versions "before remount"

# ---- 2. deleted file and tree ---------------------------------------------
log "2. a deleted file and a deleted tree in seq/N and time/T"
rand_file "$REF/gone.bin" 123457
mkdir -p "$REF/tree/a/b" "$REF/tree/e"
rand_file "$REF/tree/a/b/c.bin" 300000
seq 1 20000 >"$REF/tree/x.txt"
printf y >"$REF/tree/a/y"
: >"$REF/tree/empty"
ln -s a/y "$REF/tree/link"
cp "$REF/gone.bin" "$MNT/gone.bin"
cp -a "$REF/tree" "$MNT/tree"
V_GONE=$(xget user.ckptfs.version "$MNT/gone.bin")
STORED_GONE=$(xget user.ckptfs.stored_bytes "$MNT/gone.bin")
S=$(last_seq)
# check_seq_listing WHEN: ls .ckptfs/seq lists every sequence number, once,
# in order (in the file system's own order, over several readdir calls when long).
check_seq_listing()
{
    local seqs i
    mapfile -t seqs < <(ls -U "$H/seq")
    [ "${#seqs[@]}" -ge 2 ] || fail "$1: ls .ckptfs/seq lists ${#seqs[@]} entries"
    for ((i = 1; i < ${#seqs[@]}; i++)); do
        [ "${seqs[$i]}" -eq $((seqs[i - 1] + 1)) ] ||
            fail "$1: ls .ckptfs/seq skips or repeats after ${seqs[$((i - 1))]}: ${seqs[$i]}"
    done
    # From the store's first change to one at least as new as the newest
    # version seen (gone.bin's, committed before the first call).
    [ "${seqs[0]}" -eq 1 ] || fail "$1: ls .ckptfs/seq starts at ${seqs[0]}, not 1"
    [ "${seqs[-1]}" -ge "$V_GONE" ] || fail "$1: ls .ckptfs/seq ends at ${seqs[-1]}, before $V_GONE"
}
check_seq_listing "before the deletion"
[ "$S" -gt "$V_GONE" ] || fail "copying the tree after gone.bin took no sequence number ($S <= $V_GONE)"
sleep 1.1 # the deletion falls in a later second than the creation
TB=$(ls "$H/time" | tail -n 1)
mapfile -t times < <(ls -U "$H/time")
for t in "${times[@]}"; do
    [[ $t =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$ ]] ||
        fail ".ckptfs/time lists '$t', not YYYY-MM-DDTHH:MM:SSZ"
done
[ "$(ls -U "$H/time")" = "$(ls "$H/time" | sort -u)" ] || fail ".ckptfs/time is not listed in time order, once each"
EPOCH=$(date -u -d "$TB" +%s) || fail "cannot parse the time entry '$TB'"
NEXT_FRAC=$(date -u -d "@$((EPOCH + 1))" +%Y-%m-%dT%H:%M:%S).000Z

rm "$MNT/gone.bin"
rm -rf "$MNT/tree"
[ ! -e "$MNT/gone.bin" ] && [ ! -e "$MNT/tree" ] || fail "rm did not remove gone.bin / tree from the mount"
L=$(last_seq)
[ "$L" -gt "$S" ] || fail "the deletions took no sequence number (last $L, before $S)"
TA=$(ls "$H/time" | tail -n 1)
[ "$TA" != "$TB" ] || fail ".ckptfs/time has no entry for the second of the deletion"

verify_deleted()
{
    local when=$1 v vs
    for v in "seq/$S" "time/$TB" "time/@$EPOCH" "time/$NEXT_FRAC"; do
        cmp -- "$H/$v/gone.bin" "$REF/gone.bin" || fail "$when: .ckptfs/$v/gone.bin differs from the deleted file"
        diff -r --no-dereference "$H/$v/tree" "$REF/tree" ||
            fail "$when: .ckptfs/$v/tree differs from the deleted tree"
        [ "$(readlink "$H/$v/tree/link")" = a/y ] || fail "$when: .ckptfs/$v/tree/link does not read a/y"
        same_file "$H/$v/d/f" "$REF/f.4"
    done
    for v in "seq/$L" "time/$TA"; do
        ! has_entry "$H/$v" gone.bin || fail "$when: .ckptfs/$v (after the deletion) lists gone.bin"
        ! has_entry "$H/$v" tree || fail "$when: .ckptfs/$v (after the deletion) lists tree"
        [ ! -e "$H/$v/gone.bin" ] || fail "$when: .ckptfs/$v/gone.bin exists after the deletion"
        has_entry "$H/$v" d || fail "$when: .ckptfs/$v does not list d"
    done
    has_entry "$H/seq/$S" gone.bin && has_entry "$H/seq/$S" tree ||
        fail "$when: .ckptfs/seq/$S does not list gone.bin and tree"
    has_entry "$H/versions" gone.bin && has_entry "$H/versions" tree ||
        fail "$when: .ckptfs/versions does not list the deleted gone.bin and tree"
    mapfile -t vs < <(ls -A "$H/versions/tree/a/b/c.bin")
    [ "${#vs[@]}" -eq 1 ] || fail "$when: versions/tree/a/b/c.bin lists ${#vs[@]}: ${vs[*]}"
    v=${vs[0]}
    cmp -- "$H/versions/tree/a/b/c.bin/$v" "$REF/tree/a/b/c.bin" || fail "$when: versions/tree/a/b/c.bin/$v differs"
    [ ! -e "$H/seq/$((L + 1000))" ] || fail "$when: .ckptfs/seq/$((L + 1000)) exists"
    [ ! -e "$H/time/2000-01-01T00:00:00Z" ] || fail "$when: .ckptfs/time before the first change exists"
}
verify_deleted "before remount"

# ---- 3. read-only ----------------------------------------------------------
log "3. EROFS under .ckptfs, hidden in the root"
V=$H/seq/$S
VF=$H/versions/d/f/$(ls "$H/versions/d/f" | tail -n 1)
printf scratch >"$MNT/scratch"
check_fails "write into a view file" "$ROFS" bash -c "echo x >'$V/gone.bin'"
check_fails "append to a view file" "$ROFS" bash -c "echo x >>'$V/gone.bin'"
check_fails "write into a versions file" "$ROFS" bash -c "echo x >'$VF'"
check_fails "truncate a view file" "$ROFS" truncate -s 0 "$V/gone.bin"
check_fails "create a file in the view" "$ROFS" bash -c ": >'$V/new'"
check_fails "create a file in versions" "$ROFS" bash -c ": >'$H/versions/new'"
check_fails "touch a new file in the view" "$ROFS" touch "$V/tree/new"
check_fails "mkdir in the view" "$ROFS" mkdir "$V/newdir"
check_fails "mkdir in .ckptfs/seq" "$ROFS" mkdir "$H/seq/999999"
check_fails "symlink in the view" "$ROFS" ln -s x "$V/sl"
check_fails "hard link into the view" "$ROFS" ln "$MNT/scratch" "$V/hl"
check_fails "hard link of a view file" "$ROFS" ln "$V/gone.bin" "$MNT/hl"
check_fails "rm of a view file" "$ROFS" rm -f "$V/gone.bin"
check_fails "rm of a versions file" "$ROFS" rm -f "$VF"
check_fails "rm -rf of a view tree" "$ROFS" rm -rf "$V/tree"
check_fails "rmdir in the view" "$ROFS" rmdir "$V/tree/e"
check_fails "rmdir .ckptfs/seq" "$ROFS" rmdir "$H/seq"
check_fails "rmdir .ckptfs" "$ROFS" rmdir "$H"
check_fails "rename in the view" "$ROFS" mv "$V/gone.bin" "$V/gone2"
check_fails "rename out of the view" "$ROFS" mv "$V/gone.bin" "$MNT/stolen"
check_fails "rename into the view" "$ROFS" mv "$MNT/scratch" "$V/scratch"
check_fails "rename .ckptfs" "$ROFS" mv -T "$H" "$MNT/renamed"
mkdir "$MNT/emptydir"
check_fails "rename a directory over .ckptfs" "$ROFS" mv -T "$MNT/emptydir" "$H"
check_fails "chmod a view file" "$ROFS" chmod 600 "$V/gone.bin"
check_fails "chmod a view dir" "$ROFS" chmod 700 "$V/tree"
check_fails "chown a view file" "$ROFS" chown 1:1 "$V/gone.bin"
check_fails "touch (utimens) a view file" "$ROFS" touch "$V/gone.bin"
check_fails "setfattr on a view file" "$ROFS" setfattr -n user.x -v 1 "$V/gone.bin"
check_fails "setfattr on a view dir" "$ROFS" setfattr -n user.x -v 1 "$V/tree"
check_fails "removexattr on a view file" "$ROFS" setfattr -x user.ckptfs.version "$V/gone.bin"
check_fails "create in .ckptfs" "$ROFS" touch "$H/x"
check_fails "mkdir .ckptfs in the root" "File exists" mkdir "$MNT/.ckptfs"
check_fails "symlink named .ckptfs in the root" "File exists" ln -sT x "$MNT/.ckptfs"
check_fails "setting user.ckptfs.version on a live file" "Operation not permitted" \
    setfattr -n user.ckptfs.version -v 1 "$MNT/d/f"
check_fails "removing user.ckptfs.codec of a live file" "Operation not permitted" \
    setfattr -x user.ckptfs.codec "$MNT/d/f"
check "a user.* xattr on a live file still works" setfattr -n user.note -v hi "$MNT/scratch"
[ "$(xget user.note "$MNT/scratch")" = hi ] || fail "user.note of scratch does not read back"
# Nothing changed: the view, the live tree, and no new sequence number.
same_file "$V/gone.bin" "$REF/gone.bin"
diff -r --no-dereference "$V/tree" "$REF/tree" || fail "the view tree changed after the refused changes"
[ "$(cat "$MNT/scratch")" = scratch ] && [ -d "$MNT/emptydir" ] || fail "scratch or emptydir changed"
for n in stolen hl renamed gone.bin; do [ ! -e "$MNT/$n" ] || fail "$MNT/$n appeared"; done
! has_entry "$MNT" .ckptfs || fail "ls -A $MNT shows .ckptfs: $(ls -A "$MNT" | tr '\n' ' ')"
[ -d "$H" ] || fail "$H is not reachable by name"
[ "$(ls "$H" | tr '\n' ' ')" = "seq time versions " ] || fail "ls .ckptfs gives: $(ls "$H" | tr '\n' ' ')"
[ "$(find "$MNT" -maxdepth 1 -name .ckptfs | wc -l)" -eq 0 ] || fail "find lists .ckptfs in the root"

# A path deleted and created again: versions/PATH lists what both inodes showed.
rand_file "$REF/gone.new" 4321
sleep 1.1 # not in the second of the deletion, which time/$TA shows
cp "$REF/gone.new" "$MNT/gone.bin"
verify_recreated()
{
    local names
    mapfile -t names < <(ls -U -A "$H/versions/gone.bin")
    [ "${#names[@]}" -eq 2 ] || fail "$1: versions/gone.bin lists: ${names[*]} (expected the deleted and the new version)"
    cmp -- "$H/versions/gone.bin/${names[0]}" "$REF/gone.bin" || fail "$1: versions/gone.bin/${names[0]} is not the deleted file"
    cmp -- "$H/versions/gone.bin/${names[1]}" "$REF/gone.new" || fail "$1: versions/gone.bin/${names[1]} is not the new file"
    same_file "$MNT/gone.bin" "$REF/gone.new"
}
verify_recreated "before remount"

# ---- 4. xattrs -------------------------------------------------------------
log "4. user.ckptfs.* attributes"
seq 1 150000 >"$REF/comp.txt"
cp "$REF/comp.txt" "$MNT/comp.txt"
# check_xattrs FILE WANT_VERSION DESC: the four attributes, readable by name
# but not listed (copying tools would try to set them), and sane values
# (the policy is t_lossy's).
check_xattrs()
{
    local f=$1 want=$2 desc=$3 names ver stored ratio codec size
    names=$(getfattr --absolute-names -m '^user\.ckptfs\.' -d "$f" 2>&1 | sed -n 's/=.*//p' | { grep -v '^user.ckptfs.policy$' || true; } | sort | tr '\n' ' ')
    [ -z "$names" ] || fail "$desc: getfattr -d lists the computed '$names'"
    ver=$(xget user.ckptfs.version "$f")
    stored=$(xget user.ckptfs.stored_bytes "$f")
    ratio=$(xget user.ckptfs.ratio "$f")
    codec=$(xget user.ckptfs.codec "$f")
    size=$(stat -c %s "$f")
    log "$desc: version $ver, stored_bytes $stored, ratio $ratio, codec '$codec', size $size"
    [ "$ver" = "$want" ] || fail "$desc: user.ckptfs.version is '$ver', expected $want"
    [[ $stored =~ ^[1-9][0-9]*$ ]] || fail "$desc: user.ckptfs.stored_bytes is '$stored'"
    "$PY" - "$size" "$stored" "$ratio" "$codec" <<'PY' || fail "$desc: inconsistent user.ckptfs.* values"
import re, sys
size, stored, ratio, codec = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
if abs(ratio - size / stored) > 0.0006:
    sys.exit(f"ratio {ratio} is not size/stored_bytes = {size / stored:.4f}")
parts = re.findall(r"(raw|zstd|tensor|tensor-delta) (\d+\.\d)%", codec)
if not parts or " ".join(f"{n} {p}%" for n, p in parts) != codec:
    sys.exit(f"codec {codec!r} is not 'NAME PCT% ...'")
if len({n for n, _ in parts}) != len(parts) or abs(sum(float(p) for _, p in parts) - 100) > 0.3:
    sys.exit(f"codec {codec!r}: names repeat or shares do not add up to 100%")
PY
}
CV=$(ls "$H/versions/comp.txt" | tail -n 1)
check_xattrs "$MNT/comp.txt" "$(vnum "$CV")" "live comp.txt"
check_xattrs "$H/versions/comp.txt/$CV" "$(xget user.ckptfs.version "$MNT/comp.txt")" "versions/comp.txt/$CV"
stored=$(xget user.ckptfs.stored_bytes "$MNT/comp.txt")
[ "$stored" -lt $(($(stat -c %s "$REF/comp.txt") / 2)) ] ||
    fail "comp.txt (text) stores in $stored bytes, not compressed"
[ "$stored" -eq "$(file_stored /comp.txt)" ] ||
    fail "user.ckptfs.stored_bytes of comp.txt is $stored, ckptctl stats says $(file_stored /comp.txt)"
check_xattrs "$MNT/d/f" "${VER[4]}" "live d/f"
check_xattrs "$H/seq/$S/gone.bin" "$V_GONE" "seq/$S/gone.bin (deleted)"
[ "$(xget user.ckptfs.stored_bytes "$H/seq/$S/gone.bin")" = "$STORED_GONE" ] ||
    fail "stored_bytes of the deleted gone.bin changed from $STORED_GONE"
for i in 0 1 2 3 4; do
    [ "$(xget user.ckptfs.version "$H/seq/${RS[$i]}/d/f")" = "${VER[$i]}" ] ||
        fail "seq/${RS[$i]}/d/f has user.ckptfs.version $(xget user.ckptfs.version "$H/seq/${RS[$i]}/d/f"), expected ${VER[$i]}"
done
check_fails "user.ckptfs.version of a directory" "No such attribute" \
    getfattr --only-values -n user.ckptfs.version "$MNT/d"

# ---- 5. rotated-away checkpoints -------------------------------------------
log "5. training with save_total_limit 1, deleted checkpoints from the view"
train "the native run" --tiny --out "$REF/run" --save-every 5 --save-total-limit 0
train "the run into the mount" --tiny --out "$MNT/run" --save-every 5 --save-total-limit 1
[ "$(ls "$MNT/run")" = checkpoint-20 ] || fail "rotation left: $(ls "$MNT/run" | tr '\n' ' ')"
[ "$(ls "$REF/run" | sort | tr '\n' ' ')" = "checkpoint-10 checkpoint-15 checkpoint-20 checkpoint-5 " ] ||
    fail "the native run made: $(ls "$REF/run" | tr '\n' ' ')"
for c in checkpoint-5 checkpoint-10 checkpoint-15 checkpoint-20; do
    has_entry "$H/versions/run" "$c" || fail "versions/run does not list $c"
done
# The seq at which checkpoint-N was complete: its newest file's version.
declare -A CS
for c in checkpoint-5 checkpoint-10 checkpoint-15; do
    [ ! -e "$MNT/run/$c" ] || fail "$c was not rotated away"
    s=0
    for f in "$REF/run/$c"/*; do
        f=${f##*/}
        mapfile -t vs < <(ls "$H/versions/run/$c/$f")
        [ "${#vs[@]}" -eq 1 ] || fail "versions/run/$c/$f lists ${#vs[@]}: ${vs[*]}"
        v=${vs[0]}
        cmp -- "$H/versions/run/$c/$f/$v" "$REF/run/$c/$f" || fail "versions/run/$c/$f/$v differs from the native run"
        v=$(vnum "$v")
        [ "$v" -le "$s" ] || s=$v
    done
    CS[$c]=$s
done
verify_run()
{
    local when=$1 c f
    for c in checkpoint-5 checkpoint-10 checkpoint-15; do
        diff -r "$H/seq/${CS[$c]}/run/$c" "$REF/run/$c" ||
            fail "$when: .ckptfs/seq/${CS[$c]}/run/$c differs from the native run's $c"
        ! has_entry "$H/seq/$(last_seq)/run" "$c" || fail "$when: the last seq still lists run/$c"
    done
    for f in "$REF/run/checkpoint-20"/*; do same_file "$MNT/run/checkpoint-20/${f##*/}" "$f"; done
    train "$when: --eval-from of the deleted checkpoint-10 in the view (the logged loss)" \
        --eval-from "$H/seq/${CS[checkpoint-10]}/run/checkpoint-10" --expect-logged
    "$PY" - "$H/seq/${CS[checkpoint-10]}/run/checkpoint-10/optimizer.pt" "$REF/run/checkpoint-10/optimizer.pt" <<'PY' ||
import sys, torch
got, want = torch.load(sys.argv[1]), torch.load(sys.argv[2])
steps = {float(s["step"]) for s in got["state"].values()}
assert steps == {10.0}, f"AdamW step counts {steps}, expected 10"
assert got["param_groups"] == want["param_groups"], "param_groups differ"
for k, s in want["state"].items():
    for n, t in s.items():
        assert torch.equal(got["state"][k][n], t), f"state {k}.{n} differs"
for n, t in want.get("fp32_master_weights", {}).items():
    assert torch.equal(got["fp32_master_weights"][n], t), f"master weight {n} differs"
PY
        fail "$when: torch.load of the deleted checkpoint-10/optimizer.pt from the view failed"
}
verify_run "before remount"
check_seq_listing "after training"
codec=$(xget user.ckptfs.codec "$H/seq/${CS[checkpoint-15]}/run/checkpoint-15/model.safetensors")
[[ $codec == *tensor* ]] || fail "deleted checkpoint-15/model.safetensors has codec '$codec', no tensor coding"

# ---- rapid rewrites: every close is a version ------------------------------
# The kernel sends RELEASE without waiting, so the next OPEN of a tight
# rewrite loop can overtake it; the version the closed handle made must
# still be kept.
log "rapid rewrites"
python3 - "$MNT/rapid" <<'PY'
import os, sys
for i in range(300):
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, b"%d\n" % i)
    os.close(fd)
PY
sleep 0.2 # let the last RELEASE arrive
mapfile -t rv < <(ls "$MNT/.ckptfs/versions/rapid")
[ "${#rv[@]}" -eq 300 ] || fail "300 rewrites left ${#rv[@]} versions of rapid"
[ "$(cat "$MNT/.ckptfs/versions/rapid/${rv[149]}")" = 149 ] ||
    fail "the 150th version of rapid is not the 150th write"
# Loaders mmap checkpoints: a version file maps like any file.
python3 - "$MNT/.ckptfs/versions/rapid/${rv[149]}" <<'PY' ||
import mmap, sys
with open(sys.argv[1], "rb") as f:
    m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    sys.exit(0 if m[:] == b"149\n" else 1)
PY
    fail "mmap of a version file does not read its bytes"

# ---- again from the packs --------------------------------------------------
log "remount, cold caches"
remount_fs
drop_caches
verify_versions "after remount"
verify_deleted "after remount"
verify_recreated "after remount"
verify_run "after remount"
check_seq_listing "after remount"
umount_fs
