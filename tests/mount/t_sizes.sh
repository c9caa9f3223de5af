#!/bin/bash
# t_sizes.sh: files of sizes around page and block (1 MiB) boundaries, up to
# 100 MiB, written with dd and cp, read back byte-exact through the mount,
# again after unmount+remount; ckptctl stats counts them and shows that a
# compressible file is stored in fewer bytes than its size.
set -euo pipefail
# shellcheck source=tests/lib.sh
. "$TESTLIB"

MIB=$((1 << 20))
SIZES=(0 1 4095 4096 4097 $((MIB - 1)) "$MIB" $((MIB + 1)) $((100 * MIB)))

for s in "${SIZES[@]}"; do
    rand_file "$REF/r$s" "$s"
done
# Compressible: 24 MiB of text lines (many blocks, none all-zero).
python3 - "$REF/text" <<'EOF'
import sys
with open(sys.argv[1], "w") as f:
    for i in range(24 * 1024 * 1024 // 64):
        f.write("checkpoint step %012d loss %.6f lr 0.001 -- pad pad\n" % (i, 1.0 / (i + 1)))
EOF
TEXT_SIZE=$(stat -c %s "$REF/text")
NFILES=$((${#SIZES[@]} + 1))

mount_fs

# Alternate between dd (with a block size unaligned to anything) and cp.
n=0
for s in "${SIZES[@]}"; do
    if [ $((n % 2)) -eq 0 ]; then
        check "dd write of $s bytes" dd if="$REF/r$s" of="$MNT/r$s" bs=65537 status=none
    else
        check "cp of $s bytes" cp "$REF/r$s" "$MNT/r$s"
    fi
    n=$((n + 1))
done
check "dd write of the text file" dd if="$REF/text" of="$MNT/text" bs=1M status=none

verify_all()
{
    local when=$1 s
    for s in "${SIZES[@]}"; do
        [ "$(stat -c %s "$MNT/r$s")" -eq "$s" ] ||
            fail "$when: size of r$s is $(stat -c %s "$MNT/r$s"), want $s"
        cmp "$REF/r$s" "$MNT/r$s" || fail "$when: r$s ($s bytes) differs"
    done
    cmp "$REF/text" "$MNT/text" || fail "$when: text file differs"
    # Read once more with small unaligned reads (dd bs=4093) and compare hashes.
    for s in 4097 $((MIB + 1)); do
        local a b
        a=$(dd if="$MNT/r$s" bs=4093 status=none | sha256sum)
        b=$(sha256sum <"$REF/r$s")
        [ "$a" = "$b" ] || fail "$when: r$s read with bs=4093 differs"
    done
}

verify_all "same mount"
# Drop the kernel page cache so reads go to the daemon.
drop_caches
verify_all "after drop_caches"

[ "$(ls "$MNT" | wc -l)" -eq "$NFILES" ] || fail "ls shows $(ls "$MNT" | wc -l) entries, want $NFILES"

# Stats beside the live mount.
live_files=$(stats_field files)
[ "$live_files" -eq "$NFILES" ] || fail "ckptctl stats (live) reports $live_files files, want $NFILES"
out=$("$CKPTCTL" stats "$STORE") || fail "ckptctl stats failed beside the live mount"
grep -q "^files: *$NFILES " <<<"$out" ||
    fail "ckptctl stats text output does not show 'files: $NFILES': $out"

remount_fs
verify_all "after remount"

umount_fs
# Offline stats.
files=$(stats_field files)
[ "$files" -eq "$NFILES" ] || fail "ckptctl stats reports $files files, want $NFILES"
total=0
for s in "${SIZES[@]}"; do total=$((total + s)); done
total=$((total + TEXT_SIZE))
logical=$(stats_field logical_bytes)
[ "$logical" -eq "$total" ] || fail "ckptctl stats: bytes written $logical, want $total"

# Per-file numbers: the text file is compressible, random data is not.
"$CKPTCTL" stats --json --files "$STORE" >"$T/stats.json"
python3 - "$T/stats.json" "$TEXT_SIZE" "$((100 * MIB))" <<'EOF' || fail "per-file stats wrong: $(cat "$T/stats.json")"
import json, sys
st = json.load(open(sys.argv[1]))
text_size, big = int(sys.argv[2]), int(sys.argv[3])
files = {f["path"]: f for f in st["per_file"]}
t = files["/text"]
assert t["bytes"] == text_size, ("text bytes", t)
assert 0 < t["stored"] < text_size // 2, ("text not compressed", t)
r = files["/r%d" % big]
assert r["bytes"] == big, ("big bytes", r)
assert r["stored"] >= big * 0.99, ("random data stored smaller than it is?", r)
assert files["/r0"]["bytes"] == 0 and files["/r0"]["stored"] == 0, files["/r0"]
assert st["stored_bytes"] < st["logical_bytes"], st
EOF

# Another block size for new content; old content keeps its blocks.
mount_fs block_kib=4
verify_all "after remount with block_kib=4"
chunks0=$(stats_field chunks)
for s in 4097 $((MIB + 1)); do
    check "rewrite r$s with 4 KiB blocks" cp "$REF/r$s" "$MNT/r$s.b4"
    same_file "$REF/r$s" "$MNT/r$s.b4"
done
# 4097 bytes make 2 blocks of at most 4 KiB, 1 MiB + 1 makes 257; a block
# of zero bytes is a hole, not a block (the 1-byte tail of random data is
# zero one time in 256).
want=$(python3 - "$REF/r4097" "$REF/r$((MIB + 1))" <<'EOF'
import sys
print(sum(any(d[i:i + 4096]) for f in sys.argv[1:] for d in [open(f, "rb").read()]
          for i in range(0, len(d), 4096)))
EOF
)
chunks1=$(stats_field chunks)
[ "$want" -ge 257 ] || fail "the reference files are mostly zeros? $want non-zero 4 KiB blocks"
# Each commit also keeps its manifest (src/manifest.h): one per copy.
[ $((chunks1 - chunks0)) -eq $((want + 2)) ] ||
    fail "block_kib=4 made $((chunks1 - chunks0)) records for the two copies, want $want blocks and 2 manifests"
umount_fs
mount_fs
verify_all "after second remount"
for s in 4097 $((MIB + 1)); do same_file "$REF/r$s" "$MNT/r$s.b4"; done
umount_fs
