"""An independent GPT-2 in PyTorch, in Hugging Face's module layout, that
checks what `strata export` writes and writes a file for Strata to read.

Written from the GPT-2 paper and Hugging Face's published layout
(GPT2LMHeadModel: transformer.{wte,wpe,h.N.{ln_1,attn.{c_attn,c_proj},
ln_2,mlp.{c_fc,c_proj}},ln_f}, Conv1D weights stored (in, out), the
attention mask as the buffer attn.bias, lm_head tied to wte), with its own
safetensors reader and writer (json + numpy): nothing of Strata's is used.

Usage: hf_gpt2_torch.py MODEL_DIR TOKENS B T LOGITS OUT_DIR
  MODEL_DIR  holds model.safetensors and config.json (from strata export)
  TOKENS     (B, T) int32 token ids, raw little-endian
  LOGITS     Strata's (B, T, vocab_size) float32 logits for them, raw
  OUT_DIR    where to write a model of its own: the loaded one after one
             SGD step, saved as published GPT-2 files are (GPT2Model names,
             without "transformer.", with the attention-mask buffers), its
             config.json, and logits.bin, its logits for TOKENS.
Prints the largest absolute logit difference; exits 1 if it is over 1e-4.
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch
from torch import nn


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        assert entry["dtype"] == "F32", (name, entry["dtype"])
        begin, end = entry["data_offsets"]
        raw = data[8 + n + begin:8 + n + end]
        out[name] = torch.from_numpy(
            np.frombuffer(raw, dtype="<f4").copy().reshape(entry["shape"]))
    return out


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().to(torch.float32)
        raw = t.numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


class Conv1D(nn.Module):
    """y = x @ weight + bias, weight stored (in, out) as GPT-2's."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return x @ self.weight + self.bias


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(
        math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c, t = cfg["n_embd"], cfg["n_positions"]
        self.n_head = cfg["n_head"]
        self.c_attn = Conv1D(c, 3 * c)
        self.c_proj = Conv1D(c, c)
        self.register_buffer(
            "bias", torch.tril(torch.ones(t, t)).view(1, 1, t, t))
        self.register_buffer("masked_bias", torch.tensor(-1e4))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        heads = lambda y: y.view(b, t, self.n_head, c // self.n_head
                                 ).transpose(1, 2)
        q, k, v = heads(q), heads(k), heads(v)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.shape[-1])
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        y = torch.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = Conv1D(c, 4 * c)
        self.c_proj = Conv1D(4 * c, c)

    def forward(self, x):
        return self.c_proj(gelu_new(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c, eps = cfg["n_embd"], cfg["layer_norm_epsilon"]
        self.ln_1 = nn.LayerNorm(c, eps=eps)
        self.attn = Attention(cfg)
        self.ln_2 = nn.LayerNorm(c, eps=eps)
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c = cfg["n_embd"]
        self.wte = nn.Embedding(cfg["vocab_size"], c)
        self.wpe = nn.Embedding(cfg["n_positions"], c)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg["n_layer"]))
        self.ln_f = nn.LayerNorm(c, eps=cfg["layer_norm_epsilon"])

    def forward(self, idx):
        pos = torch.arange(idx.shape[1])
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class GPT2LMHeadModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.transformer = GPT2Model(cfg)
        self.lm_head = nn.Linear(cfg["n_embd"], cfg["vocab_size"], bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied

    def forward(self, idx):
        return self.lm_head(self.transformer(idx))


def main():
    model_dir, tokens_path, b, t, logits_path, out_dir = sys.argv[1:7]
    b, t = int(b), int(t)
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    model = GPT2LMHeadModel(cfg)
    weights = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    # The export leaves out what is not a parameter: the tied head and the
    # masks, which the module makes itself.
    missing, unexpected = model.load_state_dict(weights, strict=False)
    assert not unexpected, unexpected
    assert all(n == "lm_head.weight" or n.endswith(("attn.bias",
               "attn.masked_bias")) for n in missing), missing
    idx = torch.from_numpy(
        np.fromfile(tokens_path, dtype="<i4").astype(np.int64).reshape(b, t))
    theirs = torch.from_numpy(np.fromfile(logits_path, dtype="<f4").reshape(
        b, t, -1))
    with torch.no_grad():
        ours = model(idx)
    vocab = cfg["vocab_size"]
    diff = (ours - theirs[:, :, :vocab]).abs().max().item()
    print(f"max |logit difference| {diff:.3g} over {ours.numel()} logits "
          f"(scale {ours.abs().max().item():.3g})")
    # One SGD step of its own, then the file published GPT-2s look like.
    loss = nn.functional.cross_entropy(
        model(idx[:, :-1]).reshape(-1, vocab), idx[:, 1:].reshape(-1))
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.5 * p.grad
    os.makedirs(out_dir, exist_ok=True)
    write_safetensors(os.path.join(out_dir, "model.safetensors"),
                      dict(model.transformer.state_dict()))
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f)
    with torch.no_grad():
        model(idx).numpy().astype("<f4").tofile(
            os.path.join(out_dir, "logits.bin"))
    return 0 if diff <= 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
