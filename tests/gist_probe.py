"""Gist probe: how well does a small CNN read the loop count N off a thumbnail?

At 64 px a 3 px stroke is a fifth of a pixel and nearby crossings merge, so
nothing can be traced: whatever a network reads there is the gist of the
image (how big the closed shapes are, how they sit together). This probe
trains a small convolutional network on thumbnails of one dataset and tests
it once on thumbnails of another (a different seed), so a benchmark score can
be set against what reading the gist alone already reaches.

    python tests/gist_probe.py TRAIN_DIR TEST_DIR --sizes 64 128 --runs 3 --json probe.json
    python tests/gist_probe.py TRAIN_DIR TEST_DIR --sizes 64 --runs 1 --control-runs 0 --max-exact 0.45

Method, per thumbnail size and run:

* thumbnail: the image in grey, box-filtered down to SIZE x SIZE, as ink
  (1 - grey / 255), standardised by the training thumbnails' mean and spread.
* network: five blocks of 3x3 convolution (16, 32, 64, 64, 64 channels),
  batch norm, ReLU and 2x2 max-pooling, then global average pooling and a
  linear layer over the training set's counts (about 98k weights).
* training: AdamW (learning rate 2e-3, weight decay 1e-4), batches of 64,
  each image turned by a random one of the square's 8 symmetries (flips and
  quarter turns cannot change N); a stratified tenth of the training images
  is held out, the learning rate halves when its loss stalls for 3 epochs,
  and training stops when it has not improved for PATIENCE epochs (after at
  least MIN_EPOCHS, at most --max-epochs); the weights of the best held-out
  loss are kept.
* test: the mean softmax over the 8 symmetries of each test thumbnail; the
  most likely count is the answer. Exact, within-one, mean absolute error,
  per-N accuracy and the confusion matrix are reported.
* control: the same pipeline trained on shuffled training labels; it should
  land near chance, which shows the probe cannot learn N from anything but
  the images.

Runs differ in their seed ([--seed, run]) for the network's initial weights,
the holdout split and the batches. The gate (--max-exact, --max-within)
reads the mean over runs, because one run moves by several points.

Exit status: 0, 1 when the gate is beaten, 2 on bad input (one line).
Needs PyTorch (CPU), which tests/requirements.txt installs.
"""

from __future__ import annotations

import importlib.util
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dataset_records import (  # noqa: E402  (a script beside its helper, not a package)
    DatasetInputError,
    OneLineParser,
    missing_test_package,
    readable_image,
)
from shortcuts import chance_rates, read_annotations  # noqa: E402

CHANNELS = (16, 32, 64, 64, 64)  # one conv block each; each halves the side
BATCH = 64
EVAL_BATCH = 256  # images per forward pass when only scoring, so memory does not grow with the test set
LEARNING_RATE = 2e-3
WEIGHT_DECAY = 1e-4
HOLDOUT = 0.1  # share of the training images held out for early stopping
MIN_EPOCHS = 20
PATIENCE = 8  # epochs without a better held-out loss before stopping
SYMMETRIES = 8  # the square's dihedral group: 4 quarter turns, each with and without a flip


# ---------------------------------------------------------------------------
# Thumbnails


def load_thumbnails(path: Path, sizes: tuple[int, ...]) -> list[np.ndarray]:
    """The image at path as ink thumbnails, one (size, size) float32 array per size."""
    with readable_image(path):
        with Image.open(path) as image:
            grey = image.convert("L")
    return [1.0 - np.asarray(grey.resize((size, size), Image.Resampling.BOX), np.float32) / 255.0
            for size in sizes]


def load_all(paths: list[Path], sizes: tuple[int, ...], workers: int) -> dict[int, np.ndarray]:
    """{size: (len(paths), size, size) float32} in path order; --workers 1 runs without a pool."""
    jobs = [(path, sizes) for path in paths]
    if workers == 1:
        thumbs = [load_thumbnails(*job) for job in jobs]
    else:
        with multiprocessing.Pool(workers) as pool:
            thumbs = pool.starmap(load_thumbnails, jobs, chunksize=16)
    return {size: np.stack([per_image[k] for per_image in thumbs]) for k, size in enumerate(sizes)}


# ---------------------------------------------------------------------------
# Network and training (torch is imported by main, after the one-line check that it is installed)


def build_network(classes: int):
    import torch.nn as nn

    layers, width = [], 1
    for channels in CHANNELS:
        layers += [nn.Conv2d(width, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels),
                   nn.ReLU(inplace=True), nn.MaxPool2d(2)]
        width = channels
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, classes))


def dihedral(batch, k: int):
    """Symmetry k (0..7) of the square applied to a (B, 1, S, S) batch: k % 4 quarter turns, flipped if k >= 4."""
    import torch

    turned = torch.rot90(batch, k % 4, dims=(2, 3))
    return torch.flip(turned, dims=(3,)) if k >= 4 else turned


def random_symmetries(batch, rng: np.random.Generator):
    """Each image of the batch turned by its own random symmetry."""
    import torch

    choice = rng.integers(0, SYMMETRIES, len(batch))
    out = torch.empty_like(batch)
    for k in np.unique(choice):
        rows = torch.from_numpy(np.flatnonzero(choice == k))
        out[rows] = dihedral(batch[rows], int(k))
    return out


def stratified_holdout(labels: np.ndarray, share: float, rng: np.random.Generator) -> np.ndarray:
    """A boolean mask holding out `share` of each class (at least one image of a class with two or more)."""
    held = np.zeros(len(labels), bool)
    for value in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == value))
        if len(members) >= 2:
            held[members[:max(1, round(share * len(members)))]] = True
    return held


def mean_loss(network, x, y) -> float:
    import torch
    import torch.nn.functional as F

    network.eval()
    with torch.no_grad():
        losses = [F.cross_entropy(network(x[i:i + EVAL_BATCH]), y[i:i + EVAL_BATCH], reduction="sum").item()
                  for i in range(0, len(x), EVAL_BATCH)]
    return sum(losses) / len(x)


def train(x_train: np.ndarray, y_train: np.ndarray, classes: int, max_epochs: int, rng: np.random.Generator):
    """A trained network (best held-out loss) and the epochs it ran; y_train holds class indices."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(int(rng.integers(2**31)))
    held = stratified_holdout(y_train, HOLDOUT, rng)
    x = torch.from_numpy(x_train[:, None])
    y = torch.from_numpy(y_train.astype(np.int64))
    x_fit, y_fit, x_held, y_held = x[~held], y[~held], x[held], y[held]
    network = build_network(classes)
    optimiser = torch.optim.AdamW(network.parameters(), lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimiser, factor=0.5, patience=3)
    best_loss, best_state, since_best, epoch = float("inf"), None, 0, 0
    for epoch in range(1, max_epochs + 1):
        network.train()
        order = torch.from_numpy(rng.permutation(len(x_fit)))
        for start in range(0, len(order), BATCH):
            rows = order[start:start + BATCH]
            if len(rows) < 2:  # batch norm needs two images
                continue
            loss = F.cross_entropy(network(random_symmetries(x_fit[rows], rng)), y_fit[rows])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
        held_loss = mean_loss(network, x_held, y_held)
        scheduler.step(held_loss)
        if held_loss < best_loss:
            best_loss, since_best = held_loss, 0
            best_state = {name: value.clone() for name, value in network.state_dict().items()}
        else:
            since_best += 1
        if epoch >= MIN_EPOCHS and since_best >= PATIENCE:
            break
    network.load_state_dict(best_state)
    return network, epoch


def predict(network, x_test: np.ndarray) -> np.ndarray:
    """Class indices from the softmax averaged over the 8 symmetries of each thumbnail."""
    import torch

    network.eval()
    x = torch.from_numpy(x_test[:, None])
    with torch.no_grad():
        probabilities = torch.cat([sum(torch.softmax(network(dihedral(x[i:i + EVAL_BATCH], k)), dim=1)
                                       for k in range(SYMMETRIES)) for i in range(0, len(x), EVAL_BATCH)])
    return probabilities.argmax(dim=1).numpy()


# ---------------------------------------------------------------------------
# One probe and the report


def score_predictions(predicted: np.ndarray, truth: np.ndarray, classes: np.ndarray) -> dict:
    """Exact, within-one, mean absolute error, per-N accuracy and the confusion matrix (rows: truth)."""
    confusion = [[int(np.sum((truth == t) & (predicted == p))) for p in classes] for t in classes]
    return {
        "exact": float(np.mean(predicted == truth)),
        "within_one": float(np.mean(np.abs(predicted - truth) <= 1)),
        "mae": float(np.mean(np.abs(predicted - truth))),
        "per_n": {str(n): float(np.mean(predicted[truth == n] == n)) for n in classes if np.any(truth == n)},
        "confusion": confusion,
    }


def probe(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, test_y: np.ndarray,
          classes: np.ndarray, max_epochs: int, seed: int, run: int, shuffle: bool) -> dict:
    """Train on (train_x, train_y), test once on test_x; labels shuffled first when `shuffle`."""
    rng = np.random.default_rng([seed, run, int(shuffle)])
    labels = rng.permutation(train_y) if shuffle else train_y
    mean, spread = float(train_x.mean()), float(train_x.std()) or 1.0
    started = time.perf_counter()
    network, epochs = train((train_x - mean) / spread, np.searchsorted(classes, labels), len(classes),
                            max_epochs, rng)
    predicted = classes[predict(network, (test_x - mean) / spread)]
    return {**score_predictions(predicted, test_y, classes), "epochs": epochs,
            "seconds": round(time.perf_counter() - started, 1)}


def summarise(runs: list[dict]) -> dict:
    """Mean, min and max over runs of exact, within-one and MAE, plus the mean per-N accuracy."""
    summary = {key: {"mean": float(np.mean([r[key] for r in runs])), "min": min(r[key] for r in runs),
                     "max": max(r[key] for r in runs)} for key in ("exact", "within_one", "mae")}
    summary["per_n"] = {n: float(np.mean([r["per_n"][n] for r in runs])) for n in runs[0]["per_n"]}
    return summary


def format_report(report: dict) -> str:
    lines = [f"gist probe: train {report['train_images']} images ({report['train_dir']}), test "
             f"{report['test_images']} images ({report['test_dir']}); chance {report['chance_exact']:.1%} exact, "
             f"{report['chance_within_one']:.1%} within one"]
    classes = report["classes"]
    for size, entry in report["sizes"].items():
        for name in ("cnn", "control"):
            if name not in entry:
                continue
            s = entry[name]["summary"]
            spread = (f" (runs {s['exact']['min']:.1%}-{s['exact']['max']:.1%} / "
                      f"{s['within_one']['min']:.1%}-{s['within_one']['max']:.1%})" if len(entry[name]["runs"]) > 1
                      else "")
            lines.append(f"{size:>4} px {name:<8} {s['exact']['mean']:6.1%} exact {s['within_one']['mean']:6.1%} "
                         f"within one  MAE {s['mae']['mean']:.2f}{spread}")
            if name == "cnn":
                lines.append("         per N: " + "  ".join(f"{n}: {v:.0%}" for n, v in s["per_n"].items()))
        lines.append(f"         confusion (run 1, rows truth {classes[0]}..{classes[-1]}): "
                     + " | ".join(" ".join(f"{c:3d}" for c in row) for row in entry["cnn"]["runs"][0]["confusion"]))
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# CLI


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog=Path(__file__).name,
                           description="How well does a small CNN read the loop count off a thumbnail?")
    parser.add_argument("train_dir", type=Path, help="dataset folder to train on (annotations.jsonl + images)")
    parser.add_argument("test_dir", type=Path, help="dataset folder of another seed, tested once")
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 128], help="thumbnail sides in px")
    parser.add_argument("--runs", type=int, default=3, help="training runs per size, reported as mean and range")
    parser.add_argument("--seed", type=int, default=0, help="seed of the weights, holdout and batches")
    parser.add_argument("--max-epochs", type=int, default=60, help="cap on training epochs (early stopping ends most)")
    parser.add_argument("--control-runs", type=int, default=1,
                        help="runs of the shuffled-label control per size (0 skips it)")
    parser.add_argument("--train-limit", type=int, default=None, help="use only the first K training images")
    parser.add_argument("--test-limit", type=int, default=None, help="use only the first K test images")
    parser.add_argument("--workers", type=int, default=max(1, os.cpu_count() or 1),
                        help="processes that read the images, and torch's threads")
    parser.add_argument("--json", type=Path, default=None, help="also write the report as JSON to this file")
    parser.add_argument("--max-exact", type=float, default=None,
                        help="exit 1 if the CNN's mean exact accuracy (fraction) is above this")
    parser.add_argument("--max-within", type=float, default=None,
                        help="exit 1 if the CNN's mean within-one accuracy (fraction) is above this")
    return parser


def check_args(parser: OneLineParser, args) -> None:
    if any(size < 32 or size > 1024 for size in args.sizes):
        parser.error(f"--sizes must each be 32..1024 px (five poolings halve the side 5 times); got {args.sizes}")
    if args.runs < 1 or args.max_epochs < 1 or args.workers < 1 or args.seed < 0 or args.control_runs < 0:
        parser.error(f"need --runs, --max-epochs, --workers >= 1 and --seed, --control-runs >= 0; got {args.runs}, "
                     f"{args.max_epochs}, {args.workers}, {args.seed}, {args.control_runs}")
    for flag in ("train_limit", "test_limit"):
        if getattr(args, flag) is not None and getattr(args, flag) < 20:
            parser.error(f"--{flag.replace('_', '-')} must be at least 20, got {getattr(args, flag)}")
    if args.json is not None and (args.json.is_dir() or not args.json.parent.is_dir()):
        parser.error(f"--json {args.json} is a folder or has no folder to go in")


def read_split(dataset_dir: Path, limit: int | None) -> tuple[list[Path], np.ndarray]:
    paths, answers = read_annotations(dataset_dir, limit)
    return paths, np.array(answers)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_args(parser, args)
    if importlib.util.find_spec("torch") is None:
        raise SystemExit(missing_test_package(parser.prog, "torch"))
    try:
        train_paths, train_y = read_split(args.train_dir, args.train_limit)
        test_paths, test_y = read_split(args.test_dir, args.test_limit)
        classes = np.unique(train_y)
        if len(classes) < 2 or np.unique(train_y, return_counts=True)[1].min() < 2:
            raise DatasetInputError(f"{args.train_dir}: the probe needs two or more counts, each on two or more "
                                    "images")
        if not np.isin(test_y, classes).all():
            raise DatasetInputError(f"{args.test_dir} holds counts the training set lacks: "
                                    f"{sorted(set(test_y.tolist()) - set(classes.tolist()))}")
        sizes = tuple(args.sizes)
        train_x = load_all(train_paths, sizes, args.workers)
        test_x = load_all(test_paths, sizes, args.workers)
    except DatasetInputError as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2
    import torch

    torch.set_num_threads(args.workers)
    chance_exact, chance_within = chance_rates(test_y, classes)
    report = {"train_dir": str(args.train_dir), "test_dir": str(args.test_dir), "train_images": len(train_y),
              "test_images": len(test_y), "classes": classes.tolist(), "chance_exact": chance_exact,
              "chance_within_one": chance_within, "sizes": {}}
    for size in sizes:
        entry = report["sizes"][str(size)] = {}
        for name, shuffle, count in (("cnn", False, args.runs), ("control", True, args.control_runs)):
            if count == 0:
                continue
            runs = []
            for run in range(count):
                runs.append(probe(train_x[size], train_y, test_x[size], test_y, classes, args.max_epochs,
                                  args.seed, run, shuffle))
                entry[name] = {"runs": runs, "summary": summarise(runs)}
                if args.json is not None:  # after every run, so a long run that is stopped keeps what it found
                    args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
                print(f"{size} px {name} run {run + 1}/{count}: {runs[-1]['exact']:.1%} exact, "
                      f"{runs[-1]['within_one']:.1%} within one, {runs[-1]['epochs']} epochs, "
                      f"{runs[-1]['seconds']} s", file=sys.stderr)
    print(format_report(report))
    failures = [f"{size} px: {entry['cnn']['summary'][key]['mean']:.1%} {key.replace('_', ' ')} > {limit:.1%}"
                for size, entry in report["sizes"].items()
                for key, limit in (("exact", args.max_exact), ("within_one", args.max_within))
                if limit is not None and entry["cnn"]["summary"][key]["mean"] > limit]
    for failure in failures:
        print(f"gate: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
