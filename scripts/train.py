#!/usr/bin/python3
"""train.py: a small GPT-style byte-level language model that writes Hugging Face
Trainer style checkpoints. It is the training workload for ckptfs end-to-end tests
and codec benchmarks. Needs only the standard library, torch (Debian's 1.13 works)
and numpy. Run it with /usr/bin/python3.

Model: token + position embedding, N pre-LayerNorm transformer blocks (causal
self-attention, 4x GELU MLP), final LayerNorm, a tied or untied head. Vocabulary:
the 256 byte values. Text: /usr/share/common-licenses/* (regular files, duplicates
by symlink skipped) then /usr/lib/python3.11/*.py, each in sorted name order,
concatenated and cut to --data-bytes; the last 10% is the validation split.

Checkpoints: OUT/checkpoint-<step>/ with, in write order,
  config.json         model config (sorted keys, indent 2, like HF)
  model.safetensors   weights, BF16 (--dtype bf16) or F32, written sequentially
                      by the writer below (same bytes as safetensors' serializer:
                      tensors sorted by dtype then name, header padded to 8 with
                      spaces, __metadata__ {"format": "pt"}); tied head stored once
  training_args.bin   torch.save of the run's arguments plus a hash of the data
  optimizer.pt        torch.save(AdamW state_dict) (+ fp32 master weights, below)
  scheduler.pt        torch.save(LambdaLR state_dict)
  trainer_state.json  global_step, log_history, best_metric null, ... (like HF)
  rng_state.pth       {'python', 'numpy', 'cpu', 'data_generator'} RNG states
After a save, --save-total-limit K > 0 removes the oldest checkpoint-N trees
beyond K with shutil.rmtree, like the Trainer's rotation.

Precision and exact resume (the design):
  --dtype bf16: the model's parameters really are bf16 and forward/backward run
    in bf16 (on this kind of CPU, AVX512-BF16, a bf16 step is ~2.7x faster than
    fp32). The optimizer owns fp32 *master* copies of the parameters: after
    backward the bf16 grads are widened to fp32 onto the masters, the global grad
    norm is clipped on the masters, AdamW (fp32 exp_avg / exp_avg_sq) updates
    the masters, and the model parameters are set to bf16(master) (round to
    nearest even). model.safetensors therefore holds exactly the bf16 weights the
    model computes with, and optimizer.pt holds
        {'state': ..., 'param_groups': ...,            # torch AdamW state_dict
         'fp32_master_weights': {name: fp32 tensor}}   # in parameter order
    (like DeepSpeed's bf16 optimizer, which keeps the fp32 master weights in its
    optim_states file). torch's Optimizer.load_state_dict ignores the extra key.
    Resume rebuilds the masters from optimizer.pt (checking that bf16(master) is
    bit-identical to model.safetensors), so the continued run is bit-exact.
  --dtype fp32: plain fp32 training; the parameters are the masters and
    model.safetensors (F32) holds them; optimizer.pt is the plain AdamW state.
  Everything else that the next step depends on is saved too: the AdamW state,
  the LambdaLR state (warmup + linear decay over --steps), the global torch RNG
  (dropout), the data-order torch.Generator (batch offsets), python and numpy
  RNGs. Evaluation uses its own fixed generator and no dropout, so it does not
  disturb training. torch.use_deterministic_algorithms(True) is on, and the
  thread counts default to 1 (OMP/OpenBLAS/MKL; set them before starting to
  override): results are bit-reproducible for a given machine and thread count.
  Interrupting with --stop-at K and continuing with --resume (same --steps)
  gives per-step losses (float.hex in --log) and final checkpoint files that are
  bit-identical to an uninterrupted run; scripts/check-resume verifies this.
  trainer_state.json logs the loss *of* every --logging-steps-th step (not a mean
  over the window), so it needs no state that a checkpoint would lose.

Modes: training (default), --resume (continue from the newest complete
checkpoint-N under --out), --init-from DIR (weights of a checkpoint, fresh
optimizer, scheduler and RNG: fine-tuning), --eval-from DIR (print the
validation loss of a checkpoint as JSON; no training).
"""

import os

# Must be set before numpy/torch load their BLAS/OpenMP: one thread is both the
# fastest setting on a shared 2-core machine and the reproducible one.
for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import glob
import hashlib
import json
import math
import random
import re
import shutil
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 256
EVAL_SEED = 0x5EED
CKPT_RE = re.compile(r"^checkpoint-(\d+)$")
CKPT_FILES = ("config.json", "model.safetensors", "optimizer.pt", "scheduler.pt",
              "trainer_state.json", "rng_state.pth")

# Architecture / data / hyper-parameters. Their defaults are resolved after parsing
# (explicit > checkpoint being resumed > --tiny preset > default), so that --resume
# can reject a command line that contradicts the checkpoint.
DEFAULTS = dict(n_layer=6, n_head=8, n_embd=256, block_size=128, batch_size=32,
                dropout=0.0, tie_head=False, dtype="bf16", lr=3e-4, warmup=10,
                schedule="linear", weight_decay=0.1, grad_clip=1.0, seed=1337,
                data_bytes=2_000_000, eval_iters=4, steps=200, save_every=50,
                logging_steps=10)
TINY = dict(n_layer=2, n_head=2, n_embd=64, block_size=64, batch_size=8,
            warmup=2, eval_iters=2, steps=20, save_every=10, logging_steps=5)
ARCH_KEYS = ("n_layer", "n_head", "n_embd", "block_size", "tie_head")
# Keys a resumed run must share with the checkpoint for the continuation to be exact.
RESUME_KEYS = ARCH_KEYS + ("batch_size", "dropout", "dtype", "lr", "warmup", "schedule",
                           "weight_decay", "grad_clip", "seed", "data_bytes", "steps")


def log(msg):
    print(msg, flush=True)


# ----------------------------------------------------------------------------- safetensors

# Dtype order of the reference implementation's enum; it sorts by dtype descending
# (widest first, so every tensor is naturally aligned), then by name.
ST_DTYPES = ["BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3",
             "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16",
             "I32", "U32", "F32", "C64", "F64", "I64", "U64"]
ST_RANK = {d: i for i, d in enumerate(ST_DTYPES)}
TORCH_TO_ST = {torch.bfloat16: "BF16", torch.float32: "F32", torch.float16: "F16",
               torch.float64: "F64", torch.int64: "I64", torch.int32: "I32",
               torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL"}
ST_TO_TORCH = {v: k for k, v in TORCH_TO_ST.items()}
# Same-width integer views used to get at the raw bytes of types numpy lacks.
RAW_VIEW = {torch.bfloat16: torch.int16}


def _tensor_bytes(t):
    t = t.detach().contiguous().cpu()
    if t.dtype in RAW_VIEW:
        t = t.view(RAW_VIEW[t.dtype])
    return t.numpy().data.cast("B")


def save_safetensors(tensors, path, metadata=None):
    """Write {name: tensor} to path as safetensors <= 0.7 does: one sequential
    pass of plain writes (no mmap, seek, temp file or fsync)."""
    assert sys.byteorder == "little"
    items = sorted(tensors.items(), key=lambda kv: (-ST_RANK[TORCH_TO_ST[kv[1].dtype]], kv[0]))
    header, offset = {}, 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, t in items:
        n = t.numel() * t.element_size()
        header[name] = {"dtype": TORCH_TO_ST[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + n]}
        offset += n
    hb = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb", buffering=8192) as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for _, t in items:
            f.write(_tensor_bytes(t))


def load_safetensors(path):
    """Read a safetensors file (plain reads) into {name: tensor}; returns
    (tensors, metadata). Checks the reference reader's rules."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: too small for a safetensors file")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > 100_000_000 or 8 + n > len(raw):
        raise ValueError(f"{path}: bad header length {n}")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", None)
    base, end, out = 8 + n, 0, {}
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"]):
        b, e = info["data_offsets"]
        dt = ST_TO_TORCH.get(info["dtype"])
        if dt is None:
            raise ValueError(f"{path}: {name}: unsupported dtype {info['dtype']}")
        numel = math.prod(info["shape"])
        if b != end or e - b != numel * torch.empty((), dtype=dt).element_size():
            raise ValueError(f"{path}: {name}: bad data_offsets {info['data_offsets']}")
        end = e
        buf = bytearray(raw[base + b:base + e])
        if dt in RAW_VIEW:
            t = torch.frombuffer(buf, dtype=RAW_VIEW[dt]).view(dt) if numel else torch.empty(0, dtype=dt)
        else:
            t = torch.frombuffer(buf, dtype=dt) if numel else torch.empty(0, dtype=dt)
        out[name] = t.reshape(info["shape"])
    if base + end != len(raw):
        raise ValueError(f"{path}: data does not end at the end of the file")
    return out, metadata


# ----------------------------------------------------------------------------- model

class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        e = cfg["n_embd"]
        self.n_head = cfg["n_head"]
        self.c_attn = nn.Linear(e, 3 * e)
        self.c_proj = nn.Linear(e, e)
        self.attn_drop = nn.Dropout(cfg["dropout"])
        self.resid_drop = nn.Dropout(cfg["dropout"])
        t = cfg["block_size"]
        self.register_buffer("mask", torch.ones(t, t, dtype=torch.bool).triu(1), persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (z.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:T, :T], float("-inf")).softmax(dim=-1)
        y = (self.attn_drop(att) @ v).transpose(1, 2).reshape(B, T, C)
        return self.resid_drop(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        e = cfg["n_embd"]
        self.c_fc = nn.Linear(e, 4 * e)
        self.c_proj = nn.Linear(4 * e, e)
        self.drop = nn.Dropout(cfg["dropout"])

    def forward(self, x):
        return self.drop(self.c_proj(F.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg["n_embd"])
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg["n_embd"])
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(VOCAB, cfg["n_embd"]),
            wpe=nn.Embedding(cfg["block_size"], cfg["n_embd"]),
            drop=nn.Dropout(cfg["dropout"]),
            h=nn.ModuleList([Block(cfg) for _ in range(cfg["n_layer"])]),
            ln_f=nn.LayerNorm(cfg["n_embd"])))
        self.lm_head = nn.Linear(cfg["n_embd"], VOCAB, bias=False)
        if cfg["tie_head"]:
            self.lm_head.weight = self.transformer.wte.weight
        # GPT-2 initialisation (consumes the global torch RNG: seeded before).
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 1:
                nn.init.ones_(p)
            elif name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * cfg["n_layer"]))
            else:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):
        T = idx.size(1)
        tr = self.transformer
        x = tr.drop(tr.wte(idx) + tr.wpe(torch.arange(T)))
        for block in tr.h:
            x = block(x)
        logits = self.lm_head(tr.ln_f(x))
        return F.cross_entropy(logits.float().view(-1, VOCAB), targets.reshape(-1))


def model_config(cfg, dtype):
    return {"architectures": ["CharGPTForCausalLM"], "model_type": "chargpt",
            "vocab_size": VOCAB, "n_layer": cfg["n_layer"], "n_head": cfg["n_head"],
            "n_embd": cfg["n_embd"], "block_size": cfg["block_size"],
            "dropout": cfg["dropout"], "tie_word_embeddings": cfg["tie_head"],
            "layer_norm_epsilon": 1e-5, "initializer_range": 0.02,
            "torch_dtype": "bfloat16" if dtype == "bf16" else "float32"}


def arch_from_config(c):
    return {"n_layer": c["n_layer"], "n_head": c["n_head"], "n_embd": c["n_embd"],
            "block_size": c["block_size"], "tie_head": c["tie_word_embeddings"]}


# ----------------------------------------------------------------------------- data

def data_paths():
    seen, paths = set(), []
    lic = sorted(glob.glob("/usr/share/common-licenses/*"))
    py = sorted(glob.glob("/usr/lib/python3.11/*.py"))
    for p in lic + py:
        rp = os.path.realpath(p)
        if os.path.isfile(rp) and rp not in seen:
            seen.add(rp)
            paths.append(p)
    return paths


def load_data(nbytes, block_size):
    buf = bytearray()
    for p in data_paths():
        if len(buf) >= nbytes:
            break
        with open(p, "rb") as f:
            buf += f.read()
    buf = bytes(buf[:nbytes])
    n_val = max(len(buf) // 10, block_size + 2)
    if len(buf) - n_val < block_size + 2:
        sys.exit(f"train.py: only {len(buf)} bytes of text found; need more")
    data = torch.frombuffer(bytearray(buf), dtype=torch.uint8)
    return data[:-n_val], data[-n_val:], hashlib.sha256(buf).hexdigest()


def get_batch(data, gen, batch_size, block_size):
    ix = torch.randint(len(data) - block_size - 1, (batch_size,), generator=gen)
    x = torch.stack([data[i:i + block_size] for i in ix.tolist()]).long()
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix.tolist()]).long()
    return x, y


@torch.no_grad()
def evaluate(model, val, batch_size, block_size, iters):
    gen = torch.Generator().manual_seed(EVAL_SEED)
    was_training = model.training
    model.eval()
    losses = [model(*get_batch(val, gen, batch_size, block_size)).item() for _ in range(iters)]
    model.train(was_training)
    return sum(losses) / len(losses)


# ----------------------------------------------------------------------------- checkpoints

def list_checkpoints(root):
    out = []
    if os.path.isdir(root):
        for d in os.listdir(root):
            m = CKPT_RE.match(d)
            if m and os.path.isdir(os.path.join(root, d)):
                out.append((int(m.group(1)), os.path.join(root, d)))
    return sorted(out)


def latest_checkpoint(root):
    for step, path in reversed(list_checkpoints(root)):
        missing = [f for f in CKPT_FILES if not os.path.isfile(os.path.join(path, f))]
        if not missing:
            return path
        log(f"skipping incomplete {path} (missing {', '.join(missing)})")
    return None


def rotate_checkpoints(root, limit):
    if limit <= 0:
        return
    ckpts = list_checkpoints(root)
    for _, path in ckpts[:max(0, len(ckpts) - limit)]:
        log(f"deleting older checkpoint {path} (save_total_limit={limit})")
        shutil.rmtree(path)


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def rng_states(data_gen):
    return {"python": random.getstate(), "numpy": np.random.get_state(),
            "cpu": torch.get_rng_state(), "data_generator": data_gen.get_state()}


def same_bits(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    view = RAW_VIEW.get(a.dtype, {torch.float32: torch.int32}.get(a.dtype))
    return torch.equal(a.view(view), b.view(view)) if view else torch.equal(a, b)


# ----------------------------------------------------------------------------- trainer

class Trainer:
    def __init__(self, args, cfg, train, val, data_hash):
        self.args, self.cfg = args, cfg
        self.train_data, self.val_data, self.data_hash = train, val, data_hash
        self.bf16 = cfg["dtype"] == "bf16"
        torch.manual_seed(cfg["seed"])
        random.seed(cfg["seed"])
        np.random.seed(cfg["seed"])
        self.model = GPT(cfg)  # fp32 init from the seeded global RNG
        self.names = [n for n, _ in self.model.named_parameters()]  # tied head once
        params = [p for _, p in self.model.named_parameters()]
        if self.bf16:
            self.masters = [nn.Parameter(p.detach().clone()) for p in params]
            self.model.to(torch.bfloat16)
        else:
            self.masters = params
        self.params = [p for _, p in self.model.named_parameters()]
        decay = [m for n, m in zip(self.names, self.masters) if m.dim() >= 2]
        no_decay = [m for n, m in zip(self.names, self.masters) if m.dim() < 2]
        self.opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": cfg["weight_decay"]},
             {"params": no_decay, "weight_decay": 0.0}],
            lr=cfg["lr"], betas=(0.9, 0.999), eps=1e-8)
        steps, warmup, sched = cfg["steps"], cfg["warmup"], cfg["schedule"]

        def lr_lambda(step):  # transformers' get_linear_schedule_with_warmup
            if step < warmup:
                return float(step) / float(max(1, warmup))
            if sched == "constant":
                return 1.0
            return max(0.0, float(steps - step) / float(max(1, steps - warmup)))

        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lr_lambda)
        self.data_gen = torch.Generator().manual_seed(cfg["seed"])
        self.step = 0
        self.log_history = []
        self.n_params = sum(p.numel() for p in self.params)

    # -- weights
    def set_weights(self, tensors, masters=None):
        """Load {name: tensor}; masters (fp32, bf16 mode) override the weights."""
        own = dict(zip(self.names, self.masters))
        missing = set(own) - set(tensors)
        extra = set(tensors) - set(own) - ({"lm_head.weight"} if self.cfg["tie_head"] else set())
        if missing or extra:
            raise SystemExit(f"train.py: weights do not match the model: missing {sorted(missing)}, "
                             f"unexpected {sorted(extra)}")
        differ = 0
        with torch.no_grad():
            for name, m, p in zip(self.names, self.masters, self.params):
                t = tensors[name]
                if tuple(t.shape) != tuple(m.shape):
                    raise SystemExit(f"train.py: {name}: shape {tuple(t.shape)} != {tuple(m.shape)}")
                src = masters[name] if masters is not None else t
                m.copy_(src.float())
                if p is not m:
                    p.copy_(m)
                    if masters is not None and not same_bits(p.detach(), t):
                        if not self.args.resume_inexact:
                            raise SystemExit(f"train.py: {name}: bf16(master) in optimizer.pt "
                                             f"differs from model.safetensors")
                        differ += int((p.detach().float() != t.float()).sum())
        if differ:
            log(f"resume-inexact: {differ} of {self.n_params} bf16 weights differ from "
                f"bf16(master); continuing from the fp32 masters")

    def weights(self):
        return {n: p.detach() for n, p in zip(self.names, self.params)}

    # -- one optimisation step
    def train_step(self):
        c = self.cfg
        x, y = get_batch(self.train_data, self.data_gen, c["batch_size"], c["block_size"])
        loss = self.model(x, y)
        loss.backward()
        if self.bf16:
            for p, m in zip(self.params, self.masters):
                m.grad = p.grad.float()
                p.grad = None
        if c["grad_clip"] > 0:
            gnorm = torch.nn.utils.clip_grad_norm_(self.masters, c["grad_clip"]).item()
        else:
            gnorm = torch.norm(torch.stack([m.grad.norm() for m in self.masters])).item()
        lr = self.sched.get_last_lr()[0]
        self.opt.step()
        self.sched.step()
        self.opt.zero_grad(set_to_none=True)
        if self.bf16:
            with torch.no_grad():
                for p, m in zip(self.params, self.masters):
                    p.copy_(m)
        self.step += 1
        return loss.item(), lr, gnorm

    # -- checkpoints
    def state_json(self):
        c, a = self.cfg, self.args
        tokens = self.step * c["batch_size"] * c["block_size"]
        return {
            "best_metric": None, "best_model_checkpoint": None,
            "epoch": tokens / len(self.train_data),
            "eval_steps": c["save_every"], "global_step": self.step,
            "is_hyper_param_search": False, "is_local_process_zero": True,
            "is_world_process_zero": True, "log_history": self.log_history,
            "logging_steps": c["logging_steps"], "max_steps": c["steps"],
            "num_input_tokens_seen": tokens, "num_train_epochs":
                math.ceil(c["steps"] * c["batch_size"] * c["block_size"] / len(self.train_data)),
            "save_steps": c["save_every"],
            "stateful_callbacks": {"TrainerControl": {"args": {
                "should_epoch_stop": False, "should_evaluate": False, "should_log": False,
                "should_save": True, "should_training_stop": self.step >= c["steps"]},
                "attributes": {}}},
            "total_flos": 6.0 * self.n_params * tokens,
            "train_batch_size": c["batch_size"], "trial_name": None, "trial_params": None}

    def save(self, root):
        path = os.path.join(root, f"checkpoint-{self.step}")
        t0 = time.time()
        os.makedirs(path, exist_ok=True)
        write_json(os.path.join(path, "config.json"), model_config(self.cfg, self.cfg["dtype"]))
        save_safetensors(self.weights(), os.path.join(path, "model.safetensors"), {"format": "pt"})
        torch.save(dict(self.cfg, data_sha256=self.data_hash),
                   os.path.join(path, "training_args.bin"))
        osd = self.opt.state_dict()
        if self.bf16:
            osd["fp32_master_weights"] = {n: m.detach() for n, m in zip(self.names, self.masters)}
        torch.save(osd, os.path.join(path, "optimizer.pt"))
        torch.save(self.sched.state_dict(), os.path.join(path, "scheduler.pt"))
        write_json(os.path.join(path, "trainer_state.json"), self.state_json())
        torch.save(rng_states(self.data_gen), os.path.join(path, "rng_state.pth"))
        size = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
        log(f"saved {path} ({size / 1e6:.1f} MB in {time.time() - t0:.2f} s)")
        rotate_checkpoints(root, self.args.save_total_limit)

    def resume(self, path):
        tensors, _ = load_safetensors(os.path.join(path, "model.safetensors"))
        osd = torch.load(os.path.join(path, "optimizer.pt"))
        masters = osd.pop("fp32_master_weights", None)
        if self.bf16 and masters is None:
            log("WARNING: optimizer.pt has no fp32 master weights; continuing from the "
                "bf16 weights, the run will not match an uninterrupted one")
        self.set_weights(tensors, masters if self.bf16 else None)
        self.opt.load_state_dict(osd)
        self.sched.load_state_dict(torch.load(os.path.join(path, "scheduler.pt")))
        rng = torch.load(os.path.join(path, "rng_state.pth"))
        random.setstate(rng["python"])
        np.random.set_state(rng["numpy"])
        torch.set_rng_state(rng["cpu"])
        self.data_gen.set_state(rng["data_generator"])
        st = read_json(os.path.join(path, "trainer_state.json"))
        self.step = st["global_step"]
        self.log_history = st["log_history"]

    # -- main loop
    def train(self):
        c, a = self.cfg, self.args
        stop = min(c["steps"], a.stop_at) if a.stop_at else c["steps"]
        logf = open(a.log, "a", encoding="utf-8") if a.log else None
        self.model.train()
        t_last, s_last = time.time(), self.step
        while self.step < stop:
            loss, lr, gnorm = self.train_step()
            s = self.step
            if logf:
                logf.write(json.dumps({"step": s, "loss": loss.hex(), "lr": lr.hex(),
                                       "grad_norm": gnorm.hex()}) + "\n")
                logf.flush()
            tokens = s * c["batch_size"] * c["block_size"]
            if s % c["logging_steps"] == 0 or s == c["steps"]:
                self.log_history.append({"epoch": tokens / len(self.train_data),
                                         "grad_norm": gnorm, "learning_rate": lr,
                                         "loss": round(loss, 4), "step": s})
                dt = (time.time() - t_last) / max(1, s - s_last)
                t_last, s_last = time.time(), s
                log(f"step {s}/{c['steps']} loss {loss:.4f} lr {lr:.3g} "
                    f"grad_norm {gnorm:.3f} {dt:.3f} s/step")
            if s % c["save_every"] == 0 or s == c["steps"]:
                if c["eval_iters"] > 0:
                    vl = evaluate(self.model, self.val_data, c["batch_size"], c["block_size"],
                                  c["eval_iters"])
                    self.log_history.append({"epoch": tokens / len(self.train_data),
                                             "eval_loss": vl, "step": s})
                    log(f"step {s} eval_loss {vl:.4f}")
                self.save(a.out)
                t_last = time.time()
        if logf:
            logf.close()


# ----------------------------------------------------------------------------- CLI

def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Train a small byte-level GPT and write Hugging Face Trainer style "
                    "checkpoints (OUT/checkpoint-N/). See the docstring at the top of "
                    "this file for the checkpoint layout and the exact-resume design.",
    )
    d = DEFAULTS
    g = p.add_argument_group("run")
    g.add_argument("--out", help="checkpoint root directory (required unless --eval-from)")
    g.add_argument("--steps", type=int, help=f"total optimizer steps (default {d['steps']}, "
                   f"tiny {TINY['steps']}); the LR schedule spans them")
    g.add_argument("--stop-at", type=int, default=0,
                   help="stop after this step (simulates an interruption; schedule still "
                        "spans --steps); 0 = run to --steps")
    g.add_argument("--save-every", type=int, help=f"save every N steps and at the last "
                   f"(default {d['save_every']}, tiny {TINY['save_every']})")
    g.add_argument("--save-total-limit", type=int, default=0,
                   help="keep only the newest K checkpoint-N dirs (0 = keep all)")
    g.add_argument("--logging-steps", type=int, help=f"log_history entry every N steps "
                   f"(default {d['logging_steps']})")
    g.add_argument("--eval-iters", type=int, help=f"validation batches at each save (default "
                   f"{d['eval_iters']}; 0 = no eval)")
    g.add_argument("--log", help="append one JSON line per step: step, and loss/lr/grad_norm "
                                 "as float.hex()")
    g.add_argument("--resume", action="store_true",
                   help="continue from the newest complete checkpoint-N under --out")
    g.add_argument("--resume-inexact", action="store_true",
                   help="with --resume: accept a checkpoint whose model.safetensors is not "
                        "bf16 of its fp32 masters (a lossy copy); the masters win")
    g.add_argument("--init-from", metavar="DIR",
                   help="start from the weights of checkpoint DIR with a fresh optimizer, "
                        "scheduler and RNG (fine-tuning)")
    g.add_argument("--eval-from", metavar="DIR",
                   help="load checkpoint DIR, print its validation loss as JSON, exit")
    g.add_argument("--expect-logged", action="store_true",
                   help="with --eval-from: exit 1 unless the loss equals, bit for bit, "
                        "the last eval_loss logged in the checkpoint's trainer_state.json")
    g = p.add_argument_group("model and optimisation")
    g.add_argument("--tiny", action="store_true",
                   help="preset for tests: " + ", ".join(f"{k}={v}" for k, v in TINY.items()))
    g.add_argument("--n-layer", type=int, help=f"(default {d['n_layer']})")
    g.add_argument("--n-head", type=int, help=f"(default {d['n_head']})")
    g.add_argument("--n-embd", type=int, help=f"(default {d['n_embd']})")
    g.add_argument("--block-size", type=int, help=f"context length (default {d['block_size']})")
    g.add_argument("--batch-size", type=int, help=f"(default {d['batch_size']})")
    g.add_argument("--dropout", type=float, help=f"(default {d['dropout']})")
    g.add_argument("--tie-head", action="store_const", const=True,
                   help="tie lm_head to the token embedding (default untied)")
    g.add_argument("--dtype", choices=["bf16", "fp32"],
                   help="weights of the model (and of model.safetensors); bf16 trains in "
                        "bf16 with fp32 master weights in the optimizer (default bf16)")
    g.add_argument("--lr", type=float, help=f"peak learning rate (default {d['lr']})")
    g.add_argument("--warmup", type=int, help=f"linear warmup steps (default {d['warmup']})")
    g.add_argument("--schedule", choices=["linear", "constant"],
                   help="after warmup: linear decay to 0 at --steps, or constant "
                        "(default linear)")
    g.add_argument("--weight-decay", type=float, help=f"AdamW, on matrices only "
                   f"(default {d['weight_decay']})")
    g.add_argument("--grad-clip", type=float, help=f"max global grad norm, 0 = off "
                   f"(default {d['grad_clip']})")
    g.add_argument("--seed", type=int, help=f"(default {d['seed']})")
    g.add_argument("--data-bytes", type=int, help=f"size of the text prefix used "
                   f"(default {d['data_bytes']})")
    return p.parse_args(argv)


def resolve(args, saved=None, arch=None, strict=True):
    """explicit > arch (checkpoint's config.json) > saved (checkpoint's
    training_args.bin) > --tiny > default. With strict (resume), an explicit value
    that contradicts the checkpoint in a key that shapes the trajectory is an error."""
    cfg = {}
    for k, dv in DEFAULTS.items():
        v = getattr(args, k)
        name = "--" + k.replace("_", "-")
        if arch is not None and k in ARCH_KEYS:
            if v is not None and v != arch[k]:
                raise SystemExit(f"train.py: {name} {v} contradicts the checkpoint's {arch[k]}")
            v = arch[k]
        if saved is not None and k in saved:
            if strict and v is not None and v != saved[k] and k in RESUME_KEYS and k != "steps":
                raise SystemExit(f"train.py: {name} {v} contradicts the checkpoint being "
                                 f"resumed ({saved[k]})")
            if v is None:
                v = saved[k]
        if v is None:
            v = TINY[k] if args.tiny and k in TINY else dv
        cfg[k] = v
    for k in ("n_layer", "n_head", "n_embd", "block_size", "batch_size", "steps", "save_every",
              "logging_steps"):
        if cfg[k] <= 0:
            raise SystemExit(f"train.py: --{k.replace('_', '-')} must be positive")
    if cfg["n_embd"] % cfg["n_head"]:
        raise SystemExit("train.py: --n-embd must be a multiple of --n-head")
    if cfg["eval_iters"] < 0 or cfg["warmup"] < 0:
        raise SystemExit("train.py: --eval-iters and --warmup must be >= 0")
    return cfg


def main(argv=None):
    args = parse_args(argv)
    try:
        torch.use_deterministic_algorithms(True)
    except Exception as e:  # pragma: no cover
        log(f"note: deterministic algorithms unavailable: {e}")

    if args.eval_from:
        c = read_json(os.path.join(args.eval_from, "config.json"))
        ta = os.path.join(args.eval_from, "training_args.bin")
        saved = torch.load(ta) if os.path.isfile(ta) else None
        cfg = resolve(args, saved=saved, arch=arch_from_config(c), strict=False)
        cfg["dtype"] = "bf16" if c.get("torch_dtype") == "bfloat16" else "fp32"
        train, val, h = load_data(cfg["data_bytes"], cfg["block_size"])
        tr = Trainer(args, cfg, train, val, h)
        tensors, _ = load_safetensors(os.path.join(args.eval_from, "model.safetensors"))
        tr.set_weights(tensors)
        vl = evaluate(tr.model, val, cfg["batch_size"], cfg["block_size"], max(1, cfg["eval_iters"]))
        state = {}
        sp = os.path.join(args.eval_from, "trainer_state.json")
        if os.path.isfile(sp):
            state = read_json(sp)
        print(json.dumps({"checkpoint": args.eval_from, "global_step": state.get("global_step"),
                          "val_loss": vl, "val_loss_hex": vl.hex(),
                          "eval_iters": max(1, cfg["eval_iters"]),
                          "batch_size": cfg["batch_size"], "dtype": cfg["dtype"],
                          "params": tr.n_params}))
        if args.expect_logged:
            logged = [e["eval_loss"] for e in state.get("log_history", []) if "eval_loss" in e]
            if not logged or logged[-1] != vl:
                log(f"eval-from: {vl!r} != logged {logged[-1] if logged else None!r}")
                return 1
        return 0

    if not args.out:
        raise SystemExit("train.py: --out is required")
    if args.resume and args.init_from:
        raise SystemExit("train.py: --resume and --init-from exclude each other")
    if args.save_total_limit < 0:
        raise SystemExit("train.py: --save-total-limit must be >= 0")

    ckpt = None
    if args.resume:
        ckpt = latest_checkpoint(args.out)
        if ckpt is None:
            raise SystemExit(f"train.py: --resume: no complete checkpoint-N under {args.out}")
        saved = torch.load(os.path.join(ckpt, "training_args.bin"))
        cfg = resolve(args, saved=saved, arch=arch_from_config(read_json(os.path.join(ckpt, "config.json"))))
        if cfg["steps"] != saved.get("steps", cfg["steps"]):
            log(f"note: --steps {cfg['steps']} differs from the checkpoint's {saved['steps']}: "
                f"the LR schedule changes, so this is not the run an uninterrupted one would be")
    elif args.init_from:
        cfg = resolve(args, arch=arch_from_config(read_json(os.path.join(args.init_from, "config.json"))))
    else:
        cfg = resolve(args)

    train, val, h = load_data(cfg["data_bytes"], cfg["block_size"])
    if ckpt is not None and saved.get("data_sha256") not in (None, h):
        raise SystemExit("train.py: the training text differs from the checkpoint's "
                         "(data_sha256 mismatch); cannot resume exactly")
    tr = Trainer(args, cfg, train, val, h)
    if ckpt is not None:
        tr.resume(ckpt)
        log(f"resumed from {ckpt} at step {tr.step}")
    elif args.init_from:
        tensors, _ = load_safetensors(os.path.join(args.init_from, "model.safetensors"))
        tr.set_weights(tensors)
        log(f"initialised weights from {args.init_from}")
    log(f"model: {tr.n_params} parameters ({tr.n_params / 1e6:.2f}M), dtype {cfg['dtype']}, "
        f"layers {cfg['n_layer']} heads {cfg['n_head']} embd {cfg['n_embd']} "
        f"block {cfg['block_size']} batch {cfg['batch_size']}; "
        f"text {len(train)}+{len(val)} bytes")
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    start = tr.step
    tr.train()
    n = tr.step - start
    log(f"done: {n} steps in {time.time() - t0:.1f} s"
        + (f" ({(time.time() - t0) / n:.3f} s/step incl. saves)" if n else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
