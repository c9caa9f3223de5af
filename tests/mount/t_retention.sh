#!/bin/bash
# t_retention.sh: retention and store maintenance with ckptctl.
#
#  1. prune beside a live mount: a file written 6 times and a rotated
#     checkpoint-N/ tree keep exactly their last 2 versions under
#     --keep-last 2 (checkpoint-1/ and checkpoint-2/ are one group with the
#     live checkpoint-3/), byte-exact through `ckptctl cat` and through the
#     mount's .ckptfs/versions/ view; --dry-run changes nothing.
#  2. gc beside the mount (background reclaim off) has the daemon reclaim:
#     the packs shrink, what is kept still reads byte-exact through the mount
#     and through ckptctl, verify and fsck find no problem; fsck --repair
#     refuses the mounted store (exit 4). Unmounted, gc finds nothing left.
#  3. gc killed with SIGKILL at random points (every pack rewritten, so there
#     is work to interrupt) leaves a store that fsck and verify pass and whose
#     versions all read byte-exact; a last gc leaves no garbage at all.
#  4. fsck finds a broken reference count (exit 3), --repair fixes it; it
#     finds a block whose pack record is not where meta.db says.
#  5. verify finds a flipped bit in a pack record (exit 3, the block named);
#     reading the file through the mount fails with EIO, never wrong bytes.
set -euo pipefail
# shellcheck source=tests/lib.sh
. "$TESTLIB"

MiB=$((1024 * 1024))

# mkdata FILE SEED BYTES: deterministic, half random and half text (zstd
# stores it in about half its size).
mkdata()
{
    python3 - "$1" "$2" "$3" <<'PY'
import random, sys
path, seed, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
r = random.Random(seed)
text = b"".join(b"seed %d line %d: loss %.6f\n" % (seed, i, r.random()) for i in range(4096))
body = bytearray()
while len(body) < n:  # alternate 64 KiB random and 64 KiB text
    body += r.randbytes(65536)
    body += (text * 3)[:65536]
open(path, "wb").write(bytes(body[:n]))
PY
}

# mkmodel FILE STEP: a safetensors file of one F32 tensor (512 KiB), the
# weights after STEP small training steps: checkpoint-N/model.safetensors of
# later steps store as deltas against the previous checkpoint's.
mkmodel()
{
    python3 - "$1" "$2" <<'PY'
import array, json, random, struct, sys
path, step, n = sys.argv[1], int(sys.argv[2]), 131072
r, r2 = random.Random(7), random.Random(1000 + step)
w = array.array("f", (r.gauss(0, 0.05) - 1e-4 * step * (1 + r2.random()) for _ in range(n)))
if sys.byteorder == "big":
    w.byteswap()
data = w.tobytes()
hdr = json.dumps({"__metadata__": {"step": str(step)},
                  "w": {"dtype": "F32", "shape": [n], "data_offsets": [0, len(data)]}}).encode()
hdr += b" " * (-len(hdr) % 8)
open(path, "wb").write(struct.pack("<Q", len(hdr)) + hdr + data)
PY
}

# seqs_of PATH: the seq of every version `ckptctl log` lists for PATH, one a
# line; nothing when it has none left ("no such path in the store's history").
seqs_of()
{
    local out rc=0
    out=$("$CKPTCTL" log --json "$STORE" "$1" 2>"$T/log.err") || rc=$?
    if [ "$rc" -ne 0 ]; then
        grep -q "no such path" "$T/log.err" ||
            fail "ckptctl log $1 failed with status $rc: $(cat "$T/log.err")"
        return 0
    fi
    case $out in
        *'"versions": ['*) ;;
        *) fail "ckptctl log --json $1: no versions array: $out" ;;
    esac
    grep -o '"seq": [0-9]*' <<<"$out" | cut -d' ' -f2 || true
}

# REFOF[PATH@SEQ]: the reference copy of the version committed by change SEQ.
declare -A REFOF

# write_version REFFILE PATH: copy REFFILE to PATH in the mount; the new
# version (the latest `ckptctl log` lists) is remembered in REFOF.
write_version()
{
    cp "$1" "$MNT$2"
    local last
    last=$(seqs_of "$2" | tail -n 1)
    [ -n "$last" ] || fail "no version of $2 listed after writing it"
    [ -z "${REFOF[$2@$last]:-}" ] || fail "writing $2 made no new version (latest is still $last)"
    REFOF[$2@$last]=$1
}

# cat_exact PATH SEQ: ckptctl cat PATH@SEQ gives the reference bytes.
cat_exact()
{
    local ref=${REFOF[$1@$2]:-}
    [ -n "$ref" ] || fail "$1@$2 is listed but no such version was written"
    local rc=0
    "$CKPTCTL" cat "$STORE" "$1@$2" >"$T/cat.out" || rc=$?
    [ "$rc" -eq 0 ] || fail "ckptctl cat $1@$2 failed with status $rc"
    cmp -s "$T/cat.out" "$ref" || fail "ckptctl cat $1@$2 is not the version written ($ref)"
}

# expect_versions PATH SEQ...: ckptctl log lists exactly these versions of
# PATH, and each reads back byte-exact.
expect_versions()
{
    local path=$1 got want
    shift
    got=$(seqs_of "$path" | tr '\n' ' ')
    want="$*"
    [ "${got% }" = "$want" ] || fail "ckptctl log $path lists versions [${got% }], want [$want]"
    local s
    for s in "$@"; do cat_exact "$path" "$s"; done
}

# view_exact PATH SEQ...: the mount's .ckptfs/versions/PATH lists exactly
# these versions (vNNNNNNNN-TIME), each byte-exact.
view_exact()
{
    local path=$1 d=$MNT/.ckptfs/versions$1 got want="" s
    shift
    for s in "$@"; do want+="$(printf 'v%08d' "$s") "; done
    got=$(find "$d" -mindepth 1 -maxdepth 1 -printf '%f\n' 2>/dev/null | sort | sed 's/-.*//' | tr '\n' ' ') || true
    [ "$got" = "$want" ] || fail "$d lists [$got], want [$want]"
    for s in "$@"; do
        cmp -s "$d"/"$(printf 'v%08d' "$s")"-* "${REFOF[$path@$s]}" ||
            fail "$d/$(printf 'v%08d' "$s")-* is not the version written (${REFOF[$path@$s]})"
    done
}

# sql STATEMENT...: run SQL on meta.db (store unmounted); prints rows.
sql()
{
    python3 - "$STORE/meta.db" "$@" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
for q in sys.argv[2:]:
    for row in db.execute(q):
        print(*row)
db.commit()
db.close()
PY
}

#### 1. prune beside the mount

mount_fs gc_interval=0
log "a file written 6 times, checkpoint-1..3/ with checkpoint-1, -2 removed"
for i in 1 2 3 4 5 6; do
    mkdata "$REF/f.$i" "$i" $((3 * MiB + i * 131072 + i))
    write_version "$REF/f.$i" /f
done
mapfile -t FSEQ < <(seqs_of /f)
[ "${#FSEQ[@]}" -eq 6 ] || fail "ckptctl log /f lists ${#FSEQ[@]} versions after 6 writes, want 6"
for i in 1 2 3; do
    mkdir "$MNT/checkpoint-$i"
    mkmodel "$REF/ckpt.$i" "$i"
    write_version "$REF/ckpt.$i" "/checkpoint-$i/model.safetensors"
done
CSEQ=()
for i in 1 2 3; do CSEQ+=("$(seqs_of "/checkpoint-$i/model.safetensors")"); done
rm -rf "$MNT/checkpoint-1" "$MNT/checkpoint-2"
for i in 1 2 3; do expect_versions "/checkpoint-$i/model.safetensors" "${CSEQ[$((i - 1))]}"; done
expect_versions /f "${FSEQ[@]}"
same_file "$MNT/f" "$REF/f.6"
# checkpoint-1 becomes a delta against checkpoint-2, -2 against -3 (reverse
# deltas, made in the background even with gc off): pruning must keep the
# blocks the kept ones build on.
wait_reverse
[ "$(stats_field delta_chunks)" -gt 0 ] || fail "no block of checkpoint-N/model.safetensors was stored as a delta"
versions0=$(stats_field versions)
[ "$versions0" -eq 9 ] || fail "ckptctl stats reports $versions0 versions, want 9"

log "prune --dry-run changes nothing"
logs_now()
{
    local p
    for p in /f /checkpoint-1/model.safetensors /checkpoint-2/model.safetensors /checkpoint-3/model.safetensors; do
        "$CKPTCTL" log --json "$STORE" "$p"
    done
}
before=$(logs_now)
out=$("$CKPTCTL" prune --json --dry-run --keep-last 2 "$STORE") || fail "prune --dry-run failed: $out"
[ "$(json_field "$out" pruned)" -eq 5 ] ||
    fail "prune --dry-run --keep-last 2 would prune $(json_field "$out" pruned) versions, want 5 (4 of /f, checkpoint-1's): $out"
[ "$(logs_now)" = "$before" ] || fail "prune --dry-run changed the versions ckptctl log lists"
[ "$(stats_field versions)" -eq "$versions0" ] || fail "prune --dry-run changed the version count"

log "prune --keep-last 2 beside the mount"
stored0=$(stats_field stored_bytes)
out=$("$CKPTCTL" prune --json --keep-last 2 "$STORE") || fail "prune --keep-last 2 failed: $out"
[ "$(json_field "$out" pruned)" -eq 5 ] || fail "prune --keep-last 2 pruned $(json_field "$out" pruned) versions, want 5: $out"
expect_versions /f "${FSEQ[4]}" "${FSEQ[5]}"
expect_versions /checkpoint-1/model.safetensors
expect_versions /checkpoint-2/model.safetensors "${CSEQ[1]}"
expect_versions /checkpoint-3/model.safetensors "${CSEQ[2]}"
[ "$(stats_field versions)" -eq 4 ] || fail "ckptctl stats reports $(stats_field versions) versions after prune, want 4"
[ "$(stats_field stored_bytes)" -lt "$stored0" ] || fail "stored_bytes did not fall after prune ($stored0)"
for s in "${FSEQ[@]:0:4}"; do
    rc=0
    "$CKPTCTL" cat "$STORE" "/f@$s" >/dev/null 2>&1 || rc=$?
    [ "$rc" -ne 0 ] || fail "ckptctl cat /f@$s still reads a pruned version"
done
log "the history view shows what is kept"
view_exact /f "${FSEQ[4]}" "${FSEQ[5]}"
view_exact /checkpoint-1/model.safetensors
view_exact /checkpoint-2/model.safetensors "${CSEQ[1]}"
view_exact /checkpoint-3/model.safetensors "${CSEQ[2]}"
same_file "$MNT/f" "$REF/f.6"
same_file "$MNT/checkpoint-3/model.safetensors" "$REF/ckpt.3"
# The mount goes on committing, and ckptctl sees what it commits.
mkdata "$REF/after-prune" 77 65536
cp "$REF/after-prune" "$MNT/after-prune"
APSEQ=$(seqs_of /after-prune)
[ -n "$APSEQ" ] ||
    fail "a file written through the mount after prune is not in ckptctl log (do the daemon's commits still reach meta.db?)"
REFOF[/after-prune@$APSEQ]=$REF/after-prune
expect_versions /after-prune "$APSEQ"
same_file "$MNT/after-prune" "$REF/after-prune"

#### 2. gc

log "fsck --repair refuses a mounted store"
packs0=$(stats_field pack_bytes)
expect_status 4 "fsck --repair of a mounted store" "$CKPTCTL" fsck --repair "$STORE"

check_part1()
{
    expect_versions /f "${FSEQ[4]}" "${FSEQ[5]}"
    expect_versions /checkpoint-1/model.safetensors
    expect_versions /checkpoint-2/model.safetensors "${CSEQ[1]}"
    expect_versions /checkpoint-3/model.safetensors "${CSEQ[2]}"
    expect_versions /after-prune "$APSEQ"
}
log "gc --grace 0 beside the mount"
out=$("$CKPTCTL" gc --json --grace 0 "$STORE") || fail "gc failed: $out"
log "gc: $out"
grep -q "\"online\": true" <<<"$out" || fail "gc beside the mount did not go through the daemon: $out"
[ "$(json_field "$out" chunks_deleted)" -gt 0 ] || fail "gc deleted no unreferenced block: $out"
[ "$(json_field "$out" bytes_after)" -lt "$(json_field "$out" bytes_before)" ] || fail "gc reclaimed nothing: $out"
packs1=$(stats_field pack_bytes)
stored1=$(stats_field stored_bytes)
log "pack bytes: $packs0 -> $packs1 (blocks in use: $stored1 bytes)"
[ "$packs1" -lt "$packs0" ] || fail "pack_bytes did not shrink after gc: $packs0 -> $packs1"
# Well under half of the pack was live (the default threshold is 75%): it
# is sealed and rewritten, the garbage all gone.
[ "$packs1" -lt $((stored1 + stored1 / 10 + 65536)) ] ||
    fail "pack_bytes $packs1 after gc, far above the $stored1 bytes still used"
check_part1
same_file "$MNT/f" "$REF/f.6"
same_file "$MNT/after-prune" "$REF/after-prune"
store_clean "after gc beside the mount"
umount_fs
check_part1 # as the daemon left meta.db
out=$("$CKPTCTL" gc --json --grace 0 "$STORE") || fail "offline gc failed: $out"
grep -q "\"online\": false" <<<"$out" || fail "gc of an unmounted store went elsewhere: $out"
[ "$(json_field "$out" chunks_deleted)" -eq 0 ] || fail "offline gc found garbage the online one left: $out"
check_part1
store_clean "after gc"

#### 3. gc killed at random points

# Four mount sessions, four packs; 4 KiB blocks, so gc has thousands of
# records to move. File k gets its last version in session k: after prune
# --keep-last 1 every pack holds some live records among garbage.
log "garbage: 4 sessions writing big/a..d, then prune --keep-last 1"
BIG=(a b c d)
for s in 1 2 3 4; do
    mount_fs block_kib=4
    mkdir -p "$MNT/big"
    for k in 1 2 3 4; do
        [ "$k" -ge "$s" ] || continue
        n=${BIG[$((k - 1))]}
        mkdata "$REF/big-$n.$s" $((1000 + 10 * s + k)) $((4 * MiB - s))
        write_version "$REF/big-$n.$s" "/big/$n.bin"
    done
    umount_fs
done
out=$("$CKPTCTL" prune --json --keep-last 1 "$STORE") || fail "prune --keep-last 1 failed: $out"
[ "$(json_field "$out" pruned)" -eq 8 ] ||
    fail "prune --keep-last 1 pruned $(json_field "$out" pruned) versions, want 8 (/f, checkpoint-2, 0+1+2+3 of big/a..d): $out"

check_part3()
{
    local n
    expect_versions /f "${FSEQ[5]}"
    expect_versions /checkpoint-2/model.safetensors
    expect_versions /checkpoint-3/model.safetensors "${CSEQ[2]}"
    for n in "${!BIGSEQ[@]}"; do expect_versions "/big/$n.bin" "${BIGSEQ[$n]}"; done
}
declare -A BIGSEQ
for n in "${BIG[@]}"; do
    BIGSEQ[$n]=$(seqs_of "/big/$n.bin")
    case ${BIGSEQ[$n]} in
        "" | *[!0-9]*) fail "/big/$n.bin: want 1 version after prune --keep-last 1, got [${BIGSEQ[$n]}]" ;;
    esac
done
check_part3
[ "$(find "$STORE/packs" -name '*.pack' | wc -l)" -ge 5 ] || fail "expected at least 5 packs before gc"

# How long a whole gc run takes here (on a copy of the store): the kills
# land uniformly within it, wherever the time goes (reads, appends, fsync,
# the metadata transactions, pack removal).
cp -a "$STORE" "$T/copy"
t0=$(date +%s%N)
"$CKPTCTL" gc --grace 0 --threshold 100 "$T/copy" >/dev/null || fail "gc of a copy of the store failed"
t1=$(date +%s%N)
rm -rf "$T/copy"
gc_secs=$(python3 -c "print(max(($t1 - $t0) / 1e9, 0.005))")
NKILL=12
log "a whole gc run takes ${gc_secs}s; killing $NKILL runs at random points within it"

# gc_killed SECS: start gc --threshold 100 (every pack rewritten), SIGKILL it
# after a random time in [0, 0.8 SECS); prints "killed" or "done STATUS".
gc_killed()
{
    python3 - "$1" "$CKPTCTL" "$STORE" <<'PY'
import random, signal, subprocess, sys, time
p = subprocess.Popen([sys.argv[2], "gc", "--grace", "0", "--threshold", "100", sys.argv[3]],
                     stdout=subprocess.DEVNULL)
time.sleep(random.uniform(0, 0.8 * float(sys.argv[1])))
if p.poll() is None:
    p.send_signal(signal.SIGKILL)
rc = p.wait()
print("killed" if rc == -signal.SIGKILL else "done %d" % rc)
PY
}
killed=0
for i in $(seq 1 $NKILL); do
    res=$(gc_killed "$gc_secs")
    case $res in
        killed) killed=$((killed + 1)) ;;
        "done 0") ;;
        *) fail "gc run $i: $res" ;;
    esac
    store_clean "after gc run $i ($res)"
    check_part3
done
log "$killed of $NKILL gc runs killed mid-way"
[ "$killed" -ge $((NKILL / 3)) ] || fail "only $killed of $NKILL gc runs were still running when killed: nothing was interrupted"
out=$("$CKPTCTL" gc --json --grace 0 --threshold 100 "$STORE") || fail "the last gc failed: $out"
log "last gc: $out"
store_clean "after the last gc"
check_part3
# Every byte in the packs is a live record: nothing the killed runs wrote
# (torn appends, packs not removed) is left behind.
live=$(sql "SELECT coalesce(sum(32 + stored_len), 0) FROM chunk")
npacks=$(find "$STORE/packs" -name '*.pack' | wc -l)
disk=$(find "$STORE/packs" -name '*.pack' -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')
[ "$disk" -eq $((live + 16 * npacks)) ] ||
    fail "after a complete gc the $npacks packs hold $disk bytes, but the live records are $live (+16 per pack)"
[ "$(sql "SELECT count(*) FROM chunk WHERE refs = 0")" -eq 0 ] || fail "unreferenced blocks left after gc --grace 0"

#### 4. fsck finds broken metadata

log "fsck: a wrong reference count"
victim=$(sql "SELECT min(id) FROM chunk WHERE refs > 0")
sql "UPDATE chunk SET refs = refs + 1 WHERE id = $victim"
expect_status 3 "fsck of a store with a wrong refcount" "$CKPTCTL" fsck --json "$STORE"
out=$OUT
case $out in
    *"chunk $victim: refs"*) ;;
    *) fail "fsck does not report chunk $victim's refcount: $out" ;;
esac
expect_status 0 "fsck --repair" "$CKPTCTL" fsck --json --repair "$STORE"
out=$OUT
[ "$(json_field "$out" found)" -ge 1 ] || fail "fsck --repair found nothing to repair: $out"
[ "$(json_field "$out" remaining)" -eq 0 ] || fail "fsck --repair did not fix the refcount: $out"
want=$(sql "SELECT (SELECT count(*) FROM extent WHERE chunk = $victim) + (SELECT count(*) FROM chunk WHERE base = $victim AND refs > 0) + (SELECT count(*) FROM version WHERE manifest = $victim)")
[ "$(sql "SELECT refs FROM chunk WHERE id = $victim")" -eq "$want" ] ||
    fail "chunk $victim's refs are not $want (extents, deltas and versions naming it) after repair"
store_clean "after fsck --repair"

log "fsck: a block whose pack record is not where meta.db says"
victim=$(sql "SELECT e.chunk FROM inode i JOIN extent e ON e.ver = i.ver WHERE i.ino = (SELECT ino FROM dentry WHERE parent = 1 AND name = CAST('f' AS BLOB)) ORDER BY e.off LIMIT 1")
[ -n "$victim" ] || fail "no block of /f found in meta.db"
sql "UPDATE chunk SET off = off + 8 WHERE id = $victim"
expect_status 3 "fsck with a block's record moved away" "$CKPTCTL" fsck --json "$STORE"
out=$OUT
case $out in
    *"no valid pack record"*) ;;
    *) fail "fsck does not report the missing pack record: $out" ;;
esac
[ "$(json_field "$out" remaining)" -ge 1 ] || fail "fsck reports the missing record as not remaining: $out"
sql "UPDATE chunk SET off = off - 8 WHERE id = $victim"
store_clean "with the record's offset restored"

#### 5. verify finds a flipped bit; the mount answers EIO

log "verify: a flipped bit in a block of /f"
read -r pack byte < <(sql "SELECT pack, off + 32 + stored_len / 2 FROM chunk WHERE id = $victim") ||
    fail "chunk $victim is not in meta.db"
packfile=$(printf '%s/packs/%08d.pack' "$STORE" "$pack")
[ -f "$packfile" ] || fail "pack $packfile of chunk $victim is missing"
flip()
{
    python3 - "$packfile" "$byte" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(int(sys.argv[2]))
    b = f.read(1)[0]
    f.seek(int(sys.argv[2]))
    f.write(bytes([b ^ 0x10]))
PY
}
flip
expect_status 3 "verify of a store with a flipped bit" "$CKPTCTL" verify "$STORE"
out="$OUT $ERR"
case $out in
    *"bad block $victim:"*) ;;
    *) fail "verify does not name the damaged block $victim: $out" ;;
esac
rc=0
"$CKPTCTL" cat "$STORE" /f >"$T/cat.out" 2>/dev/null || rc=$?
[ "$rc" -ne 0 ] || fail "ckptctl cat /f succeeded over a damaged block"
mount_fs
rc=0
err=$(cat "$MNT/f" 2>&1 >"$T/read.out") || rc=$?
[ "$rc" -ne 0 ] || fail "reading /f through the mount succeeded over a damaged block"
case $err in
    *"Input/output error"*) ;;
    *) fail "reading /f through the mount failed, but not with EIO: $err" ;;
esac
got=$(stat -c %s "$T/read.out")
cmp -s -n "$got" "$T/read.out" "$REF/f.6" || fail "the $got bytes read before the error are not /f's"
# Other files are unaffected.
same_file "$MNT/checkpoint-3/model.safetensors" "$REF/ckpt.3"
umount_fs
flip # back
store_clean "with the bit flipped back"
mount_fs
same_file "$MNT/f" "$REF/f.6"
umount_fs

# ---- import: an existing tree, offline ------------------------------------
log "import a directory tree into the unmounted store"
src=$T/import-src
mkdir -p "$src/run/checkpoint-7/sub"
cp "$REF/ckpt.3" "$src/run/checkpoint-7/model.safetensors"
rand_file "$src/run/checkpoint-7/sub/blob" 300000
ln -s model.safetensors "$src/run/checkpoint-7/link"
touch -d '2020-01-02 03:04:05' "$src/run/checkpoint-7/sub/blob" "$src/run/checkpoint-7"
out=$("$CKPTCTL" import --json "$STORE" "$src" /imported) || fail "ckptctl import failed: $out"
[ "$(echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["files"], d["symlinks"])')" = "2 1" ] ||
    fail "import reports $out, want 2 files and 1 symlink"
"$CKPTCTL" cat "$STORE" /imported/run/checkpoint-7/model.safetensors | cmp - "$REF/ckpt.3" ||
    fail "an imported file does not cat back byte-exact"
expect_status 1 "importing over existing names (never overwrite)" \
    "$CKPTCTL" import "$STORE" "$src" /imported
store_clean "after import"
mount_fs
diff -r --no-dereference "$src" "$MNT/imported" || fail "the imported tree differs from its source"
[ "$(stat -c %Y "$MNT/imported/run/checkpoint-7/sub/blob")" = "$(stat -c %Y "$src/run/checkpoint-7/sub/blob")" ] ||
    fail "import did not keep a file's mtime"
[ "$(stat -c %Y "$MNT/imported/run/checkpoint-7")" = "$(stat -c %Y "$src/run/checkpoint-7")" ] ||
    fail "import did not keep a directory's mtime"
expect_status 4 "import into a mounted store" "$CKPTCTL" import "$STORE" "$src" /again
umount_fs

log "import goes in version order: checkpoint-9, -10, -100, each a delta against the next"
src=$T/import-run
step=0
for s in 9 10 100; do
    mkdir -p "$src/checkpoint-$s"
    mkmodel "$src/checkpoint-$s/model.safetensors" $((step += 1))
    touch -d "2020-01-02 03:04:0$step" "$src/checkpoint-$s/model.safetensors"
done
"$CKPTCTL" import "$STORE" "$src" /run2 >/dev/null || fail "ckptctl import of a run failed"
bases=$(for s in 9 10; do
    "$CKPTCTL" log --json "$STORE" "/run2/checkpoint-$s/model.safetensors" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["versions"][0]["base_seq"])'
done | tr '\n' ' ')
seqs=$(for s in 10 100; do seqs_of "/run2/checkpoint-$s/model.safetensors"; done | tr '\n' ' ')
set -- $seqs
[ "$bases" = "$1 $2 " ] || fail "checkpoint-9's and -10's bases are '$bases', want '$1 $2 '"
