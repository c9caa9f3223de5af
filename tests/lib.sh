# shellcheck shell=bash
# tests/lib.sh: common helpers of the ckptfs mount tests (tests/mount/t_*.sh).
#
# Sourced by each test after `set -euo pipefail`:
#
#   . "$TESTLIB"
#   mount_fs                 # mount $STORE on $MNT (extra -o options allowed)
#   ... exercise $MNT, keep reference copies under $REF ...
#   umount_fs                # unmount and wait for the daemon to exit
#
# Environment (set by the automake harness, see Makefile.am):
#   CKPTFS, CKPTCTL   absolute paths of the binaries under test
#   TESTLIB           absolute path of this file
#   CKPTFS_TEST_KEEP  if set to 1, keep the temporary directory on failure
#
# Variables provided:
#   T      a fresh temporary directory (mktemp -d under /tmp), removed on exit
#   STORE  $T/store, the ckptfs store directory (created by ckptfs)
#   MNT    $T/mnt, the mount point
#   REF    $T/ref, a native directory for reference copies
#   TNAME  the test's name, for messages
#
# Helpers: fail MSG, check DESC CMD..., check_fails DESC ERRTEXT CMD...,
# expect_status WANT DESC CMD..., same_file A B, same_mapping A B,
# mount_fs [OPTS], umount_fs, remount_fs [OPTS], crash, is_mounted DIR,
# daemon_pid, wait_daemon_gone, on_exit CMD, stats_field NAME, file_stored PATH,
# drop_caches, hold_page_cache, need_torch, train WHAT ARGS..., rand_file F BYTES.
#
# Exit status convention: 0 pass, 1 fail, 77 skip (only when /dev/fuse is absent).

TNAME=$(basename "${0%.sh}")

: "${CKPTFS:?CKPTFS must be the absolute path of the ckptfs binary}"
: "${CKPTCTL:?CKPTCTL must be the absolute path of the ckptctl binary}"

if [ ! -c /dev/fuse ]; then
    echo "$TNAME: SKIP: /dev/fuse is absent"
    exit 77
fi

for _b in "$CKPTFS" "$CKPTCTL"; do
    if [ ! -x "$_b" ]; then
        echo "$TNAME: FAIL: $_b is not an executable" >&2
        exit 1
    fi
done
for _b in fusermount3 python3 sha256sum cmp; do
    if ! command -v "$_b" >/dev/null 2>&1; then
        echo "$TNAME: FAIL: required tool $_b not found" >&2
        exit 1
    fi
done
unset _b

T=$(mktemp -d /tmp/ckptfs-"$TNAME".XXXXXX)
STORE=$T/store
MNT=$T/mnt
REF=$T/ref
mkdir -p "$MNT" "$REF"

_DAEMON_PID=
_EXIT_HOOKS=()

log() { echo "$TNAME: $*"; }

# fail MSG: report and exit 1 (the EXIT trap cleans up).
fail()
{
    echo "$TNAME: FAIL: $*" >&2
    exit 1
}

# check DESC CMD...: run CMD; on failure report DESC, the command and its status.
check()
{
    local desc=$1
    shift
    local rc=0
    "$@" || rc=$?
    [ "$rc" -eq 0 ] || fail "$desc (command: $*; exit status $rc)"
}

# check_fails DESC ERRTEXT CMD...: CMD must fail and print ERRTEXT on stderr
# (e.g. "Permission denied", "No space left on device").
check_fails()
{
    local desc=$1 want=$2
    shift 2
    local rc=0 err
    err=$("$@" 2>&1 >/dev/null) || rc=$?
    [ "$rc" -ne 0 ] || fail "$desc: expected failure ($want) but it succeeded (command: $*)"
    case $err in
        *"$want"*) ;;
        *) fail "$desc: expected error '$want', got status $rc: $err (command: $*)" ;;
    esac
}

# expect_status WANT DESC CMD...: run CMD; fail unless it exits WANT. Its
# standard output is left in OUT, its standard error in ERR.
expect_status()
{
    local want=$1 desc=$2 rc=0
    shift 2
    OUT=$("$@" 2>"$T/expect_status.err") || rc=$?
    ERR=$(cat "$T/expect_status.err")
    [ "$rc" -eq "$want" ] || fail "$desc exited $rc, want $want: $OUT $ERR (command: $*)"
}

# same_file A B: byte-exact comparison.
same_file()
{
    cmp -- "$1" "$2" || fail "content differs: $1 vs $2"
}

# same_mapping MNTFILE REFFILE: a read-only MAP_SHARED mapping of MNTFILE
# holds exactly the bytes of REFFILE.
same_mapping()
{
    python3 - "$1" "$2" <<'PY' || fail "a MAP_SHARED mapping of $1 differs from $2"
import mmap, sys
with open(sys.argv[1], "rb") as f:
    m = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    if m[:] != open(sys.argv[2], "rb").read():
        sys.exit("differs")
PY
}

# on_exit CMD: run CMD (a string, eval'd) at exit before the temp dir is removed.
on_exit() { _EXIT_HOOKS+=("$1"); }

is_mounted()
{
    # /proc/mounts escapes spaces etc. as \040; our paths have none.
    awk -v m="$1" '$2 == m { found = 1 } END { exit !found }' /proc/mounts
}

# The pid of the ckptfs daemon serving $STORE (empty if none). The store path
# is unique to this test, so it identifies the daemon.
daemon_pid()
{
    local pid cmd
    # pgrep -f takes a regex: the store path matches itself (and maybe more),
    # so keep only processes of $CKPTFS that have $STORE as an argument.
    for pid in $(pgrep -f -- "$STORE" 2>/dev/null || true); do
        cmd=$(tr '\0' '\n' </proc/"$pid"/cmdline 2>/dev/null) || continue
        [ "$(head -n 1 <<<"$cmd")" = "$CKPTFS" ] || continue
        if grep -qxF -- "$STORE" <<<"$cmd"; then
            echo "$pid"
            return 0
        fi
    done
    return 0
}

# wait_daemon_gone [SECONDS]: wait for the daemon of $STORE to exit.
wait_daemon_gone()
{
    local limit=${1:-60} i=0 pid
    while pid=$(daemon_pid) && [ -n "$pid" ]; do
        i=$((i + 1))
        [ "$i" -le $((limit * 20)) ] || fail "ckptfs daemon (pid $pid) still running ${limit}s after unmount"
        sleep 0.05
    done
}

# mount_fs [OPTS]: mount $STORE on $MNT, OPTS a comma-separated -o list.
mount_fs()
{
    is_mounted "$MNT" && fail "mount_fs: $MNT is already mounted"
    wait_daemon_gone 30
    local args=("$STORE" "$MNT")
    [ -z "${1:-}" ] || args+=(-o "$1")
    local rc=0
    "$CKPTFS" "${args[@]}" || rc=$?
    [ "$rc" -eq 0 ] || fail "ckptfs ${args[*]} exited with status $rc"
    local i=0
    until is_mounted "$MNT"; do
        i=$((i + 1))
        [ "$i" -le 400 ] || fail "ckptfs did not mount $MNT within 20 s"
        sleep 0.05
    done
    _DAEMON_PID=$(daemon_pid)
    [ -n "$_DAEMON_PID" ] || fail "ckptfs mounted $MNT but its daemon is gone (did recovery fail?)"
    # Requests are served once recovery is over: wait for the first answer,
    # then make sure the daemon did not give up and unmount meanwhile.
    local st=0
    timeout 60 stat "$MNT" >/dev/null 2>&1 || st=$?
    if ! is_mounted "$MNT" || ! kill -0 "$_DAEMON_PID" 2>/dev/null; then
        fail "ckptfs exited right after mounting $MNT without serving (startup or recovery failed; its exit status was 0)"
    fi
    [ "$st" -eq 0 ] || fail "mount point $MNT does not answer stat (status $st)"
    [ "$(stat -f -c %T "$MNT")" = fuseblk ] || [ "$(stat -f -c %T "$MNT")" = fuse ] ||
        fail "$MNT is not a FUSE mount after mounting (type $(stat -f -c %T "$MNT"))"
}

# umount_fs: unmount $MNT and wait until it is gone and the daemon has exited
# (the daemon commits open files and releases the store lock on the way out).
umount_fs()
{
    local i=0
    until fusermount3 -u "$MNT" 2>/dev/null; do
        is_mounted "$MNT" || break
        i=$((i + 1))
        # EBUSY while a process still holds a file: give it a moment.
        [ "$i" -le 100 ] || { fusermount3 -u "$MNT" || true; fail "cannot unmount $MNT"; }
        sleep 0.1
    done
    i=0
    while is_mounted "$MNT"; do
        i=$((i + 1))
        [ "$i" -le 400 ] || fail "$MNT still mounted 20 s after fusermount3 -u"
        sleep 0.05
    done
    wait_daemon_gone 60
    _DAEMON_PID=
}

remount_fs()
{
    umount_fs
    mount_fs "$@"
}

# crash: kill -9 the daemon, wait for it to die, lazily unmount the dead mount.
crash()
{
    local pid i=0
    pid=$(daemon_pid)
    [ -n "$pid" ] || fail "no ckptfs daemon to kill"
    kill -9 "$pid"
    while kill -0 "$pid" 2>/dev/null; do
        i=$((i + 1))
        [ "$i" -le 200 ] || fail "daemon $pid survived kill -9 for 10 s"
        sleep 0.05
    done
    fusermount3 -u -z "$MNT" 2>/dev/null || umount -l "$MNT" || fail "cannot detach the dead mount"
    i=0
    while is_mounted "$MNT"; do
        i=$((i + 1))
        [ "$i" -le 200 ] || fail "dead mount still listed in /proc/mounts"
        sleep 0.05
    done
}

# stats_field NAME: one field of `ckptctl stats --json $STORE`.
stats_field()
{
    "$CKPTCTL" stats --json "$STORE" |
        python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"
}

# wait_zero FIELD WHAT [SECONDS]: wait until the ckptctl stats FIELD is 0.
wait_zero()
{
    local limit=${3:-120} i=0
    while [ "$(stats_field "$1")" != 0 ]; do
        i=$((i + 1))
        [ "$i" -le $((limit * 4)) ] || fail "$2 still waiting after ${limit}s"
        sleep 0.25
    done
}

# wait_compressed [SECONDS]: wait until the mount has compressed every block
# a writer stored raw (ckptctl stats: raw_waiting 0).
wait_compressed() { wait_zero raw_waiting "raw blocks" "${1:-120}"; }

# wait_reverse [SECONDS]: wait until the mount has compressed what was
# stored raw and made every block that waits for it a reverse delta
# (ckptctl stats: raw_waiting and reverse_waiting 0).
wait_reverse()
{
    wait_compressed "${1:-120}"
    wait_zero reverse_waiting "reverse deltas" "${1:-120}"
}

# file_stored PATH: stored bytes of the file at PATH (as in the mount) from
# `ckptctl stats --json --files $STORE`; fails if the file is not listed.
file_stored()
{
    "$CKPTCTL" stats --json --files "$STORE" | python3 -c '
import json, sys
for f in json.load(sys.stdin)["per_file"]:
    if f["path"] == sys.argv[1]:
        print(f["stored"]); sys.exit(0)
sys.exit("no such file in the stats: " + sys.argv[1])' "$1"
}

# json_field JSON NAME: a numeric field of ckptctl's JSON output.
json_field()
{
    local v
    v=$(grep -o "\"$2\": [0-9-]*" <<<"$1" | head -n 1 | cut -d' ' -f2) || true
    [ -n "$v" ] || fail "no field $2 in: $1"
    echo "$v"
}

# store_clean WHEN: ckptctl fsck and verify (store unmounted) exit 0 and
# report no problem.
store_clean()
{
    expect_status 0 "$1: ckptctl fsck" "$CKPTCTL" fsck --json "$STORE"
    [ "$(json_field "$OUT" found)" -eq 0 ] || fail "$1: ckptctl fsck found problems: $OUT"
    expect_status 0 "$1: ckptctl verify" "$CKPTCTL" verify --json "$STORE"
    [ "$(json_field "$OUT" bad)" -eq 0 ] || fail "$1: ckptctl verify found bad blocks: $OUT"
    [ "$(json_field "$OUT" blocks)" -gt 0 ] || fail "$1: ckptctl verify checked no block: $OUT"
}

# The page cache is the machine's: a test that counts cached pages holds
# this lock shared (hold_page_cache) for its whole run, and drop_caches
# takes it exclusive, so tests run in parallel (make -j) never drop the
# pages another is counting.
PAGE_CACHE_LOCK=/tmp/ckptfs-tests-page-cache.lock

# drop_caches: write back, then drop the kernel page cache (cold reads).
drop_caches()
{
    sync
    flock -x "$PAGE_CACHE_LOCK" sh -c 'echo 3 >/proc/sys/vm/drop_caches'
}

# hold_page_cache: no drop_caches of any test until this test exits.
hold_page_cache()
{
    exec {_PAGE_CACHE_FD}>>"$PAGE_CACHE_LOCK"
    flock -s "$_PAGE_CACHE_FD"
}

# need_torch: fail unless Debian's python3 with torch is there; sets PY and
# TRAIN (scripts/train.py) and one thread for torch and BLAS.
need_torch()
{
    /usr/bin/python3 -c 'import torch' 2>/dev/null || fail "needs Debian's python3-torch"
    PY=/usr/bin/python3
    TRAIN=$(cd "$(dirname "$TESTLIB")/.." && pwd)/scripts/train.py
    export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
}

# train WHAT ARGS...: run scripts/train.py ARGS (after need_torch); on
# failure show its output and fail with WHAT.
train()
{
    local what=$1 out=$T/train-$RANDOM.log
    shift
    "$PY" "$TRAIN" "$@" >"$out" 2>&1 || { cat "$out"; fail "$what: train.py failed"; }
}

# weights_pair V1 V2 FLOATS SEED: two versions of a safetensors file of
# FLOATS float32 weights (one tensor "w"), the second a small step from the
# first in a tenth of its elements, as training moves them.
weights_pair()
{
    /usr/bin/python3 - "$@" <<'PY'
import json, struct, sys
import numpy as np
v1, v2, n, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(seed)
w = rng.standard_normal(n, dtype=np.float32) * 0.02
step = np.zeros_like(w)
idx = rng.choice(w.size, w.size // 10, replace=False)
step[idx] = rng.standard_normal(idx.size, dtype=np.float32) * 1e-4
hdr = json.dumps({"w": {"dtype": "F32", "shape": [w.size], "data_offsets": [0, 4 * w.size]}})
hdr = hdr.encode() + b" " * (-len(hdr) % 8)
for path, t in ((v1, w), (v2, (w + step).astype(np.float32))):
    open(path, "wb").write(struct.pack("<Q", len(hdr)) + hdr + t.astype("<f4").tobytes())
PY
}

# rand_file FILE BYTES: BYTES of random data from /dev/urandom.
rand_file()
{
    head -c "$2" /dev/urandom >"$1"
}

_cleanup()
{
    local rc=$?
    set +e
    trap - EXIT INT TERM HUP
    # Background jobs the test left running (writers, file holders) first.
    local j
    for j in $(jobs -p); do kill "$j" 2>/dev/null; done
    if is_mounted "$MNT"; then
        fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -u -z "$MNT" 2>/dev/null ||
            umount -l "$MNT" 2>/dev/null
    fi
    local pid i=0
    while pid=$(daemon_pid) && [ -n "$pid" ] && [ "$i" -lt 200 ]; do
        sleep 0.05
        i=$((i + 1))
    done
    pid=$(daemon_pid)
    [ -z "$pid" ] || kill -9 "$pid" 2>/dev/null
    # Hooks run last-registered first (e.g. unmount a tmpfs under the store).
    for ((i = ${#_EXIT_HOOKS[@]} - 1; i >= 0; i--)); do
        eval "${_EXIT_HOOKS[$i]}"
    done
    if is_mounted "$MNT"; then
        echo "$TNAME: warning: $MNT still mounted, leaving $T" >&2
    elif [ "$rc" -ne 0 ] && [ "${CKPTFS_TEST_KEEP:-0}" = 1 ]; then
        echo "$TNAME: kept $T" >&2
    else
        rm -rf --one-file-system "$T"
    fi
    [ "$rc" -ne 0 ] || echo "$TNAME: PASS"
    exit "$rc"
}
trap _cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
