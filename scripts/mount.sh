# shellcheck shell=bash
# mount.sh: mounting a store from the scripts (bench, lossy-eval,
# lossy-resume, demo). Sourced, not run; needs a built tree.
#
#   ck_mount STORE MNT [-o OPTS]   mount STORE at MNT and wait for it; sets
#                                  CK_PID to the daemon's pid
#   ck_unmount MNT                 unmount and wait for that daemon to exit
#   ck_load_series STORE MNT POLICY SERIES
#                                  a fresh store under POLICY holding
#                                  SERIES's checkpoint-N/ trees (copied in
#                                  step order, as a trainer writes them) at
#                                  /run, unmounted, with what is due
#                                  re-encoded (ckptctl recode)
#   ck_settle STORE [SECONDS (600)] wait until the mount of STORE has done
#                                  its background work: blocks stored raw
#                                  compressed, older ones made reverse
#                                  deltas (ckptctl stats)
#
# Each exits the script with a message on failure.

ck_top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

ck_die() { echo "${0##*/}: $*" >&2; exit 1; }

ck_mount() {
    local store=$1 mnt=$2 p
    shift 2
    "$ck_top/ckptfs" "$@" "$store" "$mnt" || ck_die "ckptfs $store $mnt failed"
    for _ in $(seq 200); do grep -q " $mnt fuse" /proc/mounts && break; sleep 0.05; done
    grep -q " $mnt fuse" /proc/mounts || ck_die "the mount at $mnt did not appear"
    CK_PID=
    for p in $(pgrep -x ckptfs); do
        tr '\0' '\n' <"/proc/$p/cmdline" 2>/dev/null | grep -qxF "$mnt" && CK_PID=$p
    done
    [ -n "$CK_PID" ] || ck_die "no ckptfs daemon found for $mnt"
}

ck_unmount() {
    fusermount3 -u "$1" || ck_die "fusermount3 -u $1 failed"
    for _ in $(seq 200); do kill -0 "$CK_PID" 2>/dev/null || return 0; sleep 0.05; done
    ck_die "the ckptfs daemon $CK_PID did not exit after unmount"
}

ck_load_series() {
    local store=$1 mnt=$2 pol=$3 series=$4 c
    ck_mount "$store" "$mnt" -o "policy=$pol"
    mkdir "$mnt/run"
    for c in $(cd "$series" && ls -d checkpoint-* | sort -t- -k2 -n); do
        cp -r "$series/$c" "$mnt/run/" || ck_die "copying $c into $mnt failed"
    done
    ck_unmount "$mnt"
    "$ck_top/ckptctl" recode "$store" >/dev/null || ck_die "ckptctl recode $store failed"
}

ck_settle() {
    local store=$1 limit=${2:-600} t0=$SECONDS left
    while :; do
        left=$("$ck_top/ckptctl" stats --json "$store" | /usr/bin/python3 -c \
            'import json, sys; j = json.load(sys.stdin); print(j["raw_waiting"] + j["reverse_waiting"])') ||
            ck_die "ckptctl stats $store failed"
        [ "$left" = 0 ] && return 0
        [ $((SECONDS - t0)) -lt "$limit" ] || ck_die "$store: the background did not settle in $limit s"
        sleep 0.2
    done
}
