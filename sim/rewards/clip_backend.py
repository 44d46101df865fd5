"""Real CLIP weights as the vision-language backend: a ``transformers`` ``CLIPModel`` from a local directory.

    backend = ClipBackend("/data/weights/clip-vit-large-patch14")   # config.json, weights, tokenizer files
    img = backend.embed_images(frames)        # uint8 [N, H, W, 3] -> [N, D] unit vectors
    txt = backend.embed_texts(["the road is clear with no car accidents"])

OpenAI CLIP and the OpenCLIP LAION models VLM-RL used (ViT-bigG-14) are published in this format
(``save_pretrained``). Nothing is downloaded: ``local_files_only=True``, and a missing directory is an
error naming it. The image preprocessing is CLIP's, written in torch (no torchvision, no
``CLIPProcessor``): shorter side resized to the model's size (bicubic, antialiased), centre crop,
normalisation by the mean/std of the directory's ``preprocessor_config.json`` (OpenAI's otherwise).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)


def preprocess_frames(
    frames: Tensor, size: int, mean: Sequence[float] = OPENAI_MEAN, std: Sequence[float] = OPENAI_STD
) -> Tensor:
    """``uint8 [N, H, W, 3]`` -> CLIP pixel values ``float [N, 3, size, size]``.

    Shorter side to ``size`` (bicubic, antialiased), centre crop to ``size x size``, then ``(x/255 - mean) / std``.
    """
    x = frames.permute(0, 3, 1, 2).float() / 255.0
    h, w = x.shape[-2:]
    scale = size / min(h, w)
    new_h, new_w = max(size, round(h * scale)), max(size, round(w * scale))
    if (new_h, new_w) != (h, w):
        x = F.interpolate(x, size=(new_h, new_w), mode="bicubic", antialias=True, align_corners=False).clamp(0.0, 1.0)
    top, left = (new_h - size) // 2, (new_w - size) // 2
    x = x[..., top : top + size, left : left + size]
    m = torch.tensor(mean, device=x.device).view(1, 3, 1, 1)
    s = torch.tensor(std, device=x.device).view(1, 3, 1, 1)
    return (x - m) / s


def _features(out: object) -> Tensor:
    """``get_*_features`` returns a tensor (transformers 4) or an output whose ``pooler_output`` is it (5)."""
    return out if isinstance(out, Tensor) else out.pooler_output


class ClipBackend:
    """A frozen ``CLIPModel`` and its tokenizer loaded from ``model_dir`` (local files only)."""

    def __init__(self, model_dir: str | Path, device: torch.device | str = "cpu") -> None:
        path = Path(model_dir).expanduser()
        if not (path / "config.json").is_file():
            raise FileNotFoundError(
                f"CLIP weights not found: {path} holds no config.json. Put a transformers CLIPModel there "
                "(CLIPModel.save_pretrained + its tokenizer, e.g. openai/clip-vit-large-patch14 or "
                "laion/CLIP-ViT-bigG-14-laion2B-39B-b160k downloaded on a machine with network), or use backend=dual"
            )
        try:
            from transformers import AutoTokenizer, CLIPModel
        except ImportError as exc:  # pragma: no cover - the vlm extra is not installed
            raise ImportError("the CLIP backend needs transformers: pip install -e '.[vlm]'") from exc
        self.device = torch.device(device)
        self.model = CLIPModel.from_pretrained(str(path), local_files_only=True).to(self.device).eval()
        self.model.requires_grad_(False)
        self.tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        self.size, self.mean, self.std = self._preprocessing(path)

    def _preprocessing(self, path: Path) -> tuple[int, tuple[float, ...], tuple[float, ...]]:
        size = int(self.model.config.vision_config.image_size)
        mean, std = OPENAI_MEAN, OPENAI_STD
        pre = path / "preprocessor_config.json"
        if pre.is_file():
            conf = json.loads(pre.read_text())
            mean = tuple(conf.get("image_mean", mean))
            std = tuple(conf.get("image_std", std))
        return size, mean, std

    @torch.no_grad()
    def embed_images(self, frames: Tensor) -> Tensor:
        """``uint8 [N, H, W, 3]`` -> unit vectors ``[N, D]``."""
        pixels = preprocess_frames(frames.to(self.device), self.size, self.mean, self.std)
        return F.normalize(_features(self.model.get_image_features(pixel_values=pixels)), dim=-1)

    @torch.no_grad()
    def embed_texts(self, texts: Sequence[str]) -> Tensor:
        """``M`` strings -> unit vectors ``[M, D]``."""
        enc = self.tokenizer(list(texts), padding=True, truncation=True, return_tensors="pt").to(self.device)
        return F.normalize(_features(self.model.get_text_features(**enc)), dim=-1)
