"""Policy evaluation: run full episodes in parallel envs and report task metrics with 95% CIs.

    env = sim.make(task_cfg, num_envs=100, seed=0)
    results = run_episodes(env, actor_policy(actors), episodes=100, seed=0, window_s=5.0)
    summary = summarize(results, success_criteria(env.task_name))    # {"pos_err_m": ..., ...}

How an episode is measured (task-generic; the task supplies ``env.step_metrics()``):

- All ``num_envs`` envs reset together with one seed per round (round ``r`` uses
  :func:`round_seed`) and run exactly ``T = env.max_episode_steps`` control steps.
- Metrics are sampled at each control step *before* the action is applied: the state the policy
  acts on, ``s_0 .. s_{T-1}``. Reading before ``step`` means no sample is ever taken from a state
  the env has already auto-reset.
- The per-episode value of a metric is its mean over the last ``W = round(window_s / control_dt)``
  samples (``s_{T-W} .. s_{T-1}``; ``W`` is clipped to ``[1, T]``).
- An episode that terminates at step ``k`` (the step from ``s_{k-1}`` to ``s_k`` raised a
  termination) holds its terminal sample ``s_k`` for the rest of the episode (``info["final_metrics"]``,
  read inside ``step`` before the auto-reset): its window mean mixes its samples with this held
  value, or equals it when it ended before the window began ("its error at termination"; for
  volleyball skills, the outcome of the landing that ended the episode).
- ``terminated_rate``: fraction of episodes terminated (any reason) before the time limit, a crash or a
  task's natural end alike (a volleyball skill's ball landing); the breakdown ``termination[reason]`` is the
  fraction of episodes whose terminal step raised that reason (several may be raised at once, so they can
  sum to more than ``terminated_rate``). Reports written before this name said ``crash_rate``.
- ``success_rate``: fraction of episodes that did not terminate and whose window mean of every
  metric in the task's ``success_criteria`` (its env class) is below its threshold (cable_load: mean
  position error < 0.1 m and mean orientation error < 10 deg over the last ``window_s``).
- ``episode_return``: sum over the survived steps of the step reward averaged over agents and
  groups; ``survival_s``: time until termination (the full episode length when none).
- Pooled outcomes: a task whose ``info["episode"]`` carries ``metrics/<x>_success`` (successes over
  the ended episodes' attempts) beside ``metrics/<x>_attempts`` (attempts per ended episode), e.g.
  drone_volleyball's skills scored in matches, gets ``<x>_success_pooled``: successes over attempts
  summed over every episode that ends while a round runs (the envs' later episodes included), with a
  Wilson interval over the attempts, and ``<x>_attempts_pooled``, their number.

Confidence intervals (95%): ``mean +- 1.96 sd / sqrt(n)`` (sample sd, ``n - 1``) for metrics,
Wilson score intervals for rates. Everything runs batched on the env's device under
``torch.inference_mode()``; per-episode values move to the CPU once per round.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from covey_common.onnx import OnnxRunner, runtime_session, session_metadata
from sim.core.env import MultiAgentEnv, Obs
from training.rollout import restart_memory, rollout

Policy = Callable[[Obs], dict[str, Tensor]]
StepHook = Callable[[int, Tensor], None]

Z95 = 1.959963984540054  # two-sided 95% quantile of the standard normal
POLICY_ENTRY = "policy"  # the observation entry an actor reads
_ROUND_SEED_STRIDE = 1_000_003


def success_criteria(task: str | MultiAgentEnv | type[MultiAgentEnv]) -> dict[str, float]:
    """The task's success thresholds (its env class's ``success_criteria``): window-mean metric name
    -> upper bound; success is every one below its bound and no termination (``{}``: not defined).
    ``task``: a task name, an env or an env class."""
    if isinstance(task, str):
        from sim.core.registry import task_class

        task = task_class(task)
    cls = task if isinstance(task, type) else type(task)
    return dict(cls.success_criteria)


# --------------------------------------------------------------------------- confidence intervals
def mean_ci95(values: Tensor | np.ndarray | list[float]) -> tuple[float, float | None, float | None]:
    """``(mean, low, high)`` of a normal-approximation 95% interval ``mean +- 1.96 sd / sqrt(n)``.

    ``sd`` is the sample standard deviation (``n - 1``); with fewer than two values the interval
    is undefined and ``low``/``high`` are ``None``.
    """
    x = np.asarray(values.cpu() if isinstance(values, Tensor) else values, dtype=np.float64).reshape(-1)
    if x.size == 0:
        raise ValueError("mean_ci95 needs at least one value")
    mean = float(x.mean())
    if x.size < 2:
        return mean, None, None
    half = Z95 * float(x.std(ddof=1)) / math.sqrt(x.size)
    return mean, mean - half, mean + half


def wilson_ci95(successes: int, n: int) -> tuple[float, float, float]:
    """``(rate, low, high)``: the rate ``k / n`` and its 95% Wilson score interval.

    ``centre = (p + z^2 / 2n) / (1 + z^2 / n)``, ``half = z / (1 + z^2 / n) sqrt(p (1 - p) / n + z^2 / 4n^2)``;
    unlike ``p +- z sqrt(p (1 - p) / n)`` it stays inside [0, 1] and is not empty at ``p = 0`` or 1.
    """
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n and n >= 1, got {successes}/{n}")
    p, z2 = successes / n, Z95 * Z95
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = Z95 / denom * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    # The bounds are exactly 0 at k = 0 and 1 at k = n; clip the round-off there.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return p, low, high


# --------------------------------------------------------------------------- policies
def zero_policy(env: MultiAgentEnv) -> Policy:
    """The zero-action baseline: every action 0 (cable_load: the controller holds the hover)."""
    zeros = env.zero_actions()
    return lambda obs: zeros


def prior_policy(env: MultiAgentEnv, entry: str = POLICY_ENTRY) -> Policy | None:
    """The task's linear action prior alone (``GroupSpec.action_prior``, no learned residual), or
    ``None`` when no group has one: the baseline a residual policy has to beat."""
    if not any(g.action_prior for g in env.spec.groups.values()):
        return None
    priors = {name: g.action_prior_matrix().to(env.device) for name, g in env.spec.groups.items()}
    return lambda obs: {group: (obs[group][entry] @ p).clamp(-1.0, 1.0) for group, p in priors.items()}


class ActorsPolicy:
    """Deterministic actors, one per group: ``obs[group] -> [E, A, act_dim]`` (each actor picks its
    entries from the group's observation dict). ``reset(done)`` restarts recurrent actors' memory (the rollout:
    every env's at the start of a round, an env's where its episode ended)."""

    def __init__(self, actors: Mapping[str, Any]) -> None:
        self.actors = dict(actors)

    def __call__(self, obs: Obs) -> dict[str, Tensor]:
        return {group: actor(obs[group]) for group, actor in self.actors.items()}

    def reset(self, done: Tensor | None = None) -> None:
        """Restart the recurrent actors' state of the envs ``done [E]`` (None: every env's)."""
        restart_memory(self.actors, done)


def actor_policy(actors: Mapping[str, Any], env: MultiAgentEnv) -> Policy:
    """The deterministic actors of every group of ``env`` as one :class:`ActorsPolicy`."""
    if set(actors) != set(env.spec.groups):
        raise ValueError(f"the policy has actors for groups {sorted(actors)}, the env has {sorted(env.spec.groups)}")
    for actor in actors.values():
        actor.eval()
    return ActorsPolicy(actors)


def onnx_session(path: str | Path) -> Any:
    """An onnxruntime CPU session for ``path`` (one intra-op thread, so results are reproducible)."""
    try:
        return runtime_session(path)
    except ImportError as err:
        raise ImportError("evaluating an ONNX model needs onnxruntime: pip install -e '.[onnx]'") from err


class OnnxPolicy:
    """An exported actor (``covey-onnx-v2``) run by onnxruntime on one group of ``env``
    (:class:`covey_common.onnx.OnnxRunner`).

    Inputs are the model's observation entries (by name, from ``obs[group]``) and, for a recurrent
    model, its state (``h_in``...; zeros after :meth:`reset`, then fed back from ``h_out``). A
    shared-weights model takes each entry as ``[E * A, *shape]``; a per-agent one as ``[E, A, *shape]``.
    """

    def __init__(self, session: Any, env: MultiAgentEnv, group: str | None = None) -> None:
        groups = env.spec.groups
        if len(groups) != 1:
            raise ValueError(f"one ONNX model drives one group; the env has groups {sorted(groups)}")
        group = group if group is not None else next(iter(groups))
        if group not in groups:
            raise ValueError(f"the ONNX model's group {group!r} is not a group of the env ({sorted(groups)})")
        self.runner = runner = OnnxRunner(session, session_metadata(session, strict=False))
        self.entries = runner.entries
        spec = groups[group]
        unknown = [n for n in self.entries if n not in spec.observations]
        if unknown or "action" not in runner.output_names:
            raise ValueError(
                f"the ONNX model's inputs {unknown} are not observation entries of group {group!r} "
                f"({sorted(spec.observations)}), or it has no 'action' output: re-export it with export.py"
            )
        first = next(i for i in session.get_inputs() if i.name == self.entries[0])
        self.per_agent = len(first.shape) == len(spec.observations[self.entries[0]].shape) + 2
        self.session, self.env, self.group, self.spec = session, env, group, spec

    def reset(self, done: Tensor | None = None) -> None:
        """Zero the recurrent state of the envs ``done [E]`` (bool; None: every env's)."""
        if done is None:
            self.runner.reset()
        elif self.runner.memory is not None:
            keep = (~done).cpu().numpy()[:, None]  # rows are env-major in both layouts ([E, A] and [E * A])
            self.runner.memory = [
                np.where(keep, m.reshape(keep.shape[0], -1), 0).astype(m.dtype, copy=False).reshape(m.shape)
                for m in self.runner.memory
            ]

    def __call__(self, obs: Obs) -> dict[str, Tensor]:
        xs = {n: obs[self.group][n] for n in self.entries}
        e, a = next(iter(xs.values())).shape[:2]
        lead = (e, a) if self.per_agent else (e * a,)
        feed = {n: np.ascontiguousarray(x.detach().cpu().numpy().reshape(*lead, *x.shape[2:])) for n, x in xs.items()}
        (action,) = self.runner.run(feed, lead)
        y = torch.from_numpy(np.asarray(action, dtype=np.float32))
        return {self.group: y.reshape(e, a, self.spec.action_dim).to(self.env.device)}


def onnx_policy(session: Any, env: MultiAgentEnv, group: str | None = None) -> Policy:
    """An exported actor run by onnxruntime (:class:`OnnxPolicy`)."""
    return OnnxPolicy(session, env, group)


# --------------------------------------------------------------------------- episode runner
@dataclass
class EpisodeResults:
    """Per-episode outcomes of one evaluation run; every tensor is on the CPU with ``n = episodes`` rows."""

    metrics: dict[str, Tensor]  # name -> float64 [n], window mean (units in the name)
    terminated: Tensor  # bool [n], terminated before the time limit
    reasons: dict[str, Tensor]  # reason -> bool [n], raised at the terminal step
    returns: Tensor  # float64 [n], summed agent-mean reward over the survived steps
    survival_s: Tensor  # float64 [n], time until termination, else the episode length (s)
    window_steps: int  # W, samples per window
    episode_steps: int  # T, control steps per episode
    pooled: dict[str, tuple[float, float]] | None = None  # x -> (successes, attempts) over the rounds' episodes

    @property
    def episodes(self) -> int:
        return int(self.terminated.numel())


def round_seed(seed: int, round_idx: int) -> int:
    """The env seed of round ``round_idx`` of a run with ``seed`` (rounds of one run never share it)."""
    return seed + _ROUND_SEED_STRIDE * round_idx


def window_steps(env: MultiAgentEnv, window_s: float) -> int:
    """``W = round(window_s / control_dt)`` clipped to ``[1, max_episode_steps]``."""
    if window_s <= 0:
        raise ValueError(f"window_s must be > 0, got {window_s}")
    return min(max(1, round(window_s / env.spec.control_dt)), env.max_episode_steps)


def run_episodes(
    env: MultiAgentEnv,
    policy: Policy,
    episodes: int,
    seed: int,
    window_s: float = 5.0,
    on_step: StepHook | None = None,
) -> EpisodeResults:
    """Run ``episodes`` full episodes of ``policy`` in rounds of ``env.num_envs`` parallel envs.

    Args:
        env: the env to run (its config is the evaluation config); it is reset here.
        policy: ``obs -> actions`` for every group (``actions[group] [E, A, act_dim]``).
        episodes: number of episodes; the last round's surplus envs run but are not counted.
        seed: round ``r`` resets the env with ``round_seed(seed, r)``.
        window_s: length (s) of the final window the per-episode metrics average over.
        on_step: ``on_step(t, alive [E] bool)`` before each step of round 0 (e.g. to draw a frame).

    See the module docstring for how samples, windows and terminated episodes are counted.
    """
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    steps, win = env.max_episode_steps, window_steps(env, window_s)
    chunks: list[dict[str, Any]] = []
    pooled: dict[str, tuple[float, float]] = {}
    with torch.inference_mode():
        for r in range(math.ceil(episodes / env.num_envs)):
            keep = min(env.num_envs, episodes - r * env.num_envs)
            out = _run_round(env, policy, round_seed(seed, r), steps, win, on_step if r == 0 else None)
            for name, (won, tried) in out.pop("pooled").items():  # every env's episodes, the surplus envs' too
                old = pooled.get(name, (0.0, 0.0))
                pooled[name] = (old[0] + won, old[1] + tried)
            chunks.append(_to_cpu(out, keep))
    cat = lambda key: torch.cat([c[key] for c in chunks])  # noqa: E731
    return EpisodeResults(
        metrics={k: torch.cat([c["metrics"][k] for c in chunks]) for k in chunks[0]["metrics"]},
        terminated=cat("terminated"),
        reasons={k: torch.cat([c["reasons"][k] for c in chunks]) for k in chunks[0]["reasons"]},
        returns=cat("returns"),
        survival_s=cat("length").double() * env.spec.control_dt,
        window_steps=win,
        episode_steps=steps,
        pooled=pooled,
    )


def _run_round(
    env: MultiAgentEnv, policy: Policy, seed: int, steps: int, win: int, on_step: StepHook | None
) -> dict[str, Any]:
    """One round: all envs from reset for ``steps`` control steps; window sums on the env device."""
    dev, n = env.device, env.num_envs
    alive = torch.ones(n, dtype=torch.bool, device=dev)
    terminated = torch.zeros(n, dtype=torch.bool, device=dev)
    length = torch.zeros(n, dtype=torch.long, device=dev)
    returns = torch.zeros(n, device=dev)
    last: dict[str, Tensor] = {}  # latest sample of each metric, held after termination
    window_sum: dict[str, Tensor] = {}
    reasons: dict[str, Tensor] = {}
    pooled: dict[str, list[Tensor]] = {}  # x -> [successes, attempts], summed on the device

    def sample(t: int, obs: Obs) -> None:  # the state the policy acts on, before the step
        for key, val in env.step_metrics().items():
            last[key] = torch.where(alive, val, last[key]) if key in last else val.clone()
            if t >= steps - win:
                window_sum[key] = window_sum.get(key, 0.0) + last[key]
        if on_step is not None:
            on_step(t, alive)

    # A recurrent policy starts every round from a zero state, an env's again where its episode ended (its later
    # episodes count in the pooled outcomes).
    memory = policy if callable(getattr(policy, "reset", None)) else None
    for s in rollout(env, policy, steps, seed=seed, memory=memory, before_step=sample):
        # Reward averaged over agents, then groups (as the env's episode return).
        step_reward = torch.stack([rew.mean(-1) for rew in s.reward.values()]).mean(0)
        returns += torch.where(alive, step_reward, 0.0)
        length += alive.long()
        ended = alive & s.terminated
        terminated |= ended
        for key, val in s.info.get("final_metrics", {}).items():
            last[key] = torch.where(ended, val, last[key])
        for key, flag in s.info["termination_reasons"].items():
            reasons[key] = reasons.get(key, torch.zeros_like(ended)) | (flag & ended)
        if "episode" in s.info:
            _pool_outcomes(pooled, s.info["episode"])
        alive = alive & ~s.terminated
        if s.t % 100 == 99 and not bool(alive.any()):  # every episode over: the held samples fill the window
            remaining = steps - max(s.t + 1, steps - win)
            for key in last:
                window_sum[key] = window_sum.get(key, 0.0) + last[key] * max(remaining, 0)
            break
    metrics = {key: val / win for key, val in window_sum.items()}
    return {
        "metrics": metrics,
        "terminated": terminated,
        "reasons": reasons,
        "returns": returns,
        "length": length,
        "pooled": {k: (float(v[0]), float(v[1])) for k, v in pooled.items()},
    }


def _pool_outcomes(pooled: dict[str, list[Tensor]], episode: Mapping[str, Tensor]) -> None:
    """Add the successes and attempts of this step's ended episodes (``info["episode"]``: means over ``count``
    episodes) to ``pooled``; see the module docstring."""
    for key, rate in episode.items():
        if not (key.startswith("metrics/") and key.endswith("_success")):
            continue
        name = key[len("metrics/") : -len("_success")]
        per_episode = episode.get(f"metrics/{name}_attempts")
        if per_episode is None:
            continue
        tried = per_episode * episode["count"]
        old = pooled.get(name)
        pooled[name] = [rate * tried, tried] if old is None else [old[0] + rate * tried, old[1] + tried]


def _to_cpu(out: dict[str, Any], keep: int) -> dict[str, Any]:
    def conv(x: Tensor) -> Tensor:
        x = x[:keep].cpu()
        return x.double() if x.is_floating_point() else x

    return {k: {kk: conv(vv) for kk, vv in v.items()} if isinstance(v, dict) else conv(v) for k, v in out.items()}


# --------------------------------------------------------------------------- summaries
def summarize(results: EpisodeResults, success: Mapping[str, float]) -> dict[str, Any]:
    """Metrics with 95% CIs: ``{name: mean, name + "_ci95": [low, high], ...}`` (JSON-ready floats).

    Keys: every step metric, ``success_rate`` (only when ``success`` names thresholds),
    ``terminated_rate``, ``termination`` (reason -> rate), ``episode_return``, ``survival_s``, and the pooled
    outcomes ``<x>_success_pooled`` / ``<x>_attempts_pooled`` (module docstring) where the task reports them. A metric
    whose every value is 0 or 1 (e.g. a skill's success) gets a Wilson interval.
    """
    n = results.episodes
    out: dict[str, Any] = {}

    def put(name: str, stat: tuple[float, float | None, float | None]) -> None:
        out[name] = _r(stat[0])
        out[f"{name}_ci95"] = [_r(stat[1]), _r(stat[2])]

    for name, vals in results.metrics.items():
        v = torch.as_tensor(vals)
        if v.numel() and bool(((v == 0) | (v == 1)).all()):  # a yes/no outcome: Wilson, not a t interval
            put(name, wilson_ci95(int(v.sum()), v.numel()))  # (256 of 256 gives [0.985, 1], not [1, 1])
        else:
            put(name, mean_ci95(vals))
    if success:
        missing = sorted(set(success) - set(results.metrics))
        if missing:
            raise ValueError(f"success thresholds name metrics {missing} the task does not report")
        ok = ~results.terminated
        for name, threshold in success.items():
            ok &= results.metrics[name] < threshold
        put("success_rate", wilson_ci95(int(ok.sum()), n))
    put("terminated_rate", wilson_ci95(int(results.terminated.sum()), n))
    out["termination"] = {key: _r(flag.double().mean().item()) for key, flag in results.reasons.items()}
    put("episode_return", mean_ci95(results.returns))
    put("survival_s", mean_ci95(results.survival_s))
    for name, (won, tried) in sorted((results.pooled or {}).items()):
        if tried > 0:  # counts from means: round to whole outcomes
            put(f"{name}_success_pooled", wilson_ci95(round(won), round(tried)))
            out[f"{name}_attempts_pooled"] = round(tried)
    out["episodes"] = n
    return out


def _r(x: float | None) -> float | None:
    """Round for the report: 6 significant digits, stable text across runs."""
    return None if x is None else float(f"{x:.6g}")


def format_table(columns: Mapping[str, Mapping[str, Any]]) -> str:
    """A readable side-by-side table, one column per run (e.g. ``{"policy": s, "zero baseline": b}``)."""
    names: list[str] = []
    for summary in columns.values():
        names += [k for k, v in summary.items() if k + "_ci95" in summary and k not in names]
    reasons = sorted({r for s in columns.values() for r in s.get("termination", {})})

    def cell(summary: Mapping[str, Any], key: str) -> str:
        if key not in summary:
            return "-"
        lo, hi = summary[f"{key}_ci95"]
        ci = "" if lo is None else f" [{lo:.4g}, {hi:.4g}]"
        return f"{summary[key]:.4g}{ci}"

    rows = [(name, [cell(s, name) for s in columns.values()]) for name in names]
    rows += [(f"  termination/{r}", [f"{s['termination'].get(r, 0.0):.4g}" for s in columns.values()]) for r in reasons]
    head = ["metric (mean [95% CI])", *columns]
    widths = [max(len(head[0]), *(len(r[0]) for r in rows))]
    widths += [max(len(h), *(len(r[1][i]) for r in rows)) for i, h in enumerate(head[1:])]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()  # noqa: E731
    return "\n".join([line(head), line(["-" * w for w in widths]), *(line([r[0], *r[1]]) for r in rows)])
