"""Data-parallel PPO over processes: ``torchrun --nproc_per_node=N train.py task=... distributed=true``.

torchrun starts N copies of train.py and gives each ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``MASTER_ADDR`` and ``MASTER_PORT``; :func:`init` joins them into one process group (Gloo on CPU,
NCCL on cuda, each rank on ``cuda:<LOCAL_RANK>``). Multi-node needs nothing here: torchrun's own
rendezvous (``--nnodes=2 --node_rank=i --rdzv_endpoint=host:port``) sets the same variables.

What each rank does (training/runner.py, training/ppo.py):

- steps its own ``num_envs`` envs seeded ``seed + rank`` (a run's env steps count every rank's);
- starts from rank 0's weights and normaliser statistics (:meth:`Distributed.broadcast_module`);
- after every minibatch's ``backward`` averages the gradients over ranks in one flat all-reduce,
  which also carries the minibatch's loss statistics, so the KL that adapts the learning rate (and
  every logged loss) is the mean over ranks and the lr stays identical on all of them
  (:meth:`Distributed.average_gradients`); PPO's update calls actor-critic methods other than
  ``forward``, so DDP's forward hooks would not see them: an explicit all-reduce is the same maths;
- merges observation and value normaliser statistics exactly: every :class:`~policies.RunningNorm`
  gets :func:`all_reduce_sum` as its ``batch_reduce`` and merges the batch of all ranks (count,
  mean and M2 of the union, not an average of means), so the statistics stay identical;
- advantages are normalised per rank (as rsl_rl's multi-GPU PPO);
- only rank 0 makes the run directory, logs (CSV, wandb, progress bar), evaluates and writes
  checkpoints; ``latest.pt`` also holds every rank's env snapshot, random streams and recurrent
  rollout state (``rank_states``, gathered to rank 0), so a resume with the same number of ranks
  loads ``latest.pt`` on every rank and continues exactly; with another number of ranks (or from a
  single-process checkpoint) the envs restart their episodes and each rank's streams are re-seeded
  from ``seed + rank`` and the iteration (the resume says so in one line).

``distributed=false`` (the default) never imports this module's process-group code paths: the
single-process run is op for op what it was.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from policies.normalizer import RunningNorm


def launched_by_torchrun() -> bool:
    """True when torchrun's environment variables are set (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``)."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))


def all_reduce_sum(x: Tensor) -> Tensor:
    """Sum of ``x`` over ranks (a new tensor; ``x`` unchanged). The normalisers' ``batch_reduce``."""
    out = x.clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out


class Distributed:
    """This process's place in the group and the collective operations the trainer needs."""

    def __init__(self, rank: int, world_size: int, local_rank: int) -> None:
        self.rank, self.world_size, self.local_rank = rank, world_size, local_rank

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that logs, evaluates and writes checkpoints."""
        return self.rank == 0

    def device(self, device: torch.device) -> torch.device:
        """The device of this rank: ``cuda:<LOCAL_RANK>`` when ``device`` is cuda, else ``device``."""
        if device.type == "cuda":
            return torch.device("cuda", self.local_rank)
        return device

    # ----------------------------------------------------------------- model state
    @torch.no_grad()
    def broadcast_module(self, module: nn.Module) -> None:
        """Copy rank 0's parameters and buffers (normaliser statistics included) to every rank, in place."""
        for tensor in module.state_dict().values():  # shares storage with the parameters and buffers
            if tensor.numel() > 0:
                dist.broadcast(tensor, src=0)

    @staticmethod
    def attach_normalizers(module: nn.Module) -> int:
        """Make every :class:`RunningNorm` in ``module`` merge its batches over ranks; returns how many."""
        norms = [m for m in module.modules() if isinstance(m, RunningNorm)]
        for norm in norms:
            norm.batch_reduce = all_reduce_sum
        return len(norms)

    @torch.no_grad()
    def average_gradients(self, params: Sequence[nn.Parameter], stats: dict[str, float]) -> dict[str, float]:
        """Average ``params``' gradients and the float ``stats`` over ranks in one all-reduce.

        A parameter without a gradient keeps none (every rank runs the same graph, so it has none on
        any rank, and Adam skips it as in one process). Returns the rank-mean of ``stats`` (same keys).
        """
        params = [p for p in params if p.grad is not None]
        grads = [p.grad for p in params]
        device = grads[0].device if grads else self._collective_device()
        keys = sorted(stats)
        extra = torch.tensor([stats[k] for k in keys], dtype=torch.float32, device=device)
        flat = torch.cat([*(g.reshape(-1).float() for g in grads), extra])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        flat /= self.world_size
        offset = 0
        for p, g in zip(params, grads, strict=True):
            n = g.numel()
            p.grad = flat[offset : offset + n].view_as(g).to(g.dtype).clone()
            offset += n
        return {k: float(v) for k, v in zip(keys, flat[offset:].tolist(), strict=True)}

    # ----------------------------------------------------------------- control flow
    def any(self, *flags: bool) -> tuple[bool, ...]:
        """Each flag OR-ed over ranks (a stop request or a wall-clock limit seen by one rank stops all)."""
        t = torch.tensor([float(f) for f in flags], device=self._collective_device())
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return tuple(bool(v) for v in t.tolist())

    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank (a run directory path)."""
        box = [obj if self.is_main else None]
        dist.broadcast_object_list(box, src=0, device=self._collective_device())
        return box[0]

    def gather_object(self, obj: Any) -> list[Any] | None:
        """Every rank's picklable ``obj`` in rank order on rank 0; ``None`` on the others."""
        out: list[Any] | None = [None] * self.world_size if self.is_main else None
        dist.gather_object(obj, out, dst=0)
        return out

    def barrier(self) -> None:
        dist.barrier()

    def _collective_device(self) -> torch.device:
        return torch.device("cuda", self.local_rank) if dist.get_backend() == "nccl" else torch.device("cpu")


_CURRENT: Distributed | None = None


def init(device: torch.device | str = "cpu", timeout_s: float = 1800.0) -> Distributed:
    """Join the process group torchrun describes (idempotent); Gloo for CPU, NCCL for cuda.

    Raises:
        RuntimeError: not started by torchrun (``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` missing).
    """
    global _CURRENT
    if _CURRENT is not None:
        return _CURRENT
    if not launched_by_torchrun():
        raise RuntimeError(
            "distributed=true needs torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK): "
            "torchrun --nproc_per_node=N train.py task=... distributed=true"
        )
    rank, world, local = (int(os.environ[k]) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
    cuda = torch.device(device).type == "cuda"
    if cuda:
        torch.cuda.set_device(local)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(seconds=timeout_s))
    _CURRENT = Distributed(rank, world, local)
    return _CURRENT


def shutdown() -> None:
    """Leave the process group (end of train.py). Every rank waits for the others first: a rank that exits
    with Gloo's threads still running aborts ("terminate called without an active exception")."""
    global _CURRENT
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    _CURRENT = None
