#!/bin/bash
# t_options.sh: every numeric -o option is range-checked: a value below its
# range, above it, or not an integer makes ckptfs exit 2 with a message
# naming the option and its range, mounting nothing and creating no store;
# the bounds themselves are accepted.
set -euo pipefail
# shellcheck source=tests/lib.sh
. "$TESTLIB"

# name min max
while read -r name min max; do
    for bad in $((min - 1)) $((max + 1)) 1x "" -; do
        expect_status 2 "-o $name=$bad" "$CKPTFS" "$STORE" "$MNT" -o "$name=$bad"
        grep -q "$name: .* from $min to $max" <<<"$ERR" ||
            fail "-o $name=$bad: the message does not give the range: $ERR"
        is_mounted "$MNT" && fail "-o $name=$bad mounted"
        [ ! -e "$STORE" ] || fail "-o $name=$bad created the store"
    done
done <<'LIST'
threads 1 256
cache_mib 1 1048576
write_buffer_mib 1 1048576
worker_nice -20 19
reserve_mib 0 1073741824
block_kib 4 65536
writebehind_mib 0 1048576
delta_groups 0 1
readahead_kib 0 1048576
direct_writes 0 1
keep_last 1 1000000000
keep_every 1 1000000000
prune_interval 1 31536000
gc_interval 0 31536000
backup_interval 0 31536000
spill 0 1
raw_newest 0 1
upload_interval 1 86400
LIST
expect_status 2 "-o attr_timeout=-1" "$CKPTFS" "$STORE" "$MNT" -o attr_timeout=-1
grep -q "attr_timeout: .* from 0 to 86400" <<<"$ERR" || fail "attr_timeout: $ERR"
log "the bounds are accepted"
mount_fs "threads=1,cache_mib=1,worker_nice=19,block_kib=4,delta_groups=0,direct_writes=1,keep_last=1000000000,gc_interval=0,backup_interval=0,attr_timeout=0"
echo hi >"$MNT/f"
[ "$(cat "$MNT/f")" = hi ] || fail "the mount with bound values does not work"
umount_fs
