"""Shortcut audit: how well do cheap image statistics predict the loop count N?

The benchmark is only worth something if counting loops needs tracing. This
script measures cheap global statistics of each image (ink, faces, skeleton,
curvature, the seed's endpoint attack), fits a simple monotone predictor of N
to each on half of the images, and prints how often it is right on the rest.

    python tests/shortcuts.py /tmp/audit_ds --workers 1 --splits 200 --json /tmp/audit.json

DATASET_DIR holds annotations.jsonl (one JSON object per line; "image" is a
path relative to DATASET_DIR, "answer" the integer N). creation.py is not
imported: the audit must judge the images, not the generator's intentions.

Per-image statistics (compute_features), all from the grey image:

* ink threshold: halfway between the background level (median grey) and the
  ink level, but never above the noise floor. The noise floor is the
  background minus 6 noise sigmas (sigma = 1.4826 * MAD, at least 1 grey
  level); the ink level is the 5th percentile of the pixels below that floor,
  i.e. the stroke core. Halfway is the half-coverage level of an antialiased
  edge, so ink area ~ stroke length * stroke width.
* ink_px: pixels darker than the ink threshold.
* holes: 4-connected background components (the dual of 8-connected ink)
  that do not touch the image border and have >= MIN_REGION_PX pixels; these
  are the bounded faces of the planar drawing (crossings + 1 per ink component).
* ink_components: 8-connected ink components with >= MIN_REGION_PX pixels.
* skeleton_px: pixels of skimage's skeletonize (Zhang) of the ink mask.
* junctions: skeleton pixels with >= 3 skeleton 8-neighbours, grouped into
  clusters: the junction mask is dilated by a square of radius
  JUNCTION_MERGE_PX and its 8-connected components counted, so junction
  pixels up to 2 * JUNCTION_MERGE_PX + 1 px apart (Chebyshev) share a
  cluster, because thinning splits one X crossing of 3 px strokes into two
  T junctions a few pixels apart.
* branches: the skeleton minus its junction pixels, traced into ordered pixel
  paths (each remaining pixel has <= 2 neighbours, so every 8-connected
  component is a path or a cycle). Open paths lose BRANCH_TRIM_PX pixels at
  each end, where thinning bends them into the junction; paths shorter than
  MIN_BRANCH_PX after trimming are dropped as crossing debris. Each path is
  smoothed with a Gaussian (BRANCH_SMOOTH_PX, along the path; wrapped for
  cycles), resampled into equal chords of about CHORD_PX arc length, and the
  turn at each chord joint is the wrapped difference of chord headings
  (cycles include the joint that closes them).
* curls: open branches of at least MIN_CURL_BRANCH_PX pixels whose two
  ends touch the same junction cluster: the loop of a curl (a strand that
  crosses itself and turns once more), which balanced mode adds, partly in
  place of missing loops. It finds 60-70 % of the self-crossings the
  generator records.
* total_abs_turning_rad: sum over all branches of |turn| over their joints.
* net_turning_rad: sum over branches of |sum of signed turns| (a whole
  uncrossed loop contributes ~2 pi whatever its wiggles).
* mean_abs_curvature_per_px: total_abs_turning_rad / total smoothed branch
  length (rad per pixel of arc).
* median_radius_px: 1 / median over all joints of |turn| / chord length.
* endpoint_pairs: the seed's attack, verbatim: skeletonize(gray < 110), count
  skeleton pixels with exactly one 8-neighbour, divide by two.

Audit (audit): for each of many random half/half splits, every statistic gets
a 1-D monotone predictor: isotonic regression of N on the statistic (pool
adjacent violators, increasing or decreasing, whichever fits the training
half better in squared error), evaluated on the test half by linear
interpolation between the fitted training points (clamped at the ends) and
rounding to the nearest integer inside the training label range. Isotonic
covers linear and non-linear monotone links (ink grows like N, crossings like
N^2) without choosing a form. The combined models use all statistics,
standardised on the training half: multinomial logistic regression (L2,
Newton's method) and k-nearest-neighbour voting (Euclidean). The seed's
endpoint attack is scored raw (rounded endpoint_pairs, no fitting). Each row
reports the median over splits of exact and within-one accuracy on the test
halves. Chance is 1/#classes exact, and for within-one the probability that a
uniform guess lands within one of a label drawn from the label distribution.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image
from scipy import ndimage
from skimage.morphology import skeletonize

SEED_ATTACK_THRESHOLD = 110  # grey level used by the seed's endpoint attack
NOISE_SIGMAS_BELOW_BACKGROUND = 6.0  # darker than this is surely not background noise
MIN_NOISE_SIGMA = 1.0  # grey levels; 8-bit quantisation, also for noise-free images
INK_LEVEL_PERCENTILE = 5.0  # percent of the surely-dark pixels: the stroke core
MIN_REGION_PX = 10  # smaller ink or background islands are antialiasing/noise specks
JUNCTION_MERGE_PX = 2  # dilation radius: junction pixels <= 5 px apart are one crossing
BRANCH_TRIM_PX = 4  # skeleton bends into a junction over about a stroke width
MIN_BRANCH_PX = 12  # shorter branches are thinning debris around crossings
MIN_CURL_BRANCH_PX = 30  # a branch back to its own crossing shorter than this is the lens of a crossing's X
BRANCH_SMOOTH_PX = 3.0  # Gaussian sigma along the path, removes pixel staircases
CHORD_PX = 14.0  # arc length per chord; shorter chords let quantisation noise add turning
MIN_MEDIAN_CURVATURE_PER_PX = 1e-6  # keeps median_radius_px finite on straight strokes

ENDPOINT_KEY = "endpoint_pairs"
EIGHT_NEIGHBOURS = np.array([[1, 1, 1], [1, 0, 1], [1, 1, 1]], np.uint8)
EIGHT_CONNECTED = np.ones((3, 3), bool)
NEIGHBOUR_OFFSETS = np.array(
    [(-1, -1), (-1, 0), (-1, 1), (0, -1), (0, 1), (1, -1), (1, 0), (1, 1)]
)  # (8, 2) row, column


# ---------------------------------------------------------------------------
# Per-image statistics


def load_gray(image_path: str | os.PathLike) -> np.ndarray:
    """(H, W) float64 grey levels 0..255; palette images are resolved first."""
    with Image.open(image_path) as image:
        return np.asarray(image.convert("L"), dtype=np.float64)


def estimate_ink_threshold(gray: np.ndarray) -> float:
    """Half-coverage grey level between background and stroke core."""
    background_level = float(np.median(gray))
    noise_sigma = max(1.4826 * float(np.median(np.abs(gray - background_level))), MIN_NOISE_SIGMA)
    noise_floor = background_level - NOISE_SIGMAS_BELOW_BACKGROUND * noise_sigma
    dark = gray[gray < noise_floor]
    if dark.size == 0:
        return noise_floor
    ink_level = float(np.percentile(dark, INK_LEVEL_PERCENTILE))
    return min(0.5 * (background_level + ink_level), noise_floor)


def neighbour_count(mask: np.ndarray) -> np.ndarray:
    """(H, W) number of 8-neighbours of each pixel that are set in mask."""
    return ndimage.convolve(mask.astype(np.uint8), EIGHT_NEIGHBOURS, mode="constant")


def count_endpoint_pairs(gray: np.ndarray) -> float:
    """The seed's attack: skeleton pixels with exactly one neighbour, halved."""
    skeleton = skeletonize(gray < SEED_ATTACK_THRESHOLD)
    endpoints = skeleton & (neighbour_count(skeleton) == 1)
    return endpoints.sum() / 2


def count_regions(mask: np.ndarray, structure: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Labels and pixel sizes (index 0 = unlabelled) of the mask's components."""
    labels, _ = ndimage.label(mask, structure=structure)
    return labels, np.bincount(labels.ravel())


def count_ink_components(ink: np.ndarray) -> int:
    _, sizes_px = count_regions(ink, EIGHT_CONNECTED)
    return int((sizes_px[1:] >= MIN_REGION_PX).sum())


def count_holes(ink: np.ndarray) -> int:
    """Bounded faces: background components not touching the border."""
    labels, sizes_px = count_regions(~ink, ndimage.generate_binary_structure(2, 1))
    border_labels = np.unique(np.concatenate([labels[0], labels[-1], labels[:, 0], labels[:, -1]]))
    bounded = sizes_px >= MIN_REGION_PX
    bounded[0] = False
    bounded[border_labels] = False
    return int(bounded.sum())


def label_junction_clusters(junction: np.ndarray) -> tuple[np.ndarray, int]:
    """(H, W) cluster label of each pixel near a junction (0 elsewhere), and the number of clusters."""
    side = 2 * JUNCTION_MERGE_PX + 1
    merged = ndimage.binary_dilation(junction, structure=np.ones((side, side), bool))
    return ndimage.label(merged, structure=EIGHT_CONNECTED)


def count_curls(branches: list[tuple[np.ndarray, bool]], clusters: np.ndarray) -> int:
    """Open branches of at least MIN_CURL_BRANCH_PX that leave a junction cluster and return to it."""
    curls = 0
    for path_px, is_cycle in branches:
        if is_cycle or len(path_px) < MIN_CURL_BRANCH_PX:
            continue
        first, last = clusters[tuple(path_px[0])], clusters[tuple(path_px[-1])]
        curls += bool(first != 0 and first == last)
    return curls


def trace_branches(branch_mask: np.ndarray) -> list[tuple[np.ndarray, bool]]:
    """Ordered (n, 2) row/column pixel paths and whether each is a cycle.

    Every pixel of branch_mask must have at most two 8-neighbours in it, so
    each component is a simple path (walked from one end) or a cycle.
    """
    rows, cols = np.nonzero(branch_mask)
    index_image = np.full((branch_mask.shape[0] + 2, branch_mask.shape[1] + 2), -1, np.int64)
    index_image[rows + 1, cols + 1] = np.arange(rows.size)
    neighbours = index_image[
        rows[:, None] + 1 + NEIGHBOUR_OFFSETS[:, 0], cols[:, None] + 1 + NEIGHBOUR_OFFSETS[:, 1]
    ]  # (n, 8) pixel indices, -1 where no neighbour
    two_neighbours = -np.sort(-neighbours, axis=1)[:, :2]  # existing ones first
    degree = (two_neighbours >= 0).sum(axis=1)
    # Path ends first, so that a pixel first reached in the second pass lies on a cycle.
    starts = np.concatenate([np.flatnonzero(degree < 2), np.arange(rows.size)]).tolist()
    neighbour_lists = two_neighbours.tolist()  # python ints: the walk is a scalar loop
    visited = bytearray(rows.size)
    paths = []
    for start in starts:
        if visited[start]:
            continue
        order = [start]
        visited[start] = 1
        current = start
        while True:
            first, second = neighbour_lists[current]
            if first >= 0 and not visited[first]:
                current = first
            elif second >= 0 and not visited[second]:
                current = second
            else:
                break
            visited[current] = 1
            order.append(current)
        paths.append((np.column_stack([rows[order], cols[order]]), bool(degree[start] == 2)))
    return paths


def measure_branch_turns(path_px: np.ndarray, is_cycle: bool) -> tuple[float, np.ndarray, float]:
    """Smoothed arc length (px), signed turns at chord joints (rad), chord length (px)."""
    if not is_cycle:
        path_px = path_px[BRANCH_TRIM_PX : len(path_px) - BRANCH_TRIM_PX]
    if len(path_px) < MIN_BRANCH_PX:
        return 0.0, np.empty(0), 0.0
    smooth = ndimage.gaussian_filter1d(
        path_px.astype(np.float64), BRANCH_SMOOTH_PX, axis=0, mode="wrap" if is_cycle else "nearest"
    )
    if is_cycle:
        smooth = np.vstack([smooth, smooth[:1]])
    arc_px = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(smooth, axis=0).T))])
    chord_count = max(int(round(arc_px[-1] / CHORD_PX)), 1)
    stations_px = np.linspace(0.0, arc_px[-1], chord_count + 1)
    points = np.column_stack([np.interp(stations_px, arc_px, smooth[:, axis]) for axis in (0, 1)])
    chords = np.diff(points, axis=0)
    heading_rad = np.arctan2(chords[:, 0], chords[:, 1])
    if is_cycle:
        heading_rad = np.append(heading_rad, heading_rad[0])
    turns_rad = (np.diff(heading_rad) + np.pi) % (2 * np.pi) - np.pi
    return float(arc_px[-1]), turns_rad, float(arc_px[-1] / chord_count)


def measure_turning(branches: list[tuple[np.ndarray, bool]]) -> dict[str, float]:
    """Curvature statistics over the skeleton branches between junctions."""
    length_px = 0.0
    abs_turning_rad = 0.0
    net_turning_rad = 0.0
    curvatures_per_px = []
    for path_px, is_cycle in branches:
        branch_length_px, turns_rad, chord_px = measure_branch_turns(path_px, is_cycle)
        length_px += branch_length_px
        abs_turning_rad += float(np.abs(turns_rad).sum())
        net_turning_rad += abs(float(turns_rad.sum()))
        curvatures_per_px.append(np.abs(turns_rad) / max(chord_px, 1e-9))
    all_curvatures = np.concatenate(curvatures_per_px) if curvatures_per_px else np.empty(0)
    median_curvature = float(np.median(all_curvatures)) if all_curvatures.size else 0.0
    return {
        "mean_abs_curvature_per_px": abs_turning_rad / length_px if length_px else 0.0,
        "median_radius_px": 1.0 / max(median_curvature, MIN_MEDIAN_CURVATURE_PER_PX),
        "total_abs_turning_rad": abs_turning_rad,
        "net_turning_rad": net_turning_rad,
    }


def compute_features(image_path: str | os.PathLike) -> dict[str, float]:
    """All cheap statistics of one image (see the module docstring)."""
    gray = load_gray(image_path)
    ink = gray < estimate_ink_threshold(gray)
    skeleton = skeletonize(ink)
    junction = skeleton & (neighbour_count(skeleton) >= 3)
    clusters, cluster_count = label_junction_clusters(junction)
    branches = trace_branches(skeleton & ~junction)
    return {
        "ink_px": float(ink.sum()),
        "holes": float(count_holes(ink)),
        "ink_components": float(count_ink_components(ink)),
        "skeleton_px": float(skeleton.sum()),
        "junctions": float(cluster_count),
        "curls": float(count_curls(branches, clusters)),
        **measure_turning(branches),
        ENDPOINT_KEY: float(count_endpoint_pairs(gray)),
    }


# ---------------------------------------------------------------------------
# Predictors (numpy only: the audit must not depend on scikit-learn)

K_NEIGHBOURS = 7  # k-NN vote size; odd, small against ~150 training images
LOGISTIC_L2 = 1e-3  # weak ridge on the weights (not the biases); 1e-2 and up underfit
LOGISTIC_BIAS_RIDGE = 1e-6  # only to make the Newton system non-singular
LOGISTIC_NEWTON_STEPS = 10  # the problem is convex, smooth and tiny: Newton converges fast


def pool_adjacent_violators(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """(n,) non-decreasing weighted least-squares fit to values (given in x order)."""
    block_means: list[float] = []
    block_weights: list[float] = []
    block_sizes: list[int] = []
    for value, weight in zip(values.tolist(), weights.tolist()):
        block_means.append(value)
        block_weights.append(weight)
        block_sizes.append(1)
        while len(block_means) > 1 and block_means[-2] > block_means[-1]:
            merged_weight = block_weights[-2] + block_weights[-1]
            merged_sum = block_means[-2] * block_weights[-2] + block_means[-1] * block_weights[-1]
            block_means[-2] = merged_sum / merged_weight
            block_weights[-2] = merged_weight
            block_sizes[-2] += block_sizes[-1]
            del block_means[-1], block_weights[-1], block_sizes[-1]
    return np.repeat(block_means, block_sizes)


def fit_monotone(x_train: np.ndarray, y_train: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Knots (sorted unique x, fitted y) of the better isotonic fit, either direction."""
    knots_x, inverse, counts = np.unique(x_train, return_inverse=True, return_counts=True)
    mean_y = np.bincount(inverse, weights=y_train) / counts
    fits = [sign * pool_adjacent_violators(sign * mean_y, counts.astype(np.float64)) for sign in (1.0, -1.0)]
    squared_errors = [np.sum((fit[inverse] - y_train) ** 2) for fit in fits]
    return knots_x, fits[int(np.argmin(squared_errors))]


def predict_monotone(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray) -> np.ndarray:
    """Rounded isotonic prediction, kept inside the training label range."""
    knots_x, knots_y = fit_monotone(x_train, y_train)
    return np.clip(np.rint(np.interp(x_test, knots_x, knots_y)), y_train.min(), y_train.max())


def standardise(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Scale columns by training mean and std; constant columns become zero."""
    mean = train.mean(axis=0)
    std = train.std(axis=0)
    std[std == 0] = 1.0
    return (train - mean) / std, (test - mean) / std


def predict_logistic(train: np.ndarray, y_train: np.ndarray, test: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Multinomial logistic regression, L2 on the weights, fitted by Newton steps."""
    train_b = np.hstack([train, np.ones((len(train), 1))])  # (n, d+1): last column is the bias
    test_b = np.hstack([test, np.ones((len(test), 1))])
    n, d1 = train_b.shape
    targets = (y_train[:, None] == classes[None, :]).astype(np.float64)  # (n, K) one-hot
    ridge = np.full((d1, 1), LOGISTIC_L2)
    # Softmax is unchanged by a shift shared by all biases; a tiny ridge pins it.
    ridge[-1] = LOGISTIC_BIAS_RIDGE
    ridge_diagonal = np.diag(np.repeat(ridge[:, 0], len(classes)))  # (d1*K, d1*K), row-major (feature, class)
    weights = np.zeros((d1, len(classes)))
    for _ in range(LOGISTIC_NEWTON_STEPS):
        logits = train_b @ weights
        probabilities = np.exp(logits - logits.max(axis=1, keepdims=True))
        probabilities /= probabilities.sum(axis=1, keepdims=True)
        gradient = train_b.T @ (probabilities - targets) / n + ridge * weights  # (d1, K)
        # Per-image softmax curvature diag(p) - p p^T, then the feature outer product.
        curvature = np.einsum("ik,kl->ikl", probabilities, np.eye(len(classes))) - np.einsum(
            "ik,il->ikl", probabilities, probabilities
        )  # (n, K, K)
        hessian = np.einsum("ia,ib,ikl->akbl", train_b, train_b, curvature).reshape(d1 * len(classes), -1) / n
        weights -= np.linalg.solve(hessian + ridge_diagonal, gradient.ravel()).reshape(d1, len(classes))
    return classes[np.argmax(test_b @ weights, axis=1)]


def predict_knn(train: np.ndarray, y_train: np.ndarray, test: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Majority vote of the K nearest training images; nearer ones break ties."""
    distances = np.linalg.norm(test[:, None, :] - train[None, :, :], axis=2)  # (m, n)
    nearest = np.argsort(distances, axis=1)[:, :K_NEIGHBOURS]  # (m, k), k < K on tiny sets
    vote_weights = 1.0 - 1e-3 * np.arange(nearest.shape[1])  # (k,) rank tie-break
    class_index = np.searchsorted(classes, y_train[nearest])  # (m, k)
    votes = np.zeros((len(test), len(classes)))
    np.add.at(votes, (np.arange(len(test))[:, None], class_index), vote_weights)
    return classes[np.argmax(votes, axis=1)]


# ---------------------------------------------------------------------------
# Audit


def chance_rates(answers: np.ndarray, classes: np.ndarray) -> tuple[float, float]:
    """Exact and within-one hit rates of a uniform guess over the classes."""
    near_class_counts = (np.abs(answers[:, None] - classes[None, :]) <= 1).sum(axis=1)
    return 1.0 / len(classes), float(np.mean(near_class_counts / len(classes)))


def score(predicted: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
    error = np.abs(predicted - truth)
    return float(np.mean(error == 0)), float(np.mean(error <= 1))


def split_predictions(
    table: np.ndarray, names: list[str], answers: np.ndarray, classes: np.ndarray, train: np.ndarray, test: np.ndarray
) -> dict[str, np.ndarray]:
    """Test-half predictions of every attack for one split."""
    y_train = answers[train]
    values, counts = np.unique(y_train, return_counts=True)
    predictions = {"majority class": np.full(len(test), values[np.argmax(counts)])}
    for column, name in enumerate(names):
        predictions[name] = predict_monotone(table[train, column], y_train, table[test, column])
    if ENDPOINT_KEY in names:
        predictions["endpoint attack (raw)"] = np.rint(table[test, names.index(ENDPOINT_KEY)])
    train_z, test_z = standardise(table[train], table[test])
    predictions["logistic regression (all)"] = predict_logistic(train_z, y_train, test_z, classes)
    predictions[f"{K_NEIGHBOURS}-NN vote (all)"] = predict_knn(train_z, y_train, test_z, classes)
    return predictions


def row_kind(name: str, names: list[str]) -> str:
    if name == "majority class":
        return "baseline"
    if name in names:
        return "statistic"
    return "raw attack" if name == "endpoint attack (raw)" else "combined"


def audit(features: list[dict], answers: list[int], splits: int = 200, seed: int = 0) -> dict:
    """Median test accuracies over random half/half splits (see module docstring).

    features: one dict per image with the same numeric keys; answers: true N.
    Returns {"images", "splits", "seed", "classes", "rows", "strongest"}; each
    row is {"name", "kind", "exact", "within_one"} with rates in [0, 1].
    """
    if len(features) != len(answers) or len(answers) < 4:
        raise ValueError(f"need >= 4 images with one answer each, got {len(features)} features, {len(answers)} answers")
    if splits < 1:
        raise ValueError(f"splits must be >= 1, got {splits}")
    names = list(features[0])
    table = np.array([[row[name] for name in names] for row in features], dtype=np.float64)  # (n, d)
    truth = np.asarray(answers, dtype=np.float64)
    classes = np.unique(truth)
    rng = np.random.default_rng(seed)
    half = len(truth) // 2
    rates: dict[str, list[tuple[float, float]]] = {}
    for _ in range(splits):
        order = rng.permutation(len(truth))
        train, test = order[:half], order[half:]
        for name, predicted in split_predictions(table, names, truth, classes, train, test).items():
            rates.setdefault(name, []).append(score(predicted, truth[test]))
    chance_exact, chance_within = chance_rates(truth, classes)
    rows = [{"name": "chance", "kind": "chance", "exact": chance_exact, "within_one": chance_within}]
    for name, pairs in rates.items():
        exact, within = np.median(np.array(pairs), axis=0)
        rows.append({"name": name, "kind": row_kind(name, names), "exact": float(exact), "within_one": float(within)})
    attacks = [row for row in rows if row["kind"] not in ("chance", "baseline")]
    strongest = max(attacks, key=lambda row: (row["exact"], row["within_one"]))
    return {
        "images": len(truth),
        "splits": splits,
        "seed": seed,
        "classes": [int(c) for c in classes],
        "rows": rows,
        "strongest": strongest,
    }


def format_table(report: dict) -> str:
    """Plain-text table; the last line names the strongest attack."""
    width = max(len(row["name"]) for row in report["rows"]) + 2
    lines = [f"{'statistic':<{width}}{'exact':>8}{'within ±1':>11}"]
    lines += [f"{row['name']:<{width}}{row['exact']:>8.1%}{row['within_one']:>11.1%}" for row in report["rows"]]
    best = report["strongest"]
    chance = report["rows"][0]["exact"]
    lines.append(
        f"strongest: {best['name']} {best['exact']:.1%} exact, "
        f"{best['within_one']:.1%} within one (chance {chance:.1%})"
    )
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# CLI


def read_annotations(dataset_dir: Path, limit: int | None) -> tuple[list[Path], list[int]]:
    with open(dataset_dir / "annotations.jsonl", encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle if line.strip()]
    records = records[:limit]
    return [dataset_dir / record["image"] for record in records], [int(record["answer"]) for record in records]


def compute_all_features(paths: list[Path], workers: int) -> list[dict[str, float]]:
    """Features in annotation order; --workers 1 runs without a pool."""
    if workers == 1:
        return [compute_features(path) for path in paths]
    with multiprocessing.Pool(workers) as pool:
        return list(pool.imap(compute_features, paths, chunksize=4))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="How well do cheap image statistics predict the loop count?")
    parser.add_argument("dataset_dir", type=Path, help="folder with annotations.jsonl and the images it names")
    parser.add_argument("--limit", type=int, default=None, help="audit only the first K annotations")
    parser.add_argument(
        "--workers", type=int, default=max(1, (os.cpu_count() or 1) - 1), help="feature processes (default: cores - 1)"
    )
    parser.add_argument("--splits", type=int, default=200, help="random half/half splits to take the median over")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random splits")
    parser.add_argument("--json", type=Path, default=None, help="also write the table as JSON to this file")
    parser.add_argument("--max-single", type=float, nargs=2, metavar=("EXACT", "WITHIN"), default=None,
                        help="exit 1 if any single statistic beats these accuracies (fractions), e.g. 0.29 0.59")
    parser.add_argument("--max-combined", type=float, metavar="EXACT", default=None,
                        help="exit 1 if a combined model beats this exact accuracy (fraction)")
    return parser


def gate_failures(report: dict, max_single: list[float] | None, max_combined: float | None) -> list[str]:
    """Rows that beat the allowed accuracies: a CI gate for the balanced mode."""
    failures = []
    for row in report["rows"]:
        if max_single and row["kind"] == "statistic" and (row["exact"] > max_single[0]
                                                          or row["within_one"] > max_single[1]):
            failures.append(f"{row['name']} {row['exact']:.1%} exact, {row['within_one']:.1%} within one")
        if max_combined is not None and row["kind"] == "combined" and row["exact"] > max_combined:
            failures.append(f"{row['name']} {row['exact']:.1%} exact")
    return failures


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.workers < 1 or args.splits < 1 or (args.limit is not None and args.limit < 4):
        build_parser().error(
            f"need --workers >= 1, --splits >= 1, --limit >= 4; got {args.workers}, {args.splits}, {args.limit}"
        )
    paths, answers = read_annotations(args.dataset_dir, args.limit)
    started = time.perf_counter()
    features = compute_all_features(paths, args.workers)
    seconds = time.perf_counter() - started
    print(
        f"features: {len(paths)} images in {seconds:.1f} s with {args.workers} worker(s), "
        f"{seconds * args.workers / len(paths):.3f} s per image per worker",
        file=sys.stderr,
    )
    report = audit(features, answers, splits=args.splits, seed=args.seed)
    print(format_table(report))
    if args.json is not None:
        report["seconds_per_image_per_worker"] = seconds * args.workers / len(paths)
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    failures = gate_failures(report, args.max_single, args.max_combined)
    for failure in failures:
        print(f"above the allowed accuracy: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
