"""Shortcut audit: how well do cheap image statistics predict the loop count N?

The benchmark is only worth something if counting loops needs tracing. This
script measures cheap global statistics of each image (ink, faces, skeleton,
curvature, the seed's endpoint attack), fits a simple monotone predictor of N
to each on half of the images, and prints how often it is right on the rest;
then learned models on some 500 generic image features (ink grids, spectrum,
gradients, ...) are scored by stratified k-fold in the same table.

    python tests/shortcuts.py /tmp/audit_ds --workers 1 --splits 200 --json /tmp/audit.json
    python tests/shortcuts.py /tmp/audit_ds --workers 2 --max-single 0.29 0.59 --max-combined 0.49 --max-learned 0.49

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
The "majority class" row always answers the training half's most frequent
count. With balanced answers (the generator's default) that count is, by
construction of the split, the test half's least frequent one, so this row
scores below chance; it is there to show that a model has to beat the
counts' own frequencies, not to be beaten.

Generic features (compute_generic_features), for a learned attack that needs
no idea of a loop; named groups of numbers from the grey image and ink mask:

* ink fraction: the share of ink pixels.
* ink grid 8x8, 16x16: the ink fraction of each cell of an even grid (where
  the ink is), the same fractions sorted (32 evenly spaced order statistics:
  how it is spread, not where) and histogrammed (DENSITY_BIN_EDGES).
* local density: ink fraction in sliding square windows of 16, 32 and 64 px
  (whole 8 px blocks, stepping half a side), histogrammed per window size.
* power spectrum: share of the non-DC |FFT|^2 of the grey image in
  SPECTRUM_BINS log-spaced radial frequency bins (1/side to the corner), log10.
* gradient orientation: Sobel edge orientation mod pi in 18 bins, weighted by
  gradient magnitude, over pixels with at least GRADIENT_FLOOR of the largest
  magnitude (the rest is paper noise); gradient density: mean magnitude.
* gradient coherence: per 8 and 16 px block, |sum of doubled-angle gradient
  vectors| / sum of squared magnitudes (1 on a straight edge, low at crossings,
  corners and tight bends), histogrammed weighted by block energy, plus the
  incoherent energy per pixel.
* background regions: counts of 4-connected background components in log2
  area bins (1 px, 2-3 px, ... up to 2^21 px), plus their total count.

Learned attack (learned_rows): on all generic features, gradient boosting
(scikit-learn's HistGradientBoostingClassifier, BOOSTING_SETTINGS), L2
multinomial logistic regression (standardised, C = LEARNED_LOGISTIC_C) and
ridge regression of N (standardised, alpha by leave-one-out, rounded into
the training label range); and a logistic regression per feature family (ink
grids, local density, power spectrum, gradients, background regions). Each is
scored by stratified k-fold (LEARNED_FOLDS, fewer if a class has fewer
images), repeated LEARNED_REPEATS times with different shuffles; a row is the
mean exact and within-one accuracy over all folds. The prediction is the class.
Only these rows need scikit-learn (a test-only dependency, imported inside).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import multiprocessing
import os
import sys
import time
from pathlib import Path

import numpy as np
import scipy.fft
from PIL import Image
from scipy import ndimage

from dataset_records import DatasetInputError, OneLineParser, missing_test_package, read_records, readable_image

try:
    from skimage.morphology import skeletonize
except ModuleNotFoundError as missing:
    raise SystemExit(missing_test_package("shortcuts.py", missing.name)) from None

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
    with readable_image(image_path), Image.open(image_path) as image:
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


def compute_statistics(gray: np.ndarray, ink: np.ndarray) -> dict[str, float]:
    """All cheap statistics of one grey image and its ink mask (see the module docstring)."""
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


def compute_features(image_path: str | os.PathLike) -> dict[str, float]:
    """All cheap statistics of one image file."""
    gray = load_gray(image_path)
    return compute_statistics(gray, gray < estimate_ink_threshold(gray))


# ---------------------------------------------------------------------------
# Generic image features (the learned attack's input: no idea of a loop)

GRID_SIDES = (8, 16)  # cells per side of the ink-fraction grids
SORTED_FRACTIONS_KEPT = 32  # order statistics kept of a grid's sorted cell fractions
DENSITY_BLOCK_PX = 8  # sliding windows are built from square blocks of this side
DENSITY_WINDOW_BLOCKS = (2, 4, 8)  # window sides in blocks (16, 32, 64 px); windows step by half a side
DENSITY_BIN_EDGES = np.array([0.0, 0.005, 0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 1.0 + 1e-9])  # ink fraction
SPECTRUM_BINS = 28  # log-spaced radial frequency bins, 1/side to the corner (0.71 cycles/px)
SPECTRUM_FLOOR = 1e-12  # log10 of an empty bin's power fraction
ORIENTATION_BINS = 18  # edge orientation mod pi, 10 degrees each
GRADIENT_FLOOR = 0.05  # of the image's largest gradient magnitude: weaker ones are paper noise
COHERENCE_BLOCKS_PX = (8, 16)  # square blocks over which gradient orientations are pooled
COHERENCE_BINS = 10  # histogram of block coherence over [0, 1]
BACKGROUND_AREA_BINS = 22  # log2 area bins of background components: 1 px, 2-3 px, ..., >= 2^21 px


def block_sums(values: np.ndarray, block_px: int) -> np.ndarray:
    """(H // b, W // b) sums over square blocks; the ragged bottom and right edges are dropped."""
    rows, cols = values.shape[0] // block_px, values.shape[1] // block_px
    return values[: rows * block_px, : cols * block_px].reshape(rows, block_px, cols, block_px).sum(axis=(1, 3))


def cell_ink_fractions(ink: np.ndarray, cells_per_side: int) -> np.ndarray:
    """(cells, cells) ink fraction of each cell of an even grid over the image."""
    row_edges = np.linspace(0, ink.shape[0], cells_per_side + 1).astype(int)
    col_edges = np.linspace(0, ink.shape[1], cells_per_side + 1).astype(int)
    row_counts = np.add.reduceat(ink, row_edges[:-1], axis=0, dtype=np.int32)  # (cells, W)
    ink_counts = np.add.reduceat(row_counts, col_edges[:-1], axis=1)  # (cells, cells)
    return ink_counts / np.outer(np.diff(row_edges), np.diff(col_edges))


def measure_ink_grids(ink: np.ndarray) -> dict[str, np.ndarray]:
    """Raw grids (position), sorted fractions and their histogram (position-free), total fraction."""
    groups = {"ink fraction": np.array([ink.mean()])}
    for side in GRID_SIDES:
        fractions = cell_ink_fractions(ink, side).ravel()
        ranks = np.linspace(0, fractions.size - 1, min(SORTED_FRACTIONS_KEPT, fractions.size)).astype(int)
        groups[f"ink grid {side}x{side}"] = fractions
        groups[f"ink grid {side}x{side}, sorted"] = np.sort(fractions)[ranks]
        groups[f"ink grid {side}x{side}, histogram"] = np.histogram(fractions, DENSITY_BIN_EDGES)[0] / fractions.size
    return groups


def measure_local_density(ink: np.ndarray) -> np.ndarray:
    """Histogram of ink fraction in sliding windows, each window size's bins concatenated.

    Windows are squares of whole DENSITY_BLOCK_PX blocks stepping by half their side; the ragged
    bottom and right edges (less than a block) are left out.
    """
    blocks = block_sums(ink, DENSITY_BLOCK_PX)  # (H // b, W // b) ink pixels per block
    integral = np.zeros((blocks.shape[0] + 1, blocks.shape[1] + 1), np.int64)
    integral[1:, 1:] = blocks.cumsum(axis=0).cumsum(axis=1)  # summed-area table of the blocks
    histograms = []
    for window_blocks in DENSITY_WINDOW_BLOCKS:
        window_blocks = max(min(window_blocks, *blocks.shape), 1)
        step = max(window_blocks // 2, 1)
        starts_r = np.arange(0, blocks.shape[0] - window_blocks + 1, step)[:, None]  # window top rows, in blocks
        starts_c = np.arange(0, blocks.shape[1] - window_blocks + 1, step)[None, :]
        ends_r, ends_c = starts_r + window_blocks, starts_c + window_blocks
        counts = integral[ends_r, ends_c] - integral[starts_r, ends_c] - integral[ends_r, starts_c] + integral[starts_r, starts_c]
        fractions = counts.ravel() / (window_blocks * DENSITY_BLOCK_PX) ** 2
        histograms.append(np.histogram(fractions, DENSITY_BIN_EDGES)[0] / max(fractions.size, 1))
    return np.concatenate(histograms)


@functools.lru_cache(maxsize=4)
def radial_bin_index(shape: tuple[int, int]) -> np.ndarray:
    """(H * (W//2+1),) log-spaced radial bin of each rfft2 frequency; -1 for DC, SPECTRUM_BINS past the last edge."""
    radius = np.hypot(np.fft.fftfreq(shape[0])[:, None], np.fft.rfftfreq(shape[1])[None, :])  # cycles per px
    edges = np.geomspace(1.0 / max(shape), np.sqrt(0.5) + 1e-9, SPECTRUM_BINS + 1)
    index = np.searchsorted(edges, radius.ravel(), side="right") - 1  # below the first edge: -1 (only DC)
    return np.where(radius.ravel() == 0, -1, np.minimum(index, SPECTRUM_BINS))


def measure_power_spectrum(gray: np.ndarray) -> np.ndarray:
    """(SPECTRUM_BINS,) log10 share of the non-DC power |FFT|^2 in each radial bin."""
    centred = (gray - gray.mean()).astype(np.float32)
    power = np.abs(scipy.fft.rfft2(centred)).astype(np.float64).ravel() ** 2
    # rfft2 stores only half the columns; the others mirror them, so shares are unchanged up to the edge columns.
    index = radial_bin_index(gray.shape)
    kept = index >= 0
    per_bin = np.bincount(index[kept], weights=power[kept], minlength=SPECTRUM_BINS + 1)[:SPECTRUM_BINS]
    return np.log10(per_bin / max(per_bin.sum(), SPECTRUM_FLOOR) + SPECTRUM_FLOOR)


def sobel_gradients(gray: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(H-2, W-2) float32 Sobel x and y derivatives of the interior pixels (separable, by slicing)."""
    g = gray.astype(np.float32)
    dx = g[:, 2:] - g[:, :-2]  # (H, W-2) central difference along x
    dy = g[2:] - g[:-2]  # (H-2, W) along y
    gx = dx[:-2] + 2 * dx[1:-1] + dx[2:]  # [1, 2, 1] smoothing across
    gy = dy[:, :-2] + 2 * dy[:, 1:-1] + dy[:, 2:]
    return gx, gy


def measure_gradients(gray: np.ndarray) -> dict[str, np.ndarray]:
    """Edge-orientation histogram, edge density, and how often orientations disagree within a block."""
    gx, gy = sobel_gradients(gray)
    energy = gx * gx + gy * gy  # squared gradient magnitude
    magnitude = np.sqrt(energy)
    edge = np.flatnonzero(energy.ravel() >= GRADIENT_FLOOR**2 * energy.max())  # (e,) flat indices of edge pixels
    orientation = np.arctan2(gy.ravel()[edge], gx.ravel()[edge]) % np.pi  # both sides of a stroke agree
    orientation_bin = np.minimum((orientation * (ORIENTATION_BINS / np.pi)).astype(np.int64), ORIENTATION_BINS - 1)
    orientation_histogram = np.bincount(orientation_bin, weights=magnitude.ravel()[edge], minlength=ORIENTATION_BINS)
    groups = {
        "gradient orientation": orientation_histogram / max(orientation_histogram.sum(), 1e-9),
        "gradient density": np.array([magnitude.mean()]),
    }
    # Doubled-angle vectors (gx^2 - gy^2, 2 gx gy) cancel where orientations differ (crossings, corners,
    # tight bends); coherence is |sum of vectors| / sum of energies per block, 1 on a straight edge.
    base_px = COHERENCE_BLOCKS_PX[0]  # larger blocks are summed from these (each side a multiple of it)
    base_sums = [block_sums(part, base_px) for part in (energy, gx * gx - gy * gy, 2 * gx * gy)]
    coherence_parts = []
    for block_px in COHERENCE_BLOCKS_PX:
        block_energy, block_cos, block_sin = (block_sums(part, block_px // base_px) for part in base_sums)
        block_energy = block_energy.ravel()
        coherence = np.hypot(block_cos, block_sin).ravel() / np.maximum(block_energy, 1e-9)
        weights = block_energy / max(block_energy.sum(), 1e-9)
        histogram = np.histogram(np.clip(coherence, 0, 1), COHERENCE_BINS, range=(0, 1), weights=weights)[0]
        corner_energy = float(block_energy @ (1 - np.clip(coherence, 0, 1)))  # incoherent energy, per px below
        coherence_parts.append(np.append(histogram, corner_energy / energy.size))
    groups["gradient coherence"] = np.concatenate(coherence_parts)
    return groups


def measure_background_regions(ink: np.ndarray) -> np.ndarray:
    """Counts of 4-connected background components by log2 area bin, then the total count."""
    _, sizes_px = count_regions(~ink, ndimage.generate_binary_structure(2, 1))
    sizes_px = sizes_px[1:]
    area_bin = np.minimum(np.log2(np.maximum(sizes_px, 1)).astype(np.int64), BACKGROUND_AREA_BINS - 1)
    return np.append(np.bincount(area_bin, minlength=BACKGROUND_AREA_BINS), sizes_px.size).astype(np.float64)


def compute_generic_features(gray: np.ndarray, ink: np.ndarray) -> dict[str, np.ndarray]:
    """Named groups of (d_group,) float64 features; the same groups and lengths for every image of one size."""
    return {
        **measure_ink_grids(ink),
        "local density": measure_local_density(ink),
        "power spectrum": measure_power_spectrum(gray),
        **measure_gradients(gray),
        "background regions": measure_background_regions(ink),
    }


# ---------------------------------------------------------------------------
# Predictors of the hand-made statistics (numpy only: these rows need no scikit-learn)

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
# Learned attack on the generic features (scikit-learn, imported where used)

LEARNED_FOLDS = 5  # stratified k-fold: every image is tested once per repeat
LEARNED_REPEATS = 3  # k-fold rounds, each with its own shuffle; rows are means over all folds
BOOSTING_SETTINGS = {  # modest: 280 images x 5 folds x 3 repeats in about 15 s on one core
    "max_iter": 100,  # boosting rounds (one tree per class each)
    "learning_rate": 0.1,
    "max_leaf_nodes": 15,
    "min_samples_leaf": 10,  # ~ 5 % of a 224-image training fold
    "l2_regularization": 1.0,
    "max_features": 0.3,  # share of features each split may look at: faster, and less prone to one column
    "max_bins": 32,  # quantile bins per feature; the default 255 is 6x slower here for 1-3 points
    "early_stopping": False,  # a validation split would take a fifth of a small training fold
    "random_state": 0,  # the feature subsampling's stream
}
LEARNED_LOGISTIC_C = 0.05  # inverse L2 strength on standardised features; 500+ columns for ~200 images
RIDGE_ALPHAS = np.logspace(-1, 5, 13)  # chosen per training fold by efficient leave-one-out


def score(predicted: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
    error = np.abs(predicted - truth)
    return float(np.mean(error == 0)), float(np.mean(error <= 1))


def generic_family(group: str) -> str:
    """The feature family a generic group belongs to (one per-family row each)."""
    for prefix, family in (("ink", "ink grids"), ("gradient", "gradients")):
        if group.startswith(prefix):
            return family
    return group


def make_learned_model(kind: str):
    """A fresh, unfitted scikit-learn estimator: 'boosting', 'logistic' or 'ridge'."""
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression, RidgeCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if kind == "boosting":
        return HistGradientBoostingClassifier(**BOOSTING_SETTINGS)
    if kind == "logistic":
        return make_pipeline(StandardScaler(), LogisticRegression(C=LEARNED_LOGISTIC_C, max_iter=2000))
    if kind == "ridge":
        return make_pipeline(StandardScaler(), RidgeCV(alphas=RIDGE_ALPHAS))
    raise ValueError(f"unknown learned model {kind!r}")


def predict_learned(kind: str, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray) -> np.ndarray:
    """Class predictions; ridge regresses N and rounds it into the training label range."""
    model = make_learned_model(kind).fit(x_train, y_train)
    predicted = model.predict(x_test)
    if kind == "ridge":
        predicted = np.clip(np.rint(predicted), y_train.min(), y_train.max())
    return predicted


def learned_attacks(generic: list[dict[str, np.ndarray]]) -> list[tuple[str, str, np.ndarray]]:
    """(row name, model kind, (n, d) feature matrix) of every learned row."""
    groups = list(generic[0])
    matrices = {group: np.array([image[group] for image in generic], dtype=np.float64) for group in groups}
    everything = np.hstack(list(matrices.values()))  # (n, d) all generic features
    attacks = [
        ("generic features, gradient boosting", "boosting", everything),
        ("generic features, logistic", "logistic", everything),
        ("generic features, ridge (rounded)", "ridge", everything),
    ]
    for family in dict.fromkeys(generic_family(group) for group in groups):
        columns = [matrices[group] for group in groups if generic_family(group) == family]
        attacks.append((f"generic: {family}, logistic", "logistic", np.hstack(columns)))
    return attacks


def learned_rows(
    generic: list[dict[str, np.ndarray]], answers: np.ndarray, folds: int, repeats: int, seed: int
) -> list[dict]:
    """Mean test accuracy over repeated stratified k-fold of every learned attack.

    generic: one dict of feature groups per image; answers: (n,) true N. The
    fold count drops to the smallest class's size (at least 2), so that every
    fold can hold each class.
    """
    from sklearn.model_selection import StratifiedKFold

    smallest_class = int(np.unique(answers, return_counts=True)[1].min())
    fold_count = max(2, min(folds, smallest_class))
    attacks = learned_attacks(generic)
    rates: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in attacks}
    for repeat in range(repeats):
        # One stream per repeat, apart from the half/half splits' stream.
        shuffle_seed = int(np.random.SeedSequence(seed, spawn_key=(repeat,)).generate_state(1)[0])
        splitter = StratifiedKFold(n_splits=fold_count, shuffle=True, random_state=shuffle_seed)
        for train, test in splitter.split(np.zeros(len(answers)), answers):
            for name, kind, matrix in attacks:
                predicted = predict_learned(kind, matrix[train], answers[train], matrix[test])
                rates[name].append(score(predicted, answers[test]))
    rows = []
    for name, pairs in rates.items():
        exact, within = np.mean(np.array(pairs), axis=0)
        rows.append({"name": name, "kind": "learned", "exact": float(exact), "within_one": float(within)})
    return rows


# ---------------------------------------------------------------------------
# Audit


def chance_rates(answers: np.ndarray, classes: np.ndarray) -> tuple[float, float]:
    """Exact and within-one hit rates of a uniform guess over the classes."""
    near_class_counts = (np.abs(answers[:, None] - classes[None, :]) <= 1).sum(axis=1)
    return 1.0 / len(classes), float(np.mean(near_class_counts / len(classes)))


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


def audit(
    features: list[dict],
    answers: list[int],
    splits: int = 200,
    seed: int = 0,
    generic: list[dict[str, np.ndarray]] | None = None,
    folds: int = LEARNED_FOLDS,
    repeats: int = LEARNED_REPEATS,
) -> dict:
    """Median test accuracies over random half/half splits (see module docstring).

    features: one dict per image with the same numeric keys; answers: true N;
    generic: optional, one dict of generic feature groups per image, adds the
    learned rows (mean over `repeats` rounds of stratified `folds`-fold).
    Returns {"images", "splits", "seed", "classes", "rows", "strongest"}, plus
    "folds" and "repeats" with generic; each row is {"name", "kind", "exact",
    "within_one"} with rates in [0, 1].
    """
    if len(features) != len(answers) or len(answers) < 4:
        raise ValueError(f"need >= 4 images with one answer each, got {len(features)} features, {len(answers)} answers")
    if generic is not None and len(generic) != len(answers):
        raise ValueError(f"need one generic feature dict per answer, got {len(generic)} for {len(answers)} answers")
    if splits < 1 or folds < 2 or repeats < 1:
        raise ValueError(f"need splits >= 1, folds >= 2, repeats >= 1; got {splits}, {folds}, {repeats}")
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
    if generic is not None:
        rows += learned_rows(generic, truth, folds, repeats, seed)
    attacks = [row for row in rows if row["kind"] not in ("chance", "baseline")]
    strongest = max(attacks, key=lambda row: (row["exact"], row["within_one"]))
    report = {
        "images": len(truth),
        "splits": splits,
        "seed": seed,
        "classes": [int(c) for c in classes],
        "rows": rows,
        "strongest": strongest,
    }
    if generic is not None:
        report["folds"], report["repeats"] = folds, repeats
    return report


def format_table(report: dict) -> str:
    """Plain-text table; the last line names the strongest attack."""
    width = max(len(row["name"]) for row in report["rows"]) + 2
    lines = [f"{'statistic':<{width}}{'exact':>8}{'within ±1':>11}"]
    lines += [f"{row['name']:<{width}}{row['exact']:>8.1%}{row['within_one']:>11.1%}" for row in report["rows"]]
    best = report["strongest"]
    chance = report["rows"][0]["exact"]
    if any(row["name"] == "majority class" and row["exact"] < chance for row in report["rows"]):
        lines.append("(majority class answers the training half's commonest count; with balanced answers that is "
                     "the test half's rarest, so it sits below chance by construction)")
    tested = report["images"] - report["images"] // 2  # a split's test half
    lines.append(
        f"strongest: {best['name']} {best['exact']:.1%} exact, "
        f"{best['within_one']:.1%} within one (chance {chance:.1%}; one standard error at chance on a half "
        f"split's {tested} test images: {math.sqrt(chance * (1 - chance) / tested):.1%})"
    )
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# CLI


FEW_IMAGES = 200  # below this, say that the figures are noisy


def read_annotations(dataset_dir: Path, limit: int | None) -> tuple[list[Path], list[int]]:
    records = read_records(dataset_dir, limit)
    return [dataset_dir / record["image"] for record in records], [int(record["answer"]) for record in records]


def measure_image(image_path: str | os.PathLike) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """The worker: one image's hand-made statistics and its generic feature groups."""
    gray = load_gray(image_path)
    ink = gray < estimate_ink_threshold(gray)
    return compute_statistics(gray, ink), compute_generic_features(gray, ink)


def compute_all_features(paths: list[Path], workers: int) -> list[tuple[dict[str, float], dict[str, np.ndarray]]]:
    """(statistics, generic groups) in annotation order; --workers 1 runs without a pool."""
    if workers == 1:
        return [measure_image(path) for path in paths]
    with multiprocessing.Pool(workers) as pool:
        return list(pool.imap(measure_image, paths, chunksize=4))


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog=Path(__file__).name,
                                     description="How well do cheap image statistics predict the loop count?")
    parser.add_argument("dataset_dir", type=Path, help="folder with annotations.jsonl and the images it names")
    parser.add_argument("--limit", type=int, default=None, help="audit only the first K annotations")
    parser.add_argument(
        "--workers", type=int, default=max(1, (os.cpu_count() or 1) - 1), help="feature processes (default: cores - 1)"
    )
    parser.add_argument("--splits", type=int, default=200, help="random half/half splits to take the median over")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random splits")
    parser.add_argument("--json", type=Path, default=None, help="also write the table as JSON to this file")
    parser.add_argument("--folds", type=int, default=LEARNED_FOLDS,
                        help="stratified folds of the learned attack (fewer if a class has fewer images)")
    parser.add_argument("--repeats", type=int, default=LEARNED_REPEATS,
                        help="reshuffled k-fold rounds of the learned attack to average over")
    parser.add_argument("--max-single", type=float, nargs=2, metavar=("EXACT", "WITHIN"), default=None,
                        help="exit 1 if any single statistic beats these accuracies (fractions), e.g. 0.29 0.59")
    parser.add_argument("--max-combined", type=float, metavar="EXACT", default=None,
                        help="exit 1 if a combined model beats this exact accuracy (fraction)")
    parser.add_argument("--max-learned", type=float, metavar="EXACT", default=None,
                        help="exit 1 if a learned model on the generic features beats this exact accuracy (fraction)")
    return parser


def gate_failures(
    report: dict, max_single: list[float] | None, max_combined: float | None, max_learned: float | None = None
) -> list[str]:
    """Rows that beat the allowed accuracies: a CI gate for the balanced mode."""
    failures = []
    for row in report["rows"]:
        if max_single and row["kind"] == "statistic" and (row["exact"] > max_single[0]
                                                          or row["within_one"] > max_single[1]):
            failures.append(f"{row['name']} {row['exact']:.1%} exact, {row['within_one']:.1%} within one")
        if max_combined is not None and row["kind"] == "combined" and row["exact"] > max_combined:
            failures.append(f"{row['name']} {row['exact']:.1%} exact")
        if max_learned is not None and row["kind"] == "learned" and row["exact"] > max_learned:
            failures.append(f"{row['name']} {row['exact']:.1%} exact")
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if importlib.util.find_spec("sklearn") is None:  # imported only where the learned attacks run, at the end
        raise SystemExit(missing_test_package(parser.prog, "sklearn"))
    if args.workers < 1 or args.splits < 1 or (args.limit is not None and args.limit < 4):
        parser.error(
            f"need --workers >= 1, --splits >= 1, --limit >= 4; got {args.workers}, {args.splits}, {args.limit}"
        )
    if args.folds < 2 or args.repeats < 1:
        parser.error(f"need --folds >= 2 and --repeats >= 1; got {args.folds}, {args.repeats}")
    if args.seed < 0:
        parser.error(f"--seed must be non-negative, got {args.seed}")
    # Checked now rather than after the whole audit has run.
    if args.json is not None and (args.json.is_dir() or not args.json.parent.is_dir()):
        parser.error(f"--json {args.json} is a folder or has no folder to go in")
    try:
        paths, answers = read_annotations(args.dataset_dir, args.limit)
        if len(paths) < 4:  # the half/half splits need two images a side
            raise DatasetInputError(f"{args.dataset_dir} holds {len(paths)} images; the audit needs at least 4")
        if np.unique(answers, return_counts=True)[1].max() < 2:  # even two stratified folds need a count twice
            raise DatasetInputError(f"the learned attack's stratified folds need 2 images of some count; these "
                                    f"{len(paths)} images hold one of each")
        if len(paths) < FEW_IMAGES:
            print(f"note: {len(paths)} images; accuracies on so few move by several points from one dataset to "
                  "the next (the last line gives one standard error)", file=sys.stderr)
        workers = min(args.workers, len(paths))  # a pool bigger than the job list only costs start-up
        started = time.perf_counter()
        measured = compute_all_features(paths, workers)
        seconds = time.perf_counter() - started
    except DatasetInputError as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2
    print(
        f"features: {len(paths)} images in {seconds:.1f} s with {workers} worker(s), "
        f"{seconds * workers / len(paths):.3f} s per image per worker",
        file=sys.stderr,
    )
    from threadpoolctl import threadpool_limits  # installed with scikit-learn

    started = time.perf_counter()
    with threadpool_limits(limits=args.workers):  # the boosting's OpenMP threads and BLAS keep to --workers
        report = audit(
            [statistics for statistics, _ in measured], answers, splits=args.splits, seed=args.seed,
            generic=[generic for _, generic in measured], folds=args.folds, repeats=args.repeats,
        )
    fit_seconds = time.perf_counter() - started
    print(f"models: fitted in {fit_seconds:.1f} s", file=sys.stderr)
    print(format_table(report))
    if args.json is not None:
        report["seconds_per_image_per_worker"] = seconds * workers / len(paths)
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    failures = gate_failures(report, args.max_single, args.max_combined, args.max_learned)
    for failure in failures:
        print(f"above the allowed accuracy: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
