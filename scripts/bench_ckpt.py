#!/usr/bin/python3
"""bench_ckpt.py: the python half of scripts/bench (see there). Subcommands:

  save SERIES MNT NATIVE FSYNC OUT RUN
                                   load every checkpoint-N of SERIES into memory,
                                   then save each one again the way train.py
                                   does into MNT/checkpoint-N,
                                   NATIVE/checkpoint-N and FSYNC/checkpoint-N
                                   (the same, each file fsync'd after its
                                   writer closed it), rotating which side goes
                                   first; OUT (json): per-checkpoint seconds
  load MNT_CKPT NATIVE_CKPT OUT RUN [WARM]
                                   a full resume read of one checkpoint from
                                   each side: cold (page cache dropped) then
                                   WARM (3) times warm; OUT (json): seconds
  sizes DIR OUT                    bytes written, zstd -3 per file, byte-grouped
                                   zstd -1, by class (model, optimizer, other)
  report RESULTS [--markdown]      the table, from the files the others wrote
                                   (--markdown: then again in markdown)

Byte-grouped zstd (the ZipNN idea with a stock compressor): each tensor's bytes
are split into planes by byte position within an element and each plane is
compressed with zstd -1 on its own; a file's other bytes (headers, pickles, zip
records) are compressed together with zstd -1. Tensors are found in
safetensors files from the header (dtype -> element width) and in torch.save
zip files as the stored entries */data/N, split into 4-byte planes when their
length is a multiple of 4 (the optimizer state is fp32; a few small non-fp32
storages, such as the RNG state's bytes, are split the same way: an
approximation that moves a few kB). Other files: zstd -1 whole.
"""

import os
import sys

sys.dont_write_bytecode = True  # importing train.py must leave no __pycache__
for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import ctypes
import ctypes.util
import io
import json
import re
import statistics
import struct
import subprocess
import textwrap
import time
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# train.py's write order, so that each file reaches ckptfs as the trainer sends it.
ORDER = ["config.json", "model.safetensors", "training_args.bin", "optimizer.pt",
         "scheduler.pt", "trainer_state.json", "rng_state.pth"]
TORCH_FILES = {"training_args.bin", "optimizer.pt", "scheduler.pt", "rng_state.pth"}


def die(msg):
    print(f"bench_ckpt.py: {msg}", file=sys.stderr)
    sys.exit(1)


def checkpoints(root):
    found = []
    for n in os.listdir(root):
        m = re.match(r"checkpoint-(\d+)$", n)
        if m and os.path.isdir(os.path.join(root, n)):
            found.append((int(m.group(1)), n))
    if not found:
        die(f"no checkpoint-N directories in {root}")
    return [n for _, n in sorted(found)]


def file_order(names):
    return [n for n in ORDER if n in names] + sorted(n for n in names if n not in ORDER)


def klass(name):
    if name.endswith(".safetensors"):
        return "model"
    if name.startswith("optimizer"):
        return "optimizer"
    return "other"


# ----------------------------------------------------------------------------- save

def cmd_save(series, mnt, native, fsync, out, run):
    import torch
    import train
    mem = []  # [(name, [(file, kind, obj)])]
    for c in checkpoints(series):
        d = os.path.join(series, c)
        files = []
        for f in file_order(os.listdir(d)):
            p = os.path.join(d, f)
            if f.endswith(".safetensors"):
                files.append((f, "st", train.load_safetensors(p)))
            elif f in TORCH_FILES:
                files.append((f, "torch", torch.load(p)))
            else:  # json and anything else: the bytes, written with one plain write
                with open(p, "rb") as fh:
                    files.append((f, "raw", fh.read()))
        mem.append((c, files))

    def save(root, c, files, sync, settle=False):
        """Seconds until every file is closed; with settle, also until the
        mount has committed them all (fsync of its root: write-behind paid)."""
        path = os.path.join(root, c)
        t0 = time.perf_counter()
        os.makedirs(path, exist_ok=True)
        for f, kind, obj in files:
            p = os.path.join(path, f)
            if kind == "st":
                train.save_safetensors(obj[0], p, obj[1])
            elif kind == "torch":
                torch.save(obj, p)
            else:
                with open(p, "wb") as fh:
                    fh.write(obj)
            if sync:  # the writer has closed it; fsync flushes the file's dirty pages
                fd = os.open(p, os.O_RDONLY)
                os.fsync(fd)
                os.close(fd)
        t1 = time.perf_counter() - t0
        if not settle:
            return t1
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        os.fsync(fd)
        os.close(fd)
        return t1, time.perf_counter() - t0

    res = []
    for i, (c, files) in enumerate(mem):
        sides = [("native", native, False), ("mount", mnt, False), ("fsync", fsync, True)]
        k = (i + run) % len(sides)
        r = {"checkpoint": c}
        for side, root, sync in sides[k:] + sides[:k]:
            if side == "mount":  # settled before the next side runs: no overlap
                r["mount"], r["mount_committed"] = save(root, c, files, sync, True)
            else:
                r[side] = save(root, c, files, sync)
        r["bytes"] = sum(os.path.getsize(os.path.join(native, c, f)) for f, _, _ in files)
        res.append(r)
    with open(out, "w") as fh:
        json.dump({"checkpoints": res}, fh, indent=1)


# ----------------------------------------------------------------------------- load

def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as fh:
        fh.write("3\n")


def cmd_load(mnt_ckpt, native_ckpt, out, run, warm):
    import torch
    import train

    def full_load(d):
        t0 = time.perf_counter()
        train.load_safetensors(os.path.join(d, "model.safetensors"))
        for f in ("optimizer.pt", "scheduler.pt", "rng_state.pth"):
            torch.load(os.path.join(d, f))
        for f in ("config.json", "trainer_state.json"):
            with open(os.path.join(d, f), encoding="utf-8") as fh:
                json.load(fh)
        return time.perf_counter() - t0

    # Warm up torch.load's lazy imports in memory, touching neither side.
    buf = io.BytesIO()
    torch.save({"x": torch.zeros(4)}, buf)
    buf.seek(0)
    torch.load(buf)
    sides = [("mount", mnt_ckpt), ("native", native_ckpt)]
    if run % 2 == 0:
        sides.reverse()
    res = {}
    for side, d in sides:
        drop_caches()
        res[f"{side}_cold"] = full_load(d)
        res[f"{side}_warm"] = statistics.median(full_load(d) for _ in range(warm))
    with open(out, "w") as fh:
        json.dump(res, fh, indent=1)


# ----------------------------------------------------------------------------- sizes

_zstd = None


def zstd1(b):
    global _zstd
    if _zstd is None:
        name = ctypes.util.find_library("zstd") or "libzstd.so.1"
        _zstd = ctypes.CDLL(name)
        _zstd.ZSTD_compressBound.restype = ctypes.c_size_t
        _zstd.ZSTD_compressBound.argtypes = [ctypes.c_size_t]
        _zstd.ZSTD_compress.restype = ctypes.c_size_t
        _zstd.ZSTD_compress.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p,
                                        ctypes.c_size_t, ctypes.c_int]
        _zstd.ZSTD_isError.restype = ctypes.c_uint
        _zstd.ZSTD_isError.argtypes = [ctypes.c_size_t]
    b = bytes(b)
    cap = _zstd.ZSTD_compressBound(len(b))
    dst = ctypes.create_string_buffer(cap)
    n = _zstd.ZSTD_compress(dst, cap, b, len(b), 1)
    if _zstd.ZSTD_isError(n):
        die("ZSTD_compress failed")
    return n


def planes(buf, width):
    import numpy as np
    if width <= 1 or len(buf) % width:
        return zstd1(buf)
    a = np.frombuffer(buf, dtype=np.uint8).reshape(-1, width)
    return sum(zstd1(a[:, k].tobytes()) for k in range(width))


ST_WIDTH = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2,
            "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8,
            "F64": 8, "C64": 8}


def tensor_ranges(raw):
    """[(offset, length, width)] of the tensors of a safetensors or torch.save
    zip file, in file order; [] for anything else."""
    if raw[:4] == b"PK\x03\x04":
        out = []
        with zipfile.ZipFile(io.BytesIO(raw)) as z:
            for zi in z.infolist():
                if zi.compress_type != zipfile.ZIP_STORED or not re.search(r"/data/\d+$", zi.filename):
                    continue
                h = zi.header_offset  # the local header's extra field pads the data
                nlen, xlen = struct.unpack("<HH", raw[h + 26:h + 30])
                out.append((h + 30 + nlen + xlen, zi.file_size, 4))
        return sorted(out)
    if len(raw) >= 8:
        (n,) = struct.unpack("<Q", raw[:8])
        if 8 + n <= len(raw):
            try:
                header = json.loads(raw[8:8 + n].decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                return []
            if isinstance(header, dict):
                header.pop("__metadata__", None)
                return sorted((8 + n + v["data_offsets"][0],
                               v["data_offsets"][1] - v["data_offsets"][0],
                               ST_WIDTH.get(v["dtype"], 1)) for v in header.values())
    return []


def grouped(raw):
    rest, at, tot = [], 0, 0
    for off, n, w in tensor_ranges(raw):
        rest.append(raw[at:off])
        tot += planes(memoryview(raw)[off:off + n], w)
        at = off + n
    rest.append(raw[at:])
    return tot + zstd1(b"".join(rest))


def cmd_sizes(root, out):
    res = {k: {"written": 0, "zstd3": 0, "grouped": 0} for k in ("model", "optimizer", "other")}
    for c in checkpoints(root):
        for f in sorted(os.listdir(os.path.join(root, c))):
            p = os.path.join(root, c, f)
            with open(p, "rb") as fh:
                raw = fh.read()
            z = subprocess.run(["zstd", "-3", "-q", "-c", p], stdout=subprocess.PIPE, check=True)
            r = res[klass(f)]
            r["written"] += len(raw)
            r["zstd3"] += len(z.stdout)
            r["grouped"] += grouped(raw)
    with open(out, "w") as fh:
        json.dump(res, fh, indent=1)


# ----------------------------------------------------------------------------- report

def med(xs):
    return statistics.median(xs)


def cmd_report(results, markdown):
    meta = json.load(open(os.path.join(results, "meta.json")))
    cpu, hwm = [], []
    rows = []  # (regime, measure, native, ckptfs, ratio, zstd3, grouped, target, ok)

    def verdict(value, op, bound):
        return "yes" if (value >= bound if op == ">=" else value <= bound) else "NO"

    for regime in meta["regimes"]:
        rd = os.path.join(results, regime)
        runs = sorted(d for d in os.listdir(rd) if d.startswith("run-"))
        sizes = json.load(open(os.path.join(rd, "sizes.json")))
        save = [json.load(open(os.path.join(rd, r, "save.json")))["checkpoints"] for r in runs]
        load = [json.load(open(os.path.join(rd, r, "load.json"))) for r in runs]
        stats = [json.load(open(os.path.join(rd, r, "stats.json"))) for r in runs]
        daemon = [json.load(open(os.path.join(rd, r, "daemon.json"))) for r in runs]
        settle = [json.load(open(os.path.join(rd, r, "settle.json"))) for r in runs]

        # Bytes: ckptfs split by class from the per-file stored bytes; totals
        # from the bytes of the pack files on disk.
        stored = {k: [] for k in ("model", "optimizer", "total")}
        for st in stats:
            per = {"model": 0, "optimizer": 0}
            base = 0  # the pretrained model a fine-tuning store starts with
            for f in st["per_file"]:
                if f["path"].startswith("/base/"):
                    base += f["stored"]
                    continue
                k = klass(os.path.basename(f["path"]))
                if k in per:
                    per[k] += f["stored"]
            stored["model"].append(per["model"])
            stored["optimizer"].append(per["optimizer"])
            stored["total"].append(st["pack_disk_bytes"] - base)
        tot = {key: sum(sizes[k][key] for k in sizes) for key in ("written", "zstd3", "grouped")}
        for k in ("model", "optimizer", "total"):
            s = sizes[k] if k != "total" else tot
            ck = med(stored[k])
            target = ok = ""
            if regime == "pretrain" and k == "total":
                target, ok = ">= 1.4x", verdict(s["written"] / ck, ">=", 1.4)
            if regime == "finetune" and k == "model":
                target, ok = ">= 5x", verdict(s["written"] / ck, ">=", 5)
            rows.append((regime, f"{k} bytes, MB", f"{s['written'] / 1e6:.1f}",
                         f"{ck / 1e6:.1f}", f"{s['written'] / ck:.2f}x",
                         f"{s['written'] / s['zstd3']:.2f}x",
                         f"{s['written'] / s['grouped']:.2f}x", target, ok))

        # Save: per run the median per-checkpoint time of each side; then the
        # median over runs. Ratio: native time / mount time (speed, higher is better).
        sn = med([med(c["native"] for c in r) for r in save])
        sm = med([med(c["mount"] for c in r) for r in save])
        sr = med([med(c["native"] for c in r) / med(c["mount"] for c in r) for r in save])
        rows.append((regime, "save per checkpoint, s", f"{sn:.3f}", f"{sm:.3f}", f"{sr:.2f}x",
                     "", "", ">= 0.8x (time <= 1.25x)", verdict(sr, ">=", 0.8)))
        fn = med([med(c["fsync"] for c in r) for r in save])
        fm = med([med(c["mount_committed"] for c in r) for r in save])
        fr = med([med(c["fsync"] for c in r) / med(c["mount_committed"] for c in r)
                  for r in save])
        rows.append((regime, "save until stored (see below), s", f"{fn:.3f}", f"{fm:.3f}",
                     f"{fr:.2f}x", "", "", "(reference)", ""))
        for kind, bound in (("cold", 0.7), ("warm", 0.95)):
            ln = med([x[f"native_{kind}"] for x in load])
            lm = med([x[f"mount_{kind}"] for x in load])
            lr = med([x[f"native_{kind}"] / x[f"mount_{kind}"] for x in load])
            rows.append((regime, f"load, {kind} cache, s", f"{ln:.3f}", f"{lm:.3f}", f"{lr:.2f}x",
                         "", "", f">= {bound}x", verdict(lr, ">=", bound)))
        gbps = med([sum(c["bytes"] for c in sv) / d["cpu_s"] / 1e9
                    for sv, d in zip(save, daemon)])
        rows.append((regime, "ingest, GB/s per daemon core", "", f"{gbps:.2f}", "", "", "",
                     ">= 1.5 (codec encode)", verdict(gbps, ">=", 1.5)))
        st_s = med([x["settle_s"] for x in settle])
        rows.append((regime, "settle after the last save, s", "", f"{st_s:.1f}", "", "", "",
                     "<= 60", verdict(st_s, "<=", 60)))
        rows.append((regime, "background CPU to settle, s", "",
                     f"{med([x['cpu_s'] for x in settle]):.2f}", "", "", "", "(reference)", ""))
        hwm.append(f"{regime} {max(d['hwm_kib'][0] for d in daemon) / 1024:.0f} / "
                   f"{max(d['hwm_kib'][1] for d in daemon) / 1024:.0f} MiB")
        cpu.append(f"{regime} {med([d['user_s'] for d in daemon]):.2f} s user + "
                   f"{med([d['sys_s'] for d in daemon]):.2f} s system")
        rss = max(max(d["hwm_kib"]) for d in daemon) / 1024
        rows.append((regime, "daemon peak RSS, MiB", "", f"{rss:.0f}", "", "", "",
                     "<= 256", verdict(rss, "<=", 256)))

    head = ("regime", "measure", "native", "ckptfs", "ratio", "zstd-3", "grouped",
            "target", "met")
    print(meta["data"])
    print()
    w = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    for r in [head] + rows:
        cells = [r[0].ljust(w[0]), r[1].ljust(w[1])] + \
                [r[i].rjust(w[i]) for i in range(2, 7)] + [r[7].ljust(w[7]), r[8]]
        print("  ".join(cells).rstrip())
    print()
    notes = NOTES + [
        "daemon CPU while saving (medians): " + "; ".join(cpu) + ".",
        "peak RSS (VmHWM) of the daemon that saved and read every file back for cmp / "
        "of the one that loaded: " + "; ".join(hwm) + "."]
    for line in notes:
        print(textwrap.fill(line, width=100, subsequent_indent="    "))
    if markdown:
        print()
        print("| " + " | ".join(head) + " |")
        print("|" + "|".join(["---", "---"] + ["---:"] * 5 + ["---", "---"]) + "|")
        for r in rows:
            print("| " + " | ".join(x or "-" for x in r) + " |")


NOTES = [
    "native: bytes written (byte rows) or time on the backing filesystem; ratio: "
    "native / ckptfs (compression, or speed: higher is better).",
    "ckptfs bytes: totals are what the store's pack files take on disk (ckptctl stats pack_disk_bytes); "
    "model and optimizer are the per-file stored bytes (ckptctl stats --files).",
    "zstd-3: zstd -3 of each file; grouped: byte-grouped zstd -1 per tensor (ZipNN idea), "
    "torch.save storages as 4-byte planes.",
    "save: wall time per checkpoint until every file is closed, no fsync on either side "
    "(as HF Trainer): native leaves dirty pages in the page cache, ckptfs returns from "
    "close once the bytes are queued for compression (write-behind, -o write_buffer_mib) "
    "and commits in the background. 'until stored': native with each file fsync'd after "
    "it is closed, against the mount until every commit is paid (fsync of its root, "
    "waited for before the next side saves), ratio = native time / the mount's.",
    "load: model.safetensors, optimizer.pt, scheduler.pt, rng_state.pth and the json files "
    "of the last checkpoint; cold: page cache dropped and a freshly mounted daemon; warm: "
    "read again right after (median of 3).",
    "ingest: bytes written / daemon CPU seconds (utime+stime) while saving; all of the "
    "daemon's work (FUSE, codec, packs, SQLite), the target is the codec's encode speed.",
    "Each regime starts from a fresh store; the fine-tuning one holds the pretrained model "
    "the run started from (base/model.safetensors, not counted): the first fine-tuning "
    "checkpoint deltas against it. From an empty store see scripts/bench-codec.",
    "Every saved file was checked byte-identical between the mount and native (cmp).",
]


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) >= 2 else 2
    cmd, a = argv[1], argv[2:]
    if cmd == "save" and len(a) == 6:
        cmd_save(a[0], a[1], a[2], a[3], a[4], int(a[5]))
    elif cmd == "load" and len(a) in (4, 5):
        cmd_load(a[0], a[1], a[2], int(a[3]), int(a[4]) if len(a) == 5 else 3)
    elif cmd == "sizes" and len(a) == 2:
        cmd_sizes(a[0], a[1])
    elif cmd == "report" and len(a) in (1, 2) and (len(a) == 1 or a[1] == "--markdown"):
        cmd_report(a[0], len(a) == 2)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
