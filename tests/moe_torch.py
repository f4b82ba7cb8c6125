"""An MoE feed-forward layer in PyTorch, in float64 with autograd, written
apart from model/moe_layer.cc (dispatch by masks and cumulative sums, as
GShard describes it, every expert run on every token and masked), for
tests/moe_torch_test.cc.

Usage: moe_torch.py DIR. DIR holds cfg.json (N, C, H, E, K,
capacity_factor, alpha, daux) and float32 arrays x (N,C), router (E,C),
fc_w (E,H,C), fc_b (E,H), proj_w (E,C,H), proj_b (E,C), dout (N,C). Writes
to DIR out, dx and d_<weight> (float32), and ref.json: aux, dropped, and
each token's chosen experts with whether each choice was kept.
"""
import json
import math
import sys

import numpy as np
import torch

d = sys.argv[1]
cfg = json.load(open(f"{d}/cfg.json"))
N, C, H, E, K = cfg["N"], cfg["C"], cfg["H"], cfg["E"], cfg["K"]


def load(name, shape):
    a = np.fromfile(f"{d}/{name}", dtype=np.float32).reshape(shape)
    return torch.tensor(a, dtype=torch.float64, requires_grad=True)


x = load("x", (N, C))
weights = {
    "router": load("router", (E, C)),
    "fc_w": load("fc_w", (E, H, C)),
    "fc_b": load("fc_b", (E, H)),
    "proj_w": load("proj_w", (E, C, H)),
    "proj_b": load("proj_b", (E, C)),
}
dout = load("dout", (N, C)).detach()

probs = torch.softmax(x @ weights["router"].T, dim=-1)
top_p, top_i = torch.topk(probs, K, dim=-1)
gates = top_p / top_p.sum(-1, keepdim=True) if K == 2 else top_p
capacity = max(1, min(N, math.ceil(cfg["capacity_factor"] * K * N / E)))

# Position of each choice in its expert: first choices by token order, then
# second choices after every first one.
taken = torch.zeros(E, dtype=torch.long)
keep = []
for k in range(K):
    onehot = torch.nn.functional.one_hot(top_i[:, k], E)
    position = torch.cumsum(onehot, dim=0) - 1 + taken
    keep.append((position * onehot).sum(-1) < capacity)
    taken += onehot.sum(0)

out = torch.zeros(N, C, dtype=torch.float64)
for e in range(E):
    hidden = x @ weights["fc_w"][e].T + weights["fc_b"][e]
    y = torch.nn.functional.gelu(hidden, approximate="tanh")
    y = y @ weights["proj_w"][e].T + weights["proj_b"][e]
    for k in range(K):
        mask = ((top_i[:, k] == e) & keep[k]).to(torch.float64)
        out = out + (gates[:, k] * mask)[:, None] * y

first = torch.nn.functional.one_hot(top_i[:, 0], E).to(torch.float64).mean(0)
aux = cfg["alpha"] * E * (first * probs.mean(0)).sum()
loss = (out * dout).sum() + cfg["daux"] * aux
loss.backward()


def save(name, t):
    t.detach().numpy().astype(np.float32).tofile(f"{d}/{name}")


save("out", out)
save("dx", x.grad)
for name, w in weights.items():
    save("d_" + name, w.grad)
json.dump(
    {
        "aux": aux.item(),
        "dropped": int(sum((~kp).sum().item() for kp in keep)),
        "experts": top_i.tolist(),
        "kept": [[bool(keep[k][t]) for k in range(K)] for t in range(N)],
    },
    open(f"{d}/ref.json", "w"),
)
