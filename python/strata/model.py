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

OPTIMIZERS = ("sgd", "adam", "adamw", "lamb", "adafactor")


def group(name, optimizer="adamw", lr=1e-3, betas=(0.9, 0.999), eps=None,
          weight_decay=0.0, momentum=0.0, warmup_steps=0, total_steps=0,
          min_lr_ratio=0.0, bias_correction=None, max_trust_ratio=0.0,
          eps2=None, clip_threshold=None, decay_rate=None,
          relative_step=None, scale_parameter=None, warmup_init=False):
    """An optimizer group as the servers apply it (optim/optimizer.h,
    optim/tensor_update.h): AdamW's, LAMB's and Adafactor's weight decay
    is decoupled (w -= lr*wd*w), Adam's and SGD's is L2 on the gradient.
    The learning rate warms up linearly over warmup_steps and, with
    total_steps, decays by a cosine to lr*min_lr_ratio.

    eps: None is each optimizer's default (1e-8; LAMB 1e-6; Adafactor's
    eps1 1e-30). LAMB: bias_correction (None: on), max_trust_ratio (0:
    none). Adafactor: betas[0] > 0 keeps a first moment (0: none),
    betas[1] is unused; eps2, clip_threshold, decay_rate, relative_step,
    scale_parameter (None: 1e-3, 1.0, -0.8, on, on) and warmup_init as
    Hugging Face's Adafactor; with relative_step on, lr must be 0.
    Under BSP a tensor of a LAMB or Adafactor group cut into several chunks
    is updated once a worker drove its sums (Client.reduce; a Session
    does it)."""
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer {optimizer!r} is none of {OPTIMIZERS}")
    return {"name": name, "optimizer": optimizer, "lr": float(lr),
            "beta1": float(betas[0]), "beta2": float(betas[1]),
            "eps": None if eps is None else float(eps),
            "weight_decay": float(weight_decay),
            "momentum": float(momentum), "warmup_steps": int(warmup_steps),
            "total_steps": int(total_steps),
            "min_lr_ratio": float(min_lr_ratio),
            "bias_correction": bias_correction,
            "max_trust_ratio": float(max_trust_ratio), "eps2": eps2,
            "clip_threshold": clip_threshold, "decay_rate": decay_rate,
            "relative_step": relative_step,
            "scale_parameter": scale_parameter,
            "warmup_init": bool(warmup_init)}


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
