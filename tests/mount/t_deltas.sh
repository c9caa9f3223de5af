#!/bin/bash
# t_deltas.sh: checkpoint-aware ingest through a real mount. A small model is
# trained natively with scripts/train.py (safetensors bf16 weights, torch.save
# AdamW state); its checkpoints are then written into the mount the three
# ways trainers do: a new checkpoint-N/ directory each time, the same path
# overwritten each time, and out of order (random writes, so the body is
# staged and parsed at close). Every file must read back byte-exact, before
# and after a remount; ckptctl stats must show blocks stored as deltas once
# the mount has made its reverse deltas: each earlier checkpoint's model and
# optimizer (paired through the family of checkpoint-N/ directories) must
# store in fewer bytes than the last's, which stays raw (-o raw_newest); the
# earlier optimizers' fp32 master weights must be coded against the model's
# bf16 weights. A copy of a model in another directory shares its twin's blocks.
set -euo pipefail
# shellcheck source=tests/lib.sh
. "$TESTLIB"

need_torch

log "training a tiny model natively"
train "the native run" --tiny --out "$REF/run" --steps 40 --save-every 10 --eval-iters 0
ckpts=$(cd "$REF/run" && ls -d checkpoint-* | sort -t- -k2 -n)
[ "$(echo "$ckpts" | wc -l)" -ge 4 ] || fail "expected 4 checkpoints, got: $ckpts"

mount_fs
log "new directory per checkpoint, same path overwritten, out-of-order writes"
for c in $ckpts; do
    mkdir "$MNT/$c"
    for f in "$REF/run/$c"/*; do cp "$f" "$MNT/$c/"; done
    mkdir -p "$MNT/latest"
    cp "$REF/run/$c/model.safetensors" "$MNT/latest/model.safetensors"
    cp "$REF/run/$c/optimizer.pt" "$MNT/latest/optimizer.pt"
    # Second half first, then the first half: not a stream, staged instead.
    "$PY" - "$REF/run/$c/optimizer.pt" "$MNT/shuffled-optimizer.pt" <<'PY'
import os, sys
data = open(sys.argv[1], "rb").read()
fd = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
h = len(data) // 2
os.pwrite(fd, data[h:], h)
os.pwrite(fd, data[:h], 0)
os.close(fd)
PY
    same_file "$MNT/shuffled-optimizer.pt" "$REF/run/$c/optimizer.pt"
done
last=$(echo "$ckpts" | tail -1)

verify_all()
{
    for c in $ckpts; do
        for f in "$REF/run/$c"/*; do same_file "$MNT/$c/$(basename "$f")" "$f"; done
    done
    same_file "$MNT/latest/model.safetensors" "$REF/run/$last/model.safetensors"
    same_file "$MNT/latest/optimizer.pt" "$REF/run/$last/optimizer.pt"
    same_file "$MNT/shuffled-optimizer.pt" "$REF/run/$last/optimizer.pt"
}
verify_all
wait_reverse
remount_fs
drop_caches
verify_all

deltas=$(stats_field delta_chunks)
chunks=$(stats_field chunks)
log "blocks: $chunks, stored as deltas: $deltas"
[ "$deltas" -gt 0 ] || fail "no block was stored as a delta"

# Each earlier checkpoint-N/ file is a delta against the next checkpoint's:
# it stores in fewer bytes than the last checkpoint's, a keyframe (the
# newest decodes alone).
first=$(echo "$ckpts" | head -1)
for f in model.safetensors optimizer.pt; do
    keyframe=$(file_stored "/$last/$f")
    for c in $(echo "$ckpts" | head -n -1); do
        s=$(file_stored "/$c/$f")
        log "$c/$f: $s bytes stored, last checkpoint $keyframe"
        [ "$s" -lt "$keyframe" ] || fail "$c/$f is no delta: $s >= $keyframe bytes"
    done
done
# Kept raw, in fact (-o raw_newest, the default): it reads without decoding.
newest=$("$CKPTCTL" log "$STORE" "/$last/model.safetensors" | tail -1)
[[ "$newest" == *" raw 100.0%"* ]] || fail "the newest model file is not kept raw: $newest"

# A copy of a model outside any checkpoint-N/ family (a pretrained model a
# fine-tuning run starts from) finds its twin by its tensors (the latest
# file holding them, latest/model.safetensors) and shares its blocks: the
# blocks in use grow by no more than the header.
mkdir "$MNT/elsewhere"
stored0=$(stats_field stored_bytes)
cp "$REF/run/$last/model.safetensors" "$MNT/elsewhere/"
same_file "$MNT/elsewhere/model.safetensors" "$REF/run/$last/model.safetensors"
grew=$(( $(stats_field stored_bytes) - stored0 ))
keyframe=$(file_stored "/$last/model.safetensors")
log "elsewhere/model.safetensors: blocks in use grew by $grew bytes (the file stores $keyframe)"
[ "$grew" -lt $((keyframe / 4)) ] || fail "a copy of the model shared nothing: $grew >= $keyframe / 4"

# The fp32 master weights in each earlier optimizer.pt are coded against the
# bf16 weights of the model.safetensors beside it (CODEC_WIDE, "wide" in
# log), where a reverse delta does not pay; the newest is kept raw.
for c in $(echo "$ckpts" | head -n -1); do
    mix=$("$CKPTCTL" log "$STORE" "/$c/optimizer.pt" | tail -1)
    log "$c/optimizer.pt: ${mix##*  }"
    [[ "$mix" == *" wide "* ]] || fail "$c/optimizer.pt: no block coded against the model's weights"
done
mix=$("$CKPTCTL" log "$STORE" "/$last/optimizer.pt" | tail -1)
[[ "$mix" == *" raw 9"* && "$mix" != *" wide "* ]] || fail "the newest optimizer.pt is not kept raw: $mix"

# A torch.load of the optimizer and the safetensors header parse through the
# mount (a loader, not just cmp).
"$PY" - "$MNT/$last" <<'PY' || fail "loading the checkpoint from the mount failed"
import json, struct, sys, torch
d = sys.argv[1]
opt = torch.load(d + "/optimizer.pt")
assert opt["state"], "empty optimizer state"
raw = open(d + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n])
assert any(v.get("dtype") == "BF16" for k, v in hdr.items() if k != "__metadata__")
PY

umount_fs

# Write-behind: the model file's commit may still be owed when the optimizer
# file beside it starts streaming (one slow worker makes that likely); its
# master weights must still find the model. On a fresh store, where nothing
# else can be their base, as much of the optimizer as in $first is "wide".
# The newest encoded at once (-o raw_newest=0), as the workers encode it.
wide_of() { "$CKPTCTL" log "$STORE" "$1" | tail -1 | grep -o 'wide [0-9.]*' | cut -d' ' -f2; }
want=$(wide_of "/$first/optimizer.pt")
main_store=$STORE
STORE=$T/store-behind
mount_fs threads=1,worker_nice=19,raw_newest=0
cp "$REF/run/$last/model.safetensors" "$MNT/"
cp "$REF/run/$last/optimizer.pt" "$MNT/"
got=$(wide_of /optimizer.pt)
log "optimizer.pt right after its model: wide ${got:-0}%, $first on the main store ${want:-0}%"
python3 -c "import sys; sys.exit(float('${got:-0}') < 0.8 * float('${want:-0}') or float('${want:-0}') == 0)" ||
    fail "the master weights written right after the model found it for ${got:-0}% of the file, want about ${want:-0}%"
same_file "$MNT/optimizer.pt" "$REF/run/$last/optimizer.pt"
umount_fs
STORE=$main_store

# Plain blocks (the safetensors header, runs of small tensors between two
# big ones) become deltas against the same bytes of the next checkpoint:
# the first model file's header block has a base, or is the next one's
# (the same bytes share one block). The first checkpoint
# still reads back once the later ones are deleted, pruned and collected
# (its blocks re-encoded standalone, as their bases are gone).
log "plain blocks as deltas, read back after their bases' files are gone"
plain=$(python3 - "$STORE/meta.db" "/$first/model.safetensors" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
ino = 1
for name in sys.argv[2].strip("/").split("/"):
    ino = db.execute("SELECT ino FROM dentry WHERE parent=? AND name=?",
                     (ino, name.encode())).fetchone()[0]
ver = db.execute("SELECT ver FROM inode WHERE ino=?", (ino,)).fetchone()[0]
tens = db.execute("SELECT off, len FROM tensor WHERE ver=?", (ver,)).fetchall()
rows = db.execute("SELECT e.off, c.base FROM extent e JOIN chunk c ON c.id=e.chunk "
                  "WHERE e.ver=?", (ver,)).fetchall()
plain = [(o, b) for o, b in rows if not any(t <= o < t + n for t, n in tens)]
head = db.execute("SELECT chunk FROM extent WHERE ver=? AND off=0", (ver,)).fetchone()[0]
shared = db.execute("SELECT count(*) FROM extent WHERE chunk=?", (head,)).fetchone()[0] > 1
print(len(plain), sum(1 for o, b in plain if b), dict(plain)[0] != 0 or shared)
PY
)
log "plain blocks of $first/model.safetensors: $plain (count, deltas, header a delta or shared)"
[ "${plain##* }" = True ] || fail "the header block of $first/model.safetensors is no delta and shared with no later version"
mount_fs gc_interval=0
for c in $(echo "$ckpts" | tail -n +2); do rm -r "${MNT:?}/$c"; done
rm -r "$MNT/latest" "$MNT/elsewhere" "$MNT/shuffled-optimizer.pt"
umount_fs
sleep 1.1
"$CKPTCTL" prune --keep-within 1s "$STORE" >/dev/null || fail "prune failed"
out=$("$CKPTCTL" gc --json --grace 0s "$STORE") || fail "gc failed: $out"
log "gc: $out"
[ "$(json_field "$out" rebased)" -gt 0 ] || fail "gc re-encoded none of $first's deltas: $out"
store_clean "after deleting, pruning and collecting the later checkpoints"
mount_fs
drop_caches
for f in "$REF/run/$first"/*; do same_file "$MNT/$first/$(basename "$f")" "$f"; done
umount_fs

