"""A distilled reward head: a small network on the policy's own observation (e.g. the BEV mask stack)
regressing the vision-language score, so that the VLM reward is dense (every step) without rendering
camera frames or running the encoder.

    head = RewardHead(inputs=(InputSpec("bev", (48, 48, 6), "uint8", "image"),))
    stats = fit_reward_head(head, {"bev": bev [N, 48, 48, 6]}, scores [N], steps=500)
    head({"bev": bev_batch})          # [B] predicted score (r_CLG or raw contrast, whatever it was fitted on)
    tracking(head, held_out_obs, held_out_scores)   # {"pearson": ..., "mae": ..., "rmse": ...}

The encoders are the policies' (:class:`policies.encoders.ObsEncoder`: normalised vectors, a CNN per
image entry), so any observation layout a task declares works; uint8 images stay uint8 until the encoder.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor, nn

from policies import InputSpec, build_mlp
from policies.encoders import EncoderCfg, ObsEncoder, pick


class RewardHead(nn.Module):
    """Observation entries ``{name: [B, *shape]}`` -> predicted score ``[B]``."""

    def __init__(
        self, inputs: Sequence[InputSpec], encoder: EncoderCfg | None = None, hidden: tuple[int, ...] = (128, 128)
    ) -> None:
        super().__init__()
        self.inputs = tuple(inputs)
        self.encoder = ObsEncoder(self.inputs, encoder or EncoderCfg())
        self.mlp = build_mlp(self.encoder.out_dim, hidden, 1)

    def forward(self, obs: Mapping[str, Tensor]) -> Tensor:
        return self.mlp(self.encoder(pick(obs, self.inputs))).squeeze(-1)


def fit_reward_head(
    head: RewardHead,
    obs: Mapping[str, Tensor],
    scores: Tensor,
    steps: int = 500,
    batch: int = 128,
    lr: float = 1e-3,
    generator: torch.Generator | None = None,
) -> dict[str, float]:
    """Regress ``scores [N]`` from ``obs`` (entry -> ``[N, *shape]``) with an MSE loss; returns the last losses."""
    xs = pick(obs, head.inputs)
    head.encoder.update_normalizers(xs)  # vector entries: the data's mean / std
    opt = torch.optim.Adam(head.parameters(), lr=lr)
    n, running = scores.shape[0], None
    for _ in range(steps):
        idx = torch.randint(0, n, (batch,), generator=generator, device=scores.device)
        loss = (head({s.name: x[idx] for s, x in zip(head.inputs, xs, strict=True)}) - scores[idx]).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        running = loss.item() if running is None else 0.95 * running + 0.05 * loss.item()
    return {"train_mse": float(running or 0.0)}


@torch.no_grad()
def tracking(head: RewardHead, obs: Mapping[str, Tensor], scores: Tensor, chunk: int = 1024) -> dict[str, float]:
    """How well the head tracks ``scores [N]`` on ``obs``: Pearson correlation, mean absolute and RMS error."""
    xs = pick(obs, head.inputs)
    pred = torch.cat(
        [
            head({s.name: x[i : i + chunk] for s, x in zip(head.inputs, xs, strict=True)})
            for i in range(0, len(scores), chunk)
        ]
    )
    p, t = pred.double() - pred.double().mean(), scores.double() - scores.double().mean()
    pearson = float((p * t).sum() / (p.norm() * t.norm()).clamp(min=1e-12))
    err = pred.double() - scores.double()
    return {"pearson": pearson, "mae": float(err.abs().mean()), "rmse": float(err.square().mean().sqrt())}
