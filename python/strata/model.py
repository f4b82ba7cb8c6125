"""A model as the servers hold it, from named float32 arrays.

Each tensor is registered under its name with its shape, an optimizer
group and how the servers start it. `write_init_file` saves arrays as a
safetensors file the servers start the weights from (InitSpec FILE): the
servers open it themselves, so it must be at a path they can read (on this
host, or a shared filesystem across hosts).
"""

import json
import os
import struct

import numpy as np

OPTIMIZERS = ("sgd", "adam", "adamw")


def group(name, optimizer="adamw", lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
          weight_decay=0.0, momentum=0.0, warmup_steps=0, total_steps=0,
          min_lr_ratio=0.0):
    """An optimizer group as the servers apply it (optim/optimizer.h):
    AdamW's weight decay is decoupled (w -= lr*wd*w), Adam's and SGD's is
    L2 on the gradient. The learning rate warms up linearly over
    warmup_steps and, with total_steps, decays by a cosine to
    lr*min_lr_ratio."""
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer {optimizer!r} is none of {OPTIMIZERS}")
    return {"name": name, "optimizer": optimizer, "lr": float(lr),
            "beta1": float(betas[0]), "beta2": float(betas[1]),
            "eps": float(eps), "weight_decay": float(weight_decay),
            "momentum": float(momentum), "warmup_steps": int(warmup_steps),
            "total_steps": int(total_steps),
            "min_lr_ratio": float(min_lr_ratio)}


def write_init_file(path, arrays):
    """Writes {name: float32 array} as a safetensors file (the format's
    header: its length as u64 little-endian, then JSON, padded to 8 bytes).
    Returns the file's size."""
    header, offset = {}, 0
    for name, a in arrays.items():
        n = a.size * 4
        # A scalar is registered as shape [1] (DistributedOptimizer).
        header[name] = {"dtype": "F32", "shape": list(a.shape) or [1],
                        "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for a in arrays.values():
            f.write(np.ascontiguousarray(a, dtype="<f4").tobytes())
    os.replace(tmp, path)
    return 8 + len(text) + offset


def tensor(name, shape, group_name="default", init=None):
    """One tensor's registration: `init` a dict (kind: zeros, ones, normal,
    uniform, constant or file; scale; seed; file and source for file)."""
    return {"name": name, "shape": [int(d) for d in shape],
            "group": group_name, "init": init}
