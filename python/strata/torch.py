"""PyTorch models trained through Strata's servers.

    import strata.torch as st
    opt = st.DistributedOptimizer(model.named_parameters(), lr=3e-4,
                                  weight_decay=0.1, grad_clip=1.0)
    sampler = st.ElasticSampler(opt, num_samples=len(dataset),
                                batch_size=64, steps=1000)
    for indices in sampler:           # this worker's share of each step
        loss = loss_fn(model, [dataset[i] for i in indices])
        loss.backward()               # each gradient is pushed when ready
        opt.step()                    # the servers apply the step
        opt.zero_grad()

The optimizer runs on the servers, under the job's consistency (BSP, SSP
or ASP, chosen when the scheduler starts). Each iteration of the sampler
pulls the step's weights into the model's parameters (in place) and leases
this worker's samples from the scheduler's data ledger, so every sample is
used exactly once across worker deaths and joins. A step overtaken by a
membership change is handed out again, and a rollback hands out the step
the job went back to: the loop body is the same either way.
"""

import os
import shutil
import signal
import tempfile
import threading
import warnings

import torch

from strata import _strata
from strata import env
from strata import model as model_spec

_stop = threading.Event()


def request_stop(*_):
    """Leave the job after the step under way (SIGTERM's handler)."""
    _stop.set()


def _install_sigterm():
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, request_stop)


def _check_parameter(name, p):
    if p.dtype != torch.float32:
        raise TypeError(f"parameter {name!r} is {p.dtype}; Strata's servers "
                        "hold float32 weights (call model.float())")
    if p.device.type != "cpu":
        raise ValueError(f"parameter {name!r} is on {p.device}; the Python "
                         "client moves CPU tensors (train on the CPU, or "
                         "keep a CPU copy)")
    if not p.is_contiguous():
        raise ValueError(f"parameter {name!r} is not contiguous")


class DistributedOptimizer:
    """Pushes each parameter's gradient as backward finishes it; the
    servers apply the optimizer. Joins the job and registers the model at
    construction (waiting for `workers` workers, default STRATA_WORKERS).

    optimizer, lr, betas, eps, weight_decay, momentum, warmup_steps,
    total_steps, min_lr_ratio: the servers' optimizer (strata.model.group).
    groups: optional list of dicts {"params": [names], **overrides}, like
    torch's param groups, by parameter name; parameters in none of them
    take the keywords above.
    grad_clip: clip this worker's gradient to this global L2 norm (0: off);
    the servers hold the pushes until step() sends the factor, so pushes
    still overlap backward.
    async_lr: "full" (each push of an SSP or ASP job is an update at the
    whole learning rate) or "share" (at the rate times this worker's share
    of the step's batch, as `strata worker --async_lr share`: a step's
    pushes then move the weights about as far as one BSP update). BSP
    jobs ignore it.
    init: "model" (the servers start from this model's weights, written to
    a safetensors file under init_dir, which the servers must be able to
    read: this host, or a shared filesystem), an init dict for every
    tensor (strata.model.tensor), e.g. {"kind": "zeros"}, or a function of
    (name, parameter) giving each tensor's, e.g. normal(0, 0.02) for
    matrices and ones or zeros for the rest; the servers draw those
    themselves, on any host. The first worker
    to register decides; the others' weights are replaced by the servers'
    at the first step.
    spec: (tensors, groups) to register instead of the model the
    keywords above describe (strata.gpt.server_model gives a C++ worker's,
    to train in one job with it): every parameter must be among the
    tensors under its name and shape, and vice versa.
    backward_passes_per_step: backward passes that accumulate into each
    step's gradient (scale the loss by its inverse, as for torch's own
    accumulation): a gradient is pushed after the last of them.
    experts: modules a mixture of experts routes to (each expert's MLP):
    a step pulls an expert's weights with the others only if this
    worker's last step called it, and pulls the rest as its forward first
    calls them (a forward pre-hook on the module itself: a layer that
    calls an expert's submodules directly, or through functional_call or
    vmap, bypasses it and computes on older weights, so pass the modules
    the layer calls): a worker whose tokens reach few experts moves few.
    Between steps, an expert the last step did not pull holds older
    weights; the final weights are whole. Each must have a parameter in
    the model's.
    shared_memory: payloads through shared memory to servers on this host,
    and the parameters and their gradients moved into a region those
    servers map, so pulls and pushes move them in place (zero_grad then
    zeroes gradients instead of dropping them).
    scheduler, tls_cert, tls_key, tls_ca, bf16, timeout:
    strata.env.connect_options.
    """

    def __init__(self, named_parameters, optimizer="adamw", lr=1e-3,
                 betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 momentum=0.0, warmup_steps=0, total_steps=0,
                 min_lr_ratio=0.0, groups=None, grad_clip=0.0, init="model",
                 init_dir=None, workers=None, chunk_bytes=4 << 20,
                 backward_passes_per_step=1, spec=None, experts=None,
                 scheduler=None, tls_cert=None, tls_key=None, tls_ca=None,
                 bf16=None, shared_memory=True, timeout=60.0,
                 async_lr="full"):
        if int(backward_passes_per_step) < 1:
            raise ValueError("backward_passes_per_step must be >= 1")
        if async_lr not in ("full", "share"):
            raise ValueError(f"async_lr is 'full' or 'share', not {async_lr!r}")
        self._passes_per_step = int(backward_passes_per_step)
        named = [(n, p) for n, p in named_parameters if p.requires_grad]
        if not named:
            raise ValueError("no parameters that require a gradient")
        for name, p in named:
            _check_parameter(name, p)
        self._names = [n for n, _ in named]
        self._params = [p for _, p in named]
        self._init_dir = None
        connect = env.connect_options(scheduler, tls_cert, tls_key, tls_ca,
                                      bf16, shared_memory, timeout)
        if spec is not None:
            tensors, self._group_specs = self._follow(*spec)
        else:
            self._group_specs, self._group_of = self._groups(
                groups, dict(optimizer=optimizer, lr=lr, betas=betas,
                             eps=eps, weight_decay=weight_decay,
                             momentum=momentum, warmup_steps=warmup_steps,
                             total_steps=total_steps,
                             min_lr_ratio=min_lr_ratio))
            tensors = self._tensors(init, init_dir)
        self._hooks = []
        try:
            self._experts = self._expert_indices(experts or [])
        except BaseException:
            self.close()  # the init file
            raise
        try:
            self.session = _strata.Session(
                tensors=tensors, groups=self._group_specs,
                chunk_bytes=int(chunk_bytes),
                min_workers=env.min_workers(workers),
                grad_clip=float(grad_clip), async_lr=str(async_lr),
                **connect)
        except BaseException:
            self.close()
            raise
        try:
            self._joined(shared_memory)
            self._route(experts or [])
        except BaseException:
            self.session.leave()  # not a worker with half a setup
            self.close()
            raise
        _install_sigterm()

    def _joined(self, shared_memory):
        """What follows the join: the region, the hooks."""
        self._shared = shared_memory and self._share_tensors()
        self._in_step = False
        self._pushed = [False] * len(self._params)
        self._passes = [0] * len(self._params)
        with torch.enable_grad():
            for i, p in enumerate(self._params):
                # Horovod's way to run after the gradient is accumulated
                # into p.grad: a hook on the parameter's AccumulateGrad node.
                acc = p.expand_as(p).grad_fn.next_functions[0][0]
                self._hooks.append((acc, acc.register_hook(self._hook(i))))

    def _expert_indices(self, experts):
        """Each expert module's parameter indices."""
        position = {id(p): i for i, p in enumerate(self._params)}
        indices = []
        for k, module in enumerate(experts):
            mine = [position[id(p)] for p in module.parameters()
                    if id(p) in position]
            if not mine:
                raise ValueError(f"expert {k} ({type(module).__name__}) has "
                                 "no parameter among the model's")
            indices.append(mine)
        return indices

    def _route(self, experts):
        """The forward pre-hooks that pull each expert when a step first
        calls it."""
        for k, module in enumerate(experts):
            self._hooks.append(
                (module, module.register_forward_pre_hook(self._wanted(k))))
        self._expert_floats = sum(self._params[i].numel()
                                  for idx in self._experts for i in idx)
        self._used_last = None  # the first step pulls every expert
        self._used, self._pulled, self._tainted = set(), set(), None
        self.experts_pulled = 1.0

    def _wanted(self, k):
        def pre_hook(*_):
            if not self._in_step:
                return
            self._used.add(k)
            missing = [i for i in self._experts[k] if i not in self._pulled]
            if not missing or self._tainted is not None:
                return
            try:
                self.session.pull(
                    missing, [self._params[i].detach().numpy().reshape(-1)
                              for i in missing])
            except _strata.StrataError as e:
                if any(self._pushed):
                    # A forward after pushes went (a metric's, say): the
                    # step cannot be taken back.
                    raise
                # Computed on older weights: not to be pushed (step()
                # abandons it and the sampler hands it out again).
                self._tainted = e
            self._pulled.update(missing)
        return pre_hook

    def _skipped(self):
        """The experts' tensors begin leaves for the forward to pull."""
        if not self._experts or self._used_last is None:
            return []
        return [i for k, idx in enumerate(self._experts)
                if k not in self._used_last for i in idx]

    def _share_tensors(self):
        """Moves the weights, and gradients preallocated beside them, into a
        region the servers on this host map: pulls write the weights in
        place and pushes are read in place, as the C++ worker's are.
        Backward accumulates into the preallocated .grad in place, so
        zero_grad zeroes them rather than dropping them. False (slots, or
        messages, as for other hosts) where the region cannot be made."""
        sizes = [p.numel() for p in self._params]
        total = sum(sizes)
        try:
            flat = torch.from_numpy(self.session.share_tensors(2 * total))
        except (ValueError, _strata.StrataError) as e:
            warnings.warn(f"strata: the weights stay where they are ({e})")
            return False
        offset = 0
        with torch.no_grad():
            for p, n in zip(self._params, sizes):
                w = flat[offset:offset + n].view(p.shape)
                w.copy_(p.data)
                p.data = w
                g = flat[total + offset:total + offset + n].view(p.shape)
                g.zero_()
                p.grad = g
                offset += n
        return True

    def _follow(self, tensors, groups):
        """Orders the parameters as `tensors` lists them, checking that
        they are the same names and shapes."""
        by_name = dict(zip(self._names, self._params))
        listed = [t["name"] for t in tensors]
        missing = sorted(set(by_name) - set(listed))
        extra = sorted(set(listed) - set(by_name))
        if missing or extra:
            raise ValueError(f"the spec and the model differ: parameters not "
                             f"in the spec {missing}, tensors not in the "
                             f"model {extra}")
        for t in tensors:
            shape = list(by_name[t["name"]].shape) or [1]
            if list(t["shape"]) != shape:
                raise ValueError(f"tensor {t['name']!r} is {t['shape']} in "
                                 f"the spec and {shape} in the model")
        self._names = listed
        self._params = [by_name[n] for n in listed]
        return list(tensors), list(groups)

    # The parameters' groups: one spec per group, each parameter's name.
    def _groups(self, groups, defaults):
        specs = [model_spec.group("default", **defaults)]
        of = {n: "default" for n in self._names}
        for k, g in enumerate(groups or []):
            g = dict(g)
            names = g.pop("params")
            unknown = [n for n in names if n not in of]
            if unknown:
                raise KeyError(f"group {k} names parameters the model does "
                               f"not have (or that need no gradient): "
                               f"{unknown}")
            name = g.pop("name", f"group{k}")
            specs.append(model_spec.group(name, **{**defaults, **g}))
            for n in names:
                of[n] = name
        return specs, of

    def _tensors(self, init, init_dir):
        if init == "model":
            self._init_dir = tempfile.mkdtemp(prefix="strata-init-",
                                              dir=init_dir)
            path = os.path.join(self._init_dir, "init.safetensors")
            size = model_spec.write_init_file(
                path, {n: p.detach().numpy()
                       for n, p in zip(self._names, self._params)})
            inits = [{"kind": "file", "file": path, "source": n,
                      "file_bytes": size} for n in self._names]
        elif isinstance(init, dict):
            inits = [init] * len(self._names)
        elif callable(init):
            inits = [init(n, p) for n, p in zip(self._names, self._params)]
        else:
            raise ValueError(f"init {init!r} is neither 'model', a dict nor "
                             "a function")
        return [model_spec.tensor(n, list(p.shape) or [1], self._group_of[n],
                                  it)
                for n, p, it in zip(self._names, self._params, inits)]

    def _hook(self, i):
        def hook(*_):
            if (not self._in_step or self._pushed[i]
                    or self._tainted is not None):
                return
            self._passes[i] += 1
            if self._passes[i] == self._passes_per_step:
                self._push(i)
        return hook

    def _push(self, i):
        p = self._params[i]
        # No gradient reached it this step (an expert no token was routed
        # to): a zero push, without payload. Like torch's optimizers, which
        # skip a parameter whose .grad is None, the servers then leave it
        # and its optimizer state as they were, unless another worker's
        # gradient reached it.
        if p.grad is None or (self._passes[i] == 0 and not p.grad.any()):
            self._pushed[i] = True
            self.session.push_zero(i, priority=i)
            return
        grad = p.grad
        if (grad.dtype != torch.float32 or grad.device.type != "cpu"
                or not grad.is_contiguous()):
            raise TypeError(f"the gradient of {self._names[i]!r} is not "
                            "a contiguous float32 CPU tensor")
        self._pushed[i] = True
        # Later parameters first: backward produces them first, and the
        # next forward needs the first ones first.
        self.session.push(i, grad.detach().numpy().reshape(-1), priority=i)

    def begin(self):
        """Pulls the next step's weights into the parameters and leases its
        samples: the strata.Step, or None once the job is over (the
        parameters then hold the final weights). ElasticSampler calls it."""
        if self._in_step:
            raise RuntimeError("step() the step under way before the next")
        skip = self._skipped()
        with torch.no_grad():
            arrays = [p.detach().numpy().reshape(-1) for p in self._params]
            work = self.session.begin(arrays, skip)
        if work is not None:
            self._in_step = True
            self._pushed = [False] * len(self._params)
            self._passes = [0] * len(self._params)
            self._pulled = set(range(len(self._params))) - set(skip)
            self._used, self._tainted = set(), None
        return work

    def step(self):
        """Pushes what backward has not pushed yet (a parameter no gradient
        reached goes as a zero push: see _push) and waits for the servers
        to take the step.
        True: pushed (a membership change may still have the sampler hand
        it out again: count steps as the sampler hands them out); False: it
        was overtaken and the sampler hands it out again. A gradient that
        cannot be pushed raises, and this worker leaves the job (the others
        redo the step without it)."""
        if not self._in_step:
            raise RuntimeError("no step under way: iterate an ElasticSampler")
        if self._tainted is not None:
            # An expert's pull failed in forward: nothing of the step was
            # pushed; it is handed out again.
            warnings.warn(f"strata: step handed out again: an expert's "
                          f"pull failed ({self._tainted})")
            self._in_step = False
            self._used_last = None  # its retry pulls every expert first
            self.session.abandon()
            return False
        try:
            for i in reversed(range(len(self._params))):
                if not self._pushed[i]:
                    self._push(i)
        except BaseException:
            # Part of the step went out: under BSP it cannot close without
            # the rest. Leave, so that the others redo it without us.
            self._in_step = False
            self.session.abandon()
            self.leave()
            raise
        self._in_step = False
        if self._experts:
            self._used_last = self._used
            pulled = self._pulled.intersection(
                i for idx in self._experts for i in idx)
            self.experts_pulled = (sum(self._params[i].numel()
                                       for i in pulled) /
                                   max(self._expert_floats, 1))
        return self.session.end()

    def zero_grad(self, set_to_none=True):
        """Zeroes the gradients (dropped with set_to_none, unless they live
        in the region shared with the servers: then zeroed in place)."""
        for p in self._params:
            if set_to_none and not self._shared:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    @property
    def grad_norm(self):
        """The last step's gradient norm (with grad_clip; else 0)."""
        return self.session.grad_norm

    @property
    def consistency(self):
        return self.session.consistency

    def leave(self):
        """Leaves the job: the scheduler hands this worker's samples to the
        others."""
        self.session.leave()
        self.close()

    def close(self):
        """Removes the hooks and the init file. The servers read that file
        only when they create chunks: at registration, and when a server
        without a snapshot rolls back to step 0 (then every worker's file
        must be there: keep snapshots)."""
        for _, handle in self._hooks:
            handle.remove()
        self._hooks = []
        if self._init_dir:
            shutil.rmtree(self._init_dir, ignore_errors=True)
            self._init_dir = None


class ElasticSampler:
    """The job's samples, leased step by step from the scheduler's data
    ledger: each iteration yields this worker's indices into a dataset of
    `num_samples` items for one step of `batch_size` (over all workers),
    for `steps` steps, each epoch in its own order under `seed` (the order
    Strata's own data loader uses: strata.shuffled_index). Every sample is
    used once across worker deaths and joins. Usable as a DataLoader's
    batch_sampler with num_workers=0 (a loader that prefetches would lease
    a step before the last one is pushed). With shuffle=False it yields
    the ledger's global sample numbers instead (strata.TokenDataset.batch
    takes them, as C++ workers read their windows). Leaves the job when it
    ends,
    and after SIGTERM at the end of the step under way."""

    def __init__(self, optimizer, num_samples, batch_size, steps, seed=0,
                 shuffle=True):
        self.optimizer = optimizer
        self.shuffle = shuffle
        self.num_samples = int(num_samples)
        self.batch_size = int(batch_size)
        self.steps = int(steps)
        self.seed = int(seed)
        optimizer.session.set_job(self.steps, self.batch_size,
                                  self.num_samples, self.seed)
        self.current = None  # the strata.Step under way

    def __len__(self):
        return self.steps

    def __iter__(self):
        while not _stop.is_set():
            self.current = self.optimizer.begin()
            if self.current is None:
                break
            samples = [g for first, count in self.current.units
                       for g in range(first, first + count)]
            if self.shuffle:
                samples = [_strata.shuffled_index(g, self.num_samples,
                                                  self.seed)
                           for g in samples]
            yield samples
        self.optimizer.leave()
