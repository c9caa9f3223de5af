#!/bin/bash
# t_lossy.sh: lossy policies through a real mount. The policy xattr: set on
# a directory it is stored in canonical form, inherited by what is created
# under it, shown (the mount's default) where none was set, refused when
# malformed. Then the checkpoints of a tiny training run are copied under an
# excp directory and a lossless one: the newest checkpoint must stay
# byte-exact under excp, older optimizer states must be re-encoded in the
# background (ckptctl log: done, with an error; exp_avg pruned, the first
# version's master weights untouched), store smaller than their
# lossless twins, still load with torch, stay close to the originals, and
# read back the same after a remount; fsck must find nothing wrong. Under
# "excp:newest" a lone checkpoint is re-encoded without waiting for a newer.
set -euo pipefail
# shellcheck source=tests/lib.sh
. "$TESTLIB"

PY=/usr/bin/python3
TRAIN=$(cd "$(dirname "$TESTLIB")/.." && pwd)/scripts/train.py
need_torch
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

log "training a tiny model natively"
"$PY" "$TRAIN" --tiny --out "$REF/run" --steps 40 --save-every 10 --eval-iters 0 \
    >"$T/train.log" 2>&1 || { cat "$T/train.log"; fail "train.py failed"; }

mount_fs "policy=bitsnap"
P=user.ckptfs.policy
get() { getfattr --only-values -n "$P" "$1"; }
mkdir "$MNT/plain" "$MNT/lossy" "$MNT/default" "$MNT/now"
check "set lossless" setfattr -n "$P" -v lossless "$MNT/plain"
check "set excp" setfattr -n "$P" -v "excp:bits=4,beta=2" "$MNT/lossy"
check "set excp:newest" setfattr -n "$P" -v "excp:newest" "$MNT/now"
[ "$(get "$MNT/lossy")" = "excp:alpha=5e-05,beta=2,bits=4" ] || fail "not canonical: $(get "$MNT/lossy")"
[ "$(get "$MNT/default")" = "bitsnap:bits=8" ] || fail "mount default not shown: $(get "$MNT/default")"
getfattr -d "$MNT/default" | grep -q "$P" || fail "the default policy is not listed"
check_fails "a malformed policy" "Invalid argument" setfattr -n "$P" -v "excp:bits=9" "$MNT/lossy"
check_fails "an unknown policy" "Invalid argument" setfattr -n "$P" -v "zip" "$MNT/lossy"
mkdir -p "$MNT/lossy/a/b" && touch "$MNT/lossy/a/b/f"
[ "$(get "$MNT/lossy/a/b/f")" = "$(get "$MNT/lossy")" ] || fail "not inherited: $(get "$MNT/lossy/a/b/f")"

ckpts=$(cd "$REF/run" && ls -d checkpoint-* | sort -t- -k2 -n)
first=$(echo "$ckpts" | head -1) last=$(echo "$ckpts" | tail -1)
for c in $ckpts; do
    cp -r "$REF/run/$c" "$MNT/plain/" && cp -r "$REF/run/$c" "$MNT/lossy/"
done
cp "$REF/run/$last/optimizer.pt" "$MNT/now/"
state() { "$CKPTCTL" log --json "$STORE" "$1" | "$PY" -c \
    'import json,sys; v=json.load(sys.stdin)["versions"][-1]; print(v["lossy"], v["error"], v["stored"])'; }
for _ in $(seq 150); do
    [ "$(state "/lossy/$first/optimizer.pt" | cut -d' ' -f1)" = done ] && break
    sleep 0.2
done
read -r how err lossy_bytes <<<"$(state "/lossy/$first/optimizer.pt")"
read -r _ _ plain_bytes <<<"$(state "/plain/$first/optimizer.pt")"
log "oldest optimizer.pt: $how, error $err, $lossy_bytes bytes (lossless $plain_bytes)"
[ "$how" = done ] || fail "the oldest optimizer.pt was not re-encoded: $how"
[ "$lossy_bytes" -lt $((plain_bytes / 2)) ] || fail "excp saved too little: $lossy_bytes vs $plain_bytes"
[ "$(state "/lossy/$last/optimizer.pt" | cut -d' ' -f1)" = pending ] || fail "the newest was re-encoded"
for _ in $(seq 50); do [ "$(state /now/optimizer.pt | cut -d' ' -f1)" = done ] && break; sleep 0.2; done
[ "$(state /now/optimizer.pt | cut -d' ' -f1)" = done ] || fail "excp:newest left the newest exact"
for f in "$REF/run/$last"/*; do same_file "$MNT/lossy/$last/$(basename "$f")" "$f"; done
for c in $ckpts; do
    for f in "$REF/run/$c"/*; do same_file "$MNT/plain/$c/$(basename "$f")" "$f"; done
done
cmp -s "$MNT/lossy/$first/optimizer.pt" "$REF/run/$first/optimizer.pt" &&
    fail "the re-encoded optimizer.pt still reads exact (stale page cache?)"

compare() { "$PY" - "$MNT/lossy/$first/optimizer.pt" "$REF/run/$first/optimizer.pt" <<'PY'
import sys, torch
a, b = torch.load(sys.argv[1]), torch.load(sys.argv[2])
assert a["param_groups"] == b["param_groups"]
worst = 0.0
for k, s in b["state"].items():
    assert torch.equal(a["state"][k]["step"], s["step"]), "step changed"
    for n in ("exp_avg", "exp_avg_sq"):
        x, y = a["state"][k][n], s[n]
        assert x.shape == y.shape and x.dtype == y.dtype
        worst = max(worst, float((x - y).norm() / y.norm().clamp_min(1e-30)))
assert worst < 1.0, worst
# Roles: the largest parameter's exp_avg was pruned (under half its nonzeros
# left), while the master weights of the first version (no residual base)
# stay exact.
k = max(b["state"], key=lambda k: b["state"][k]["exp_avg"].numel())
zeros = lambda t: float((t == 0).float().mean())
za, zb = zeros(a["state"][k]["exp_avg"]), zeros(b["state"][k]["exp_avg"])
assert 1 - za < 0.5 * (1 - zb), f"exp_avg of {k} not pruned: zeros {za:.2f}, originally {zb:.2f}"
ma, mb = a["fp32_master_weights"], b["fp32_master_weights"]
assert all(torch.equal(ma[n], mb[n]) for n in mb), "master weights of the first version changed"
print(f"worst relative error of a moment: {worst:.3f}")
PY
}
check "lossy optimizer.pt loads and is close" compare

# A re-encoded block replaces an exact one that the next version's deltas
# were taken against; those deltas are rebased, so no block stays alive
# that no version names: the stored bytes of the blocks in use are at most
# the sum over every version's stored bytes (no block is shared here).
for c in $ckpts; do
    [ "$c" = "$last" ] && continue
    for _ in $(seq 150); do
        [ "$(state "/lossy/$c/model.safetensors" | cut -d' ' -f1)" = done ] && break
        sleep 0.2
    done
done
accounted() { (cd "$MNT" && find . -type f -printf '/%P\n') | "$PY" -c '
import json, subprocess, sys
ctl, store = sys.argv[1], sys.argv[2]
def stored(p):  # files never written (no version) make log fail
    r = subprocess.run([ctl, "log", "--json", store, p], capture_output=True)
    return sum(v["stored"] for v in json.loads(r.stdout)["versions"]) if r.returncode == 0 else 0
total = sum(stored(p) for p in sys.stdin.read().split("\n") if p)
used = json.loads(subprocess.check_output([ctl, "stats", "--json", store]))["stored_bytes"]
print(f"blocks in use {used} bytes, versions name {total} bytes")
sys.exit(used > total)' "$CKPTCTL" "$STORE"; }
check "no replaced block is kept alive as a base" accounted
sha1=$(sha256sum <"$MNT/lossy/$first/optimizer.pt")
remount_fs
drop_caches
[ "$(sha256sum <"$MNT/lossy/$first/optimizer.pt")" = "$sha1" ] || fail "lossy bytes changed over a remount"
umount_fs
check "fsck after re-encoding" "$CKPTCTL" fsck "$STORE"
log "ok"
