"""Train the dual encoder's image tower with a contrastive (CLIP) loss against the frozen text tower.

    python -m sim.rewards.train_image_tower --frames synthetic --out assets/vlm/image_tower.pt
    python -m sim.rewards.train_image_tower --frames frames.npz --steps 3000 --out runs/vlm/tower.pt

``--frames``: ``synthetic`` draws fresh captioned frames every step (sim/rewards/synthetic.py);
a ``.npz`` file holds ``frames uint8 [N, H, W, 3]``, ``labels int [N]`` and ``classes`` (the class
name of each label, from ``synthetic.CLASSES``), e.g. simulator camera frames labelled from the
simulator's ground truth (collision, near miss, clear road, off-road); 10% are held out.

The loss is InfoNCE of each frame against the bank of training captions, with every phrasing of
the frame's class a positive: ``-log sum_pos softmax(s * img @ texts^T)`` (``s`` a learned
temperature), the text tower frozen. At the end it reports on held-out frames: the ROC-AUC of
VLM-RL's contrast score (cos(img, negative goal) - cos(img, positive goal), the paper's goal texts,
never trained on) for collision against clear frames, r_CLG's means, and the zero-shot accuracy of
classifying frames with held-out phrasings (``synthetic.HELDOUT_CAPTIONS``). The report is the
last line (JSON) and is saved in the tower file's ``meta``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from covey_common.cli import OneLineArgumentParser
from sim.rewards.dual_encoder import ImageTower, ImageTowerCfg, SentenceTextTower, save_image_tower
from sim.rewards.synthetic import CLASSES, caption_bank, roc_auc, synthetic_frames
from sim.rewards.vision_language import VLMRewardCfg

Sampler = Callable[[int, torch.Generator], tuple[Tensor, Tensor]]


def npz_sampler(path: str | Path, holdout: float = 0.1, seed: int = 0) -> tuple[Sampler, tuple[Tensor, Tensor]]:
    """``(sampler of training batches, held-out (frames, labels))`` from an ``.npz`` of labelled frames."""
    data = np.load(path)
    frames, labels = torch.from_numpy(data["frames"]), torch.from_numpy(data["labels"]).long()
    names = [str(c) for c in data["classes"]]
    unknown = sorted(set(names) - set(CLASSES))
    if unknown:
        raise ValueError(f"{path}: classes {unknown} have no captions; known: {CLASSES}")
    labels = torch.tensor([CLASSES.index(n) for n in names])[labels]  # to synthetic.CLASSES indices
    perm = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    n_test = max(1, int(holdout * len(labels)))
    test, train = perm[:n_test], perm[n_test:]

    def sample(n: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
        idx = train[torch.randint(0, len(train), (n,), generator=g)]
        return frames[idx], labels[idx]

    return sample, (frames[test], labels[test])


def synthetic_sampler(size: int) -> Sampler:
    return lambda n, g: synthetic_frames(n, size=size, generator=g)


def contrastive_loss(img: Tensor, texts: Tensor, text_class: Tensor, labels: Tensor, log_scale: Tensor) -> Tensor:
    """Multi-positive InfoNCE: ``img [B, D]``, ``texts [M, D]``, ``text_class [M]``, ``labels [B]`` -> scalar."""
    logits = log_scale.exp().clamp(max=100.0) * img @ texts.T  # [B, M]
    positive = text_class.unsqueeze(0) == labels.unsqueeze(-1)  # [B, M]
    return (logits.logsumexp(-1) - logits.masked_fill(~positive, -math.inf).logsumexp(-1)).mean()


@torch.no_grad()
def evaluate_tower(tower: ImageTower, text: SentenceTextTower, frames: Tensor, labels: Tensor) -> dict[str, Any]:
    """Held-out scores: contrast ROC-AUC (collision vs clear), r_CLG means, zero-shot accuracies."""
    cfg = VLMRewardCfg()
    img = torch.cat([tower(c) for c in frames.split(256)])
    pos, neg = text([cfg.positive_goal, cfg.negative_goal])
    raw = img @ neg - img @ pos
    clear, coll = labels == CLASSES.index("clear"), labels == CLASSES.index("collision")
    clg = 1.0 - raw.clamp(0.0, cfg.clg_margin) / cfg.clg_margin
    out: dict[str, Any] = {
        "frames": int(len(labels)),
        "auc_collision_vs_clear": roc_auc(raw[coll], raw[clear]),
        "raw_contrast_mean": {c: float(raw[labels == k].mean()) for k, c in enumerate(CLASSES) if (labels == k).any()},
        "clg_mean_clear": float(clg[clear].mean()),
        "clg_mean_collision": float(clg[coll].mean()),
    }
    for name, heldout in (("train_phrasings", False), ("heldout_phrasings", True)):
        texts, owner = caption_bank(heldout)
        sim = img @ text(texts).T  # [N, M]
        per_class = torch.stack([sim[:, owner == k].mean(-1) for k in range(len(CLASSES))], -1)
        out[f"accuracy_{name}"] = float((per_class.argmax(-1) == labels).float().mean())
    return out


def train(
    sampler: Sampler,
    test: tuple[Tensor, Tensor],
    steps: int = 1500,
    batch: int = 128,
    lr: float = 1e-3,
    seed: int = 0,
    tower_cfg: ImageTowerCfg | None = None,
    text_model_dir: str | None = None,
    log: Callable[[str], None] = print,
) -> tuple[ImageTower, dict[str, Any]]:
    """Train a fresh tower for ``steps`` batches; returns it (eval mode) and its held-out report."""
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed + 1)
    text = SentenceTextTower(text_model_dir)
    texts, owner = caption_bank()
    bank = text(texts)  # [M, D], frozen
    tower = ImageTower(tower_cfg)
    log_scale = torch.tensor(math.log(1 / 0.07), requires_grad=True)
    opt = torch.optim.AdamW([*tower.parameters(), log_scale], lr=lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    t0, running = time.perf_counter(), 0.0
    for step in range(1, steps + 1):
        frames, labels = sampler(batch, g)
        loss = contrastive_loss(tower(frames), bank, owner, labels, log_scale)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        running = 0.95 * running + 0.05 * loss.item() if step > 1 else loss.item()
        if step % max(1, steps // 10) == 0 or step == steps:
            log(f"step {step}/{steps}: loss {running:.3f} ({time.perf_counter() - t0:.0f} s)")
    tower.eval().requires_grad_(False)
    report = evaluate_tower(tower, text, *test)
    report.update(steps=steps, batch=batch, lr=lr, seed=seed, train_seconds=round(time.perf_counter() - t0, 1))
    return tower, report


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = OneLineArgumentParser(prog="python -m sim.rewards.train_image_tower", description=__doc__)
    parser.add_argument("--frames", default="synthetic", help="'synthetic' or an .npz of frames, labels, classes")
    parser.add_argument("--out", default="assets/vlm/image_tower.pt")
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--size", type=int, default=64, help="synthetic frame size (px)")
    parser.add_argument("--test-frames", type=int, default=2000, help="held-out synthetic frames")
    parser.add_argument("--text-model-dir", default=None, help="sentence encoder dir (default: the package's)")
    args = parser.parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    if args.frames == "synthetic":
        sampler = synthetic_sampler(args.size)
        test = synthetic_frames(args.test_frames, size=args.size, generator=torch.Generator().manual_seed(10_000))
    else:
        sampler, test = npz_sampler(args.frames, seed=args.seed)
    tower, report = train(sampler, test, args.steps, args.batch, args.lr, args.seed, text_model_dir=args.text_model_dir)
    report["frames_source"] = args.frames
    report["frame_size"] = args.size
    report["command"] = "python -m sim.rewards.train_image_tower " + " ".join(argv or [])
    path = save_image_tower(args.out, tower, report)
    print(f"image tower: {path} ({path.stat().st_size / 1e6:.1f} MB)")
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    import sys

    from covey_common.cli import run_main

    run_main("python -m sim.rewards.train_image_tower", lambda: main(sys.argv[1:]))
