"""Independent recount of closed loops in a tangled-loops PNG.

Reads only pixels: it never imports the generator, so a generator bug cannot
hide itself by being shared with its checker.

Method
------
1. Ink mask: threshold halfway between the paper tone (image median) and the
   ink tone (a robust low percentile of clearly dark pixels).
2. Skeleton of the mask. Pixels with three or more skeleton neighbours are
   junction pixels; every crossing leaves a few. Each is grown into a small
   disk, a "crossing region", that swallows the skeleton's distortion there.
3. The skeleton outside the regions falls apart into clean strand segments.
   Each segment end touches one region, or is a free tip (a skeleton spur).
4. Regions joined by a tiny segment, or left with an odd number of strand
   ends, are merged into one cluster: every strand that enters a real
   crossing also leaves it, so a cluster's end count is even.
5. Inside each cluster the ends are paired. A lone X crossing (four ends)
   pairs ends opposite each other around it, which needs no geometry. A
   bigger cluster takes the pairing that bends least, judged from each end's
   tangent and curvature just outside the cluster, and that best explains the
   cluster's ink with smooth strands.
6. Walking segments through those pairings gives the loops.

    python tests/recount.py DATASET_DIR [--limit K] [--workers W] [--min-accuracy F] [--overlay-dir DIR]
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from multiprocessing import Pool
from pathlib import Path

import numpy as np
from PIL import Image
from scipy import ndimage

from dataset_records import DatasetInputError, OneLineParser, missing_test_package, read_records, readable_image

try:
    from skimage.morphology import skeletonize
except ModuleNotFoundError as missing:
    raise SystemExit(missing_test_package("recount.py", missing.name)) from None

EIGHT = np.ones((3, 3), dtype=bool)
NEIGHBOUR_OFFSETS = [(-1, -1), (-1, 0), (-1, 1), (0, -1), (0, 1), (1, -1), (1, 0), (1, 1)]

# Lengths that scale with the stroke are given in stroke widths (w) with a floor in px.
REGION_RADIUS_STROKES, REGION_RADIUS_EXTRA_PX = 0.5, 2.0  # skeleton bends toward a junction within ~w/2
TINY_SEGMENT_STROKES, TINY_SEGMENT_MIN_PX = 1.0, 3.0  # a link this short is part of the crossing
SPUR_STROKES, SPUR_MIN_PX = 3.0, 10.0  # longest skeleton spur that noise or stroke corners make
FIT_STROKES, FIT_MIN_PX = 6.0, 20.0  # skeleton length used to measure an end's tangent
FAR_END_TRIM_STROKES = 1.0  # skeleton left unused next to the junction at a short segment's far end

MIN_CROSSING_DEG = 30.0  # shallowest crossing the benchmark draws
# Two strands crossing at 30 deg overlap along w/sin(15 deg); four ends spread
# wider than that (with slack) are not one X but e.g. two crossings of the
# same pair fused into a lens, where the opposite-ends rule would be wrong.
SINGLE_CROSSING_SPAN_SLACK = 1.3
MAX_CURVATURE_PER_PX = 1.0 / 8.0  # loops never bend tighter than an 8 px radius
SKELETON_NOISE_PX = 0.4  # scatter of skeleton pixels about the true centre line
TYPICAL_CURVATURE_PER_PX = 0.02  # prior spread of loop curvature (radius ~50 px)
INK_WEIGHT_PER_PX = 0.01  # 10 px of strand over paper or ink left unexplained ~ (18 deg)^2 of bending
AMBIGUOUS_MARGIN = 0.05  # a cluster whose runner-up pairing costs less extra than this is flagged
EXHAUSTIVE_MATCHING_MAX_ENDS = 10  # (10-1)!! = 945 pairings: cheap to list them all
DP_MATCHING_MAX_ENDS = 24  # the subset DP takes ~0.25 s at 24 ends, ~3x more per extra pair


@dataclass(frozen=True)
class Scales:
    """Pixel lengths for one image, derived from its stroke width."""

    width_px: float
    region_radius_px: float
    tiny_segment_px: float
    spur_px: float
    fit_px: int
    far_end_trim_px: int
    single_crossing_span_px: float  # widest a lone X crossing's four ends can spread

    @staticmethod
    def for_width(width_px: float) -> Scales:
        region_radius_px = REGION_RADIUS_STROKES * width_px + REGION_RADIUS_EXTRA_PX
        overlap_half_px = 0.5 * width_px / np.sin(np.radians(0.5 * MIN_CROSSING_DEG))
        return Scales(
            width_px=width_px,
            region_radius_px=region_radius_px,
            tiny_segment_px=max(TINY_SEGMENT_MIN_PX, TINY_SEGMENT_STROKES * width_px),
            spur_px=max(SPUR_MIN_PX, SPUR_STROKES * width_px),
            fit_px=int(round(max(FIT_MIN_PX, FIT_STROKES * width_px))),
            far_end_trim_px=int(np.ceil(FAR_END_TRIM_STROKES * width_px)),
            single_crossing_span_px=SINGLE_CROSSING_SPAN_SLACK * 2 * (overlap_half_px + region_radius_px),
        )


@dataclass(frozen=True)
class StrandEnd:
    """One end of a clean strand segment, seen from the cluster it enters."""

    segment: int
    position_px: np.ndarray  # (x, y), smoothed position where the segment leaves the region
    tangent_in: np.ndarray  # unit (x, y) direction of travel into the cluster
    curvature_in_per_px: float  # signed curvature while travelling into the cluster


@dataclass
class SkeletonGraph:
    """Strand segments between crossing regions.

    ends[seg] lists the segment's two ends as ((row, col), region), region 0
    meaning a free tip. Segments without ends are crossing-free closed loops.
    """

    region_labels: np.ndarray
    n_regions: int
    region_boxes: list[tuple[slice, slice]]  # bounding box of region k at index k-1
    segment_labels: np.ndarray
    segment_sizes_px: np.ndarray
    ends: dict[int, list[tuple[tuple[int, int], int]]]
    closed: list[int]


class UnionFind:
    def __init__(self, n: int):
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, a: int, b: int) -> None:
        self.parent[self.find(a)] = self.find(b)


# ---------------------------------------------------------------------------
# Pixels to skeleton graph


def load_gray(path_or_array) -> np.ndarray:
    """Grey levels as float32; palette and colour PNGs go through luminance."""
    if isinstance(path_or_array, np.ndarray):
        arr = path_or_array
        if arr.ndim == 3:
            arr = np.asarray(Image.fromarray(arr.astype(np.uint8)).convert("L"))
        return arr.astype(np.float32)
    with readable_image(path_or_array), Image.open(path_or_array) as im:
        return np.asarray(im.convert("L"), dtype=np.float32)


def ink_mask(gray: np.ndarray) -> tuple[np.ndarray, float]:
    """Binary ink mask and the threshold used.

    Ink covers a small fraction of the canvas, so the median is paper. The ink
    tone is taken from pixels far darker than paper noise, so antialiased edge
    pixels do not drag it towards paper.
    """
    sample = gray[::3, ::3]  # a ninth of the pixels pins both medians down plenty
    paper = float(np.median(sample))
    noise_sigma = 1.4826 * float(np.median(np.abs(sample - paper)))
    dark = gray[gray < paper - max(6.0 * noise_sigma, 20.0)]
    ink = float(np.percentile(dark, 10)) if dark.size else float(gray.min())
    threshold = 0.5 * (paper + ink)
    smoothed = ndimage.gaussian_filter(gray, 0.7)  # calms noisy edges that breed skeleton spurs
    return smoothed < threshold, threshold


def neighbour_count(mask: np.ndarray) -> np.ndarray:
    """Number of 8-neighbours set, for every pixel."""
    m = mask.astype(np.uint8)
    return ndimage.convolve(m, EIGHT.astype(np.uint8), mode="constant") - m


def stroke_width_px(mask: np.ndarray, skeleton: np.ndarray) -> float:
    """Mean stroke width: ink area over centre-line length."""
    return float(mask.sum()) / max(float(skeleton.sum()), 1.0)


def paint_disks(centres: np.ndarray, radius_px: float) -> np.ndarray:
    """Union of disks around every set pixel (cheaper than a distance
    transform because junction pixels are few)."""
    reach = int(np.floor(radius_px))
    dr, dc = np.mgrid[-reach : reach + 1, -reach : reach + 1]
    inside = dr**2 + dc**2 <= radius_px**2
    dr, dc = dr[inside], dc[inside]
    r, c = np.nonzero(centres)
    rows = np.clip(r[:, None] + dr[None, :], 0, centres.shape[0] - 1)
    cols = np.clip(c[:, None] + dc[None, :], 0, centres.shape[1] - 1)
    out = np.zeros_like(centres, dtype=bool)
    out[rows, cols] = True
    return out


def skeleton_graph(skeleton: np.ndarray, scales: Scales) -> SkeletonGraph:
    """Cut the skeleton at crossing regions into segments and find their ends."""
    junctions = skeleton & (neighbour_count(skeleton) >= 3)
    regions = paint_disks(junctions, scales.region_radius_px)
    region_labels, n_regions = ndimage.label(regions, structure=EIGHT)
    free = skeleton & ~regions
    segment_labels, n_segments = ndimage.label(free, structure=EIGHT)
    sizes = np.bincount(segment_labels.ravel(), minlength=n_segments + 1)

    # An end is a free pixel with at most one free neighbour; the region it
    # touches is the one its skeleton runs on into.
    free_count = neighbour_count(free)
    end_r, end_c = np.nonzero(free & (free_count <= 1))
    touching_regions = np.pad(np.where(skeleton, region_labels, 0), 1)
    ends: dict[int, list[tuple[tuple[int, int], int]]] = {}
    for r, c in zip(end_r.tolist(), end_c.tolist()):
        window = touching_regions[r : r + 3, c : c + 3]
        labels = [int(v) for v in np.unique(window[window > 0])]
        seg = int(segment_labels[r, c])
        if free_count[r, c] == 0:  # a one-pixel segment has both its ends here
            pair = labels[:2] if len(labels) >= 2 else (labels * 2 or [0, 0])
            ends[seg] = [((r, c), pair[0]), ((r, c), pair[1])]
        else:
            ends.setdefault(seg, []).append(((r, c), labels[0] if labels else 0))
    closed = [s for s in range(1, n_segments + 1) if s not in ends]
    boxes = ndimage.find_objects(region_labels)
    return SkeletonGraph(region_labels, n_regions, boxes, segment_labels, sizes, ends, closed)


# ---------------------------------------------------------------------------
# Segments to clusters


def triage_segments(graph: SkeletonGraph, scales: Scales, clusters: UnionFind) -> tuple[dict, int]:
    """Keep the segments that are strands; tiny links merge their two regions.

    Returns (kept segment ends by segment, number of long segments with two
    free tips, which a valid image cannot have).
    """
    kept = {}
    broken = 0
    for seg, seg_ends in graph.ends.items():
        length_px = float(graph.segment_sizes_px[seg])
        regions = [reg for _, reg in seg_ends]
        n_free = regions.count(0)
        if n_free and length_px < scales.spur_px:
            continue  # spur or speck
        if n_free == 2:
            broken += 1
        if n_free == 0 and length_px < scales.tiny_segment_px:
            clusters.union(regions[0], regions[1])
            continue
        kept[seg] = seg_ends
    return kept, broken


def merge_odd_clusters(kept: dict, sizes_px: np.ndarray, clusters: UnionFind) -> int:
    """Merge clusters with an odd end count along their shortest shared segment.

    An odd cluster is a crossing split in two (shallow angle, thick stroke),
    or two crossings close enough to blur together. Returns the merge count.
    """
    merges = 0
    while True:
        degree: dict[int, int] = {}
        for seg_ends in kept.values():
            for _, reg in seg_ends:
                if reg:
                    root = clusters.find(reg)
                    degree[root] = degree.get(root, 0) + 1
        odd = {root for root, d in degree.items() if d % 2}
        links = []
        for seg, seg_ends in kept.items():
            roots = [clusters.find(reg) for _, reg in seg_ends if reg]
            if len(roots) == 2 and roots[0] != roots[1] and roots[0] in odd and roots[1] in odd:
                links.append((sizes_px[seg], seg, roots))
        if not links:
            return merges
        _, seg, roots = min(links)
        clusters.union(roots[0], roots[1])
        del kept[seg]
        merges += 1


def drop_interior_segments(kept: dict, sizes_px: np.ndarray, clusters: UnionFind, tiny_px: float) -> None:
    """Tiny segments with both ends in one (merged) cluster are its interior."""
    for seg in [s for s in kept if sizes_px[s] < tiny_px]:
        regions = [reg for _, reg in kept[seg]]
        if all(regions) and len({clusters.find(reg) for reg in regions}) == 1:
            del kept[seg]


# ---------------------------------------------------------------------------
# Strand ends


def walk_path(start: tuple[int, int], on_path: np.ndarray, max_px: int) -> np.ndarray:
    """Pixels (row, col) of a junction-free skeleton path from one of its ends."""
    rows, cols = on_path.shape
    path = [start]
    seen = {start}
    current = start
    while len(path) < max_px:
        nxt = None
        for dr, dc in NEIGHBOUR_OFFSETS:
            q = (current[0] + dr, current[1] + dc)
            if 0 <= q[0] < rows and 0 <= q[1] < cols and on_path[q] and q not in seen:
                # prefer edge neighbours so a staircase is walked pixel by pixel
                if nxt is None or abs(dr) + abs(dc) == 1:
                    nxt = q
        if nxt is None:
            break
        path.append(nxt)
        seen.add(nxt)
        current = nxt
    return np.array(path, dtype=float)


def fit_end(path_rc: np.ndarray, fallback_out: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Position, inward unit tangent and inward curvature at a segment end.

    path_rc runs away from the cluster. A quadratic in arc length smooths the
    one-pixel staircase of the skeleton. Its second-order term carries a ridge
    prior: on a long path the pixels decide the curvature, on a short one the
    staircase would swamp it, so it shrinks towards a straight line.
    """
    xy = path_rc[:, ::-1]
    if len(xy) < 3:
        out = fallback_out / (np.linalg.norm(fallback_out) + 1e-9)
        return xy[0], -out, 0.0
    arc = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(xy, axis=0), axis=1))])
    design = np.stack([np.ones_like(arc), arc, arc**2], axis=1)
    # x'' = curvature for unit speed, so the s^2 coefficient has prior spread curvature/2
    ridge = (SKELETON_NOISE_PX / (0.5 * TYPICAL_CURVATURE_PER_PX)) ** 2
    normal = design.T @ design + np.diag([0.0, 0.0, ridge])
    (x0, vx, ax), (y0, vy, ay) = np.linalg.solve(normal, design.T @ xy).T
    speed = np.hypot(vx, vy) + 1e-9
    curvature_out = (vx * 2 * ay - vy * 2 * ax) / speed**3
    curvature_out = float(np.clip(curvature_out, -MAX_CURVATURE_PER_PX, MAX_CURVATURE_PER_PX))
    # reversing the direction of travel flips both tangent and signed curvature
    return np.array([x0, y0]), -np.array([vx, vy]) / speed, -curvature_out


def measure_ends(
    graph: SkeletonGraph, kept: dict, clusters: UnionFind, scales: Scales
) -> tuple[dict[int, list[StrandEnd]], int]:
    """Strand ends grouped by cluster root, and the count of free tips."""
    by_cluster: dict[int, list[StrandEnd]] = {}
    free_tips = 0
    fit_px = scales.fit_px
    for seg, seg_ends in kept.items():
        for (r, c), reg in seg_ends:
            if not reg:
                free_tips += 1
                continue
            r0, c0 = max(r - fit_px, 0), max(c - fit_px, 0)
            window = graph.segment_labels[r0 : r + fit_px + 1, c0 : c + fit_px + 1] == seg
            path = walk_path((r - r0, c - c0), window, fit_px) + [r0, c0]
            if len(path) < fit_px and len(path) - scales.far_end_trim_px >= 3:
                # the walk hit the segment's far end, whose own junction bends the skeleton
                path = path[: len(path) - scales.far_end_trim_px]
            if len(path) < 3:  # too short for a tangent: point away from the region instead
                box = graph.region_boxes[reg - 1]
                centre = np.array([(box[0].start + box[0].stop - 1) / 2, (box[1].start + box[1].stop - 1) / 2])
                outward_xy = (np.array([r, c]) - centre)[::-1]
            else:
                outward_xy = np.zeros(2)
            position, tangent, curvature = fit_end(path, outward_xy)
            by_cluster.setdefault(clusters.find(reg), []).append(StrandEnd(seg, position, tangent, curvature))
    return by_cluster, free_tips


# ---------------------------------------------------------------------------
# Pairing strand ends inside a cluster


def signed_angle(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Angle turning u onto v, radians in (-pi, pi]; works on (..., 2) arrays."""
    cross = u[..., 0] * v[..., 1] - u[..., 1] * v[..., 0]
    dot = (u * v).sum(-1)
    return np.arctan2(cross, dot)


def pair_costs(ends: list[StrandEnd]) -> np.ndarray:
    """Bending misfit of joining end i to end j through the cluster.

    A strand whose curvature changes linearly from k0 to k1 over a chord of
    length L leaves at angle L(2k0+k1)/6 to the chord and arrives at
    L(k0+2k1)/6. The misfit compares those predictions, from the curvature
    measured outside the cluster, with the angles actually needed. Continuing
    straight through an X costs ~0; turning onto the other strand of a 30
    degree crossing costs ~2*(15 deg)^2.
    """
    pos = np.array([e.position_px for e in ends])
    tan = np.array([e.tangent_in for e in ends])
    curv = np.array([e.curvature_in_per_px for e in ends])
    chord = pos[None, :, :] - pos[:, None, :]
    length = np.linalg.norm(chord, axis=-1)
    chord_dir = chord / np.maximum(length, 1e-9)[..., None]
    leave = signed_angle(np.broadcast_to(tan[:, None, :], chord.shape), chord_dir)
    arrive = signed_angle(chord_dir, np.broadcast_to(-tan[None, :, :], chord.shape))
    k_start = curv[:, None]
    k_end = -curv[None, :]  # end j is travelled outwards
    leave_pred = length * (2 * k_start + k_end) / 6
    arrive_pred = length * (k_start + 2 * k_end) / 6
    cost = (leave - leave_pred) ** 2 + (arrive - arrive_pred) ** 2
    np.fill_diagonal(cost, np.inf)
    return cost


@dataclass(frozen=True)
class InkEvidence:
    """How well hypothetical strands through a cluster agree with its ink.

    Each pair (i, j) is joined by a cubic Hermite curve leaving end i along
    its tangent and arriving at end j along its tangent: the shape a smooth
    strand through the cluster would have.
    """

    off_ink_px: np.ndarray  # (n, n) length of the joining curve that runs over paper
    explains: np.ndarray  # (n, n, k) which of the cluster's k ink pixels the curve covers
    width_px: float


def hermite_samples(p0: np.ndarray, t0: np.ndarray, p1: np.ndarray, t1: np.ndarray, step_px: float = 0.5) -> np.ndarray:
    """Points (x, y) along the cubic from p0 heading t0 to p1 heading t1."""
    chord_px = float(np.linalg.norm(p1 - p0))
    s = np.linspace(0.0, 1.0, max(int(chord_px / step_px), 4))[:, None]
    h00, h10 = 2 * s**3 - 3 * s**2 + 1, s**3 - 2 * s**2 + s
    h01, h11 = -2 * s**3 + 3 * s**2, s**3 - s**2
    return h00 * p0 + h10 * chord_px * t0 + h01 * p1 + h11 * chord_px * t1


def ink_evidence(
    ends: list[StrandEnd], mask: np.ndarray, cluster_area: np.ndarray, origin_rc: tuple[int, int], width_px: float
) -> InkEvidence:
    """Evidence for every pairing from the ink inside one cluster.

    mask and cluster_area are windows of the image whose top-left pixel is
    origin_rc; cluster_area marks the crossing regions merged into the cluster.
    """
    n = len(ends)
    paper_distance_px = ndimage.distance_transform_edt(~mask)
    ink_rc = np.argwhere(mask & cluster_area).astype(float)
    reach_px = 0.5 * width_px + 1.0  # a strand centre this close paints the pixel
    off_ink = np.full((n, n), np.inf)
    explains = np.zeros((n, n, len(ink_rc)), dtype=bool)
    offset_xy = np.array([origin_rc[1], origin_rc[0]], dtype=float)
    top = np.array(mask.shape) - 1
    for i in range(n):
        for j in range(i + 1, n):
            a, b = ends[i], ends[j]
            xy = hermite_samples(a.position_px - offset_xy, a.tangent_in, b.position_px - offset_xy, -b.tangent_in)
            rc = np.round(xy[:, ::-1]).astype(int)
            inside = (rc >= 0).all(1) & (rc <= top).all(1)
            rc = rc.clip(0, top)
            over_paper = ~inside | (paper_distance_px[rc[:, 0], rc[:, 1]] > 1.0)
            step_px = np.linalg.norm(np.diff(xy, axis=0), axis=1).mean()
            off_ink[i, j] = off_ink[j, i] = step_px * float(over_paper.sum())
            if len(ink_rc):
                d2 = ((ink_rc[:, None, :] - xy[None, :, ::-1]) ** 2).sum(-1).min(axis=1)
                explains[i, j] = explains[j, i] = d2 <= reach_px**2
    return InkEvidence(off_ink, explains, width_px)


def cluster_evidence(
    ends: list[StrandEnd], mask: np.ndarray, graph: SkeletonGraph, region_ids: list[int], width_px: float
) -> InkEvidence:
    """Ink evidence in a window around one cluster's crossing regions."""
    boxes = [graph.region_boxes[r - 1] for r in region_ids]
    margin_px = 2
    r0 = max(min(b[0].start for b in boxes) - margin_px, 0)
    c0 = max(min(b[1].start for b in boxes) - margin_px, 0)
    r1 = max(b[0].stop for b in boxes) + margin_px
    c1 = max(b[1].stop for b in boxes) + margin_px
    area = np.isin(graph.region_labels[r0:r1, c0:c1], region_ids)
    return ink_evidence(ends, mask[r0:r1, c0:c1], area, (r0, c0), width_px)


def all_matchings(n: int) -> list[list[tuple[int, int]]]:
    """Every perfect matching of n (even) items."""

    def rec(items: list[int]) -> list[list[tuple[int, int]]]:
        if not items:
            return [[]]
        first, rest = items[0], items[1:]
        out = []
        for k, partner in enumerate(rest):
            for tail in rec(rest[:k] + rest[k + 1 :]):
                out.append([(first, partner)] + tail)
        return out

    return rec(list(range(n)))


def dp_matching(cost: np.ndarray) -> list[tuple[int, int]]:
    """Least-cost perfect matching by dynamic programming over subsets."""
    n = len(cost)
    full = (1 << n) - 1
    memo: dict[int, tuple[float, int]] = {full: (0.0, -1)}

    def solve(mask: int) -> float:
        if mask in memo:
            return memo[mask][0]
        i = (~mask & (mask + 1)).bit_length() - 1  # lowest unmatched end
        best, best_j = np.inf, -1
        for j in range(i + 1, n):
            if not mask >> j & 1:
                c = cost[i, j] + solve(mask | 1 << i | 1 << j)
                if c < best:
                    best, best_j = c, j
        memo[mask] = (best, best_j)
        return best

    solve(0)
    pairs, mask = [], 0
    while mask != full:
        i = (~mask & (mask + 1)).bit_length() - 1
        j = memo[mask][1]
        pairs.append((i, j))
        mask |= 1 << i | 1 << j
    return pairs


def greedy_matching(cost: np.ndarray) -> list[tuple[int, int]]:
    """Cheapest-pair-first matching; only for clusters too big to solve exactly."""
    c = cost.copy()
    pairs = []
    while np.isfinite(c).any():
        i, j = np.unravel_index(np.argmin(c), c.shape)
        pairs.append((int(i), int(j)))
        c[[i, j], :] = np.inf
        c[:, [i, j]] = np.inf
    return pairs


def end_spread_px(ends: list[StrandEnd]) -> float:
    """Largest distance between two ends of a cluster."""
    pos = np.array([e.position_px for e in ends])
    return float(np.linalg.norm(pos[:, None] - pos[None], axis=-1).max())


def opposite_pairing(ends: list[StrandEnd]) -> list[tuple[int, int]]:
    """A lone X crossing: the strands cross, so each end continues to the end
    opposite it around the cluster. Needs no tangent at all."""
    pos = np.array([e.position_px for e in ends])
    centre = pos.mean(axis=0)
    order = np.argsort(np.arctan2(pos[:, 1] - centre[1], pos[:, 0] - centre[0]))
    return [(int(order[0]), int(order[2])), (int(order[1]), int(order[3]))]


def match_cluster(ends: list[StrandEnd], evidence: InkEvidence | None = None) -> tuple[list[tuple[int, int]], float]:
    """Pair the ends of a cluster of six or more by least total cost.

    Returns (pairs, margin): margin is the extra cost of the runner-up
    pairing, nan when the cluster is too big to rank every pairing.
    """
    n = len(ends)
    cost = pair_costs(ends)
    if evidence is not None:
        cost = cost + INK_WEIGHT_PER_PX * evidence.off_ink_px
    if n > DP_MATCHING_MAX_ENDS:
        return greedy_matching(cost), np.nan
    if n > EXHAUSTIVE_MATCHING_MAX_ENDS:
        return dp_matching(cost), np.nan
    candidates = np.array(all_matchings(n))  # (m, n/2, 2)
    totals = cost[candidates[..., 0], candidates[..., 1]].sum(axis=1)
    if evidence is not None and evidence.explains.shape[2]:
        covered = evidence.explains[candidates[..., 0], candidates[..., 1]].any(axis=1)
        unexplained_px = (~covered).sum(axis=1)
        totals = totals + INK_WEIGHT_PER_PX * unexplained_px / evidence.width_px
    order = np.argsort(totals)
    best = [(int(i), int(j)) for i, j in candidates[order[0]]]
    return best, float(totals[order[1]] - totals[order[0]])


# ---------------------------------------------------------------------------
# Whole image


def save_overlay(gray: np.ndarray, graph: SkeletonGraph, loop_of_segment: dict[int, int], path) -> None:
    """Paint every recounted loop in its own colour over a faded copy of the image;
    crossing regions show pink."""
    rng = np.random.default_rng(0)
    lut = np.zeros((graph.segment_labels.max() + 1, 3), dtype=np.uint8)
    colours = {root: rng.integers(0, 256, 3) for root in set(loop_of_segment.values())}
    for seg, root in loop_of_segment.items():
        lut[seg] = colours[root]
    rgb = np.stack([(200 + 0.2 * gray).clip(0, 255).astype(np.uint8)] * 3, axis=-1)
    rgb[graph.region_labels > 0] = (255, 200, 200)
    painted = ndimage.grey_dilation(graph.segment_labels, size=(3, 3))
    on_loop = np.isin(painted, list(loop_of_segment))
    rgb[on_loop] = lut[painted[on_loop]]
    Image.fromarray(rgb).save(path)


def recount_image(path_or_array, overlay_path=None) -> dict:
    """Count closed loops in one image; returns the count and diagnostics.

    overlay_path, if given, receives a PNG with each recounted loop in its own colour.
    """
    gray = load_gray(path_or_array)
    mask, threshold = ink_mask(gray)
    skeleton = skeletonize(mask)
    scales = Scales.for_width(stroke_width_px(mask, skeleton))
    graph = skeleton_graph(skeleton, scales)

    clusters = UnionFind(graph.n_regions + 1)
    kept, broken_segments = triage_segments(graph, scales, clusters)
    parity_merges = merge_odd_clusters(kept, graph.segment_sizes_px, clusters)
    drop_interior_segments(kept, graph.segment_sizes_px, clusters, scales.tiny_segment_px)
    ends_by_cluster, unpaired_ends = measure_ends(graph, kept, clusters, scales)
    regions_of_cluster: dict[int, list[int]] = {}
    for reg in range(1, graph.n_regions + 1):
        regions_of_cluster.setdefault(clusters.find(reg), []).append(reg)

    loops = UnionFind(len(graph.segment_sizes_px))
    odd_clusters = unranked_clusters = lens_candidates = 0
    margins = [np.inf]
    for root, ends in ends_by_cluster.items():
        if len(ends) % 2:
            odd_clusters += 1
            unpaired_ends += 1
            # leave dangling the end that fits worst with any other
            worst = int(np.argmax(pair_costs(ends).min(axis=1)))
            ends = ends[:worst] + ends[worst + 1 :]
        if len(ends) == 2:
            pairs = [(0, 1)]
        elif len(ends) == 4 and end_spread_px(ends) <= scales.single_crossing_span_px:
            pairs = opposite_pairing(ends)
        elif len(ends) >= 4:
            lens_candidates += len(ends) == 4
            evidence = cluster_evidence(ends, mask, graph, regions_of_cluster[root], scales.width_px)
            pairs, margin = match_cluster(ends, evidence)
            unranked_clusters += np.isnan(margin)
            margins.append(margin if np.isfinite(margin) else np.inf)
        else:
            pairs = []
        for i, j in pairs:
            loops.union(ends[i].segment, ends[j].segment)

    strands = list(kept) + graph.closed
    if overlay_path is not None:
        save_overlay(gray, graph, {s: loops.find(s) for s in strands}, overlay_path)
    min_margin = float(min(margins))
    return {
        "loops": len({loops.find(s) for s in strands}),
        "junction_clusters": len(ends_by_cluster),
        "segments": len(strands),
        "crossing_free_loops": len(graph.closed),
        "max_cluster_ends": max((len(e) for e in ends_by_cluster.values()), default=0),
        "parity_merges": parity_merges,
        "lens_candidates": int(lens_candidates),
        "unpaired_ends": unpaired_ends,
        "odd_clusters": odd_clusters,
        "broken_segments": broken_segments,
        "unranked_big_clusters": int(unranked_clusters),
        "min_pairing_margin": round(min_margin, 4) if np.isfinite(min_margin) else None,
        "stroke_width_px": round(scales.width_px, 2),
        "ink_threshold": round(threshold, 1),
        "ambiguous": bool(unpaired_ends or broken_segments or unranked_clusters or min_margin < AMBIGUOUS_MARGIN),
    }


# ---------------------------------------------------------------------------
# CLI


def _recount_record(args: tuple[str, dict, str | None]) -> tuple[dict, dict, float]:
    root, record, overlay_dir = args
    start = time.perf_counter()
    result = recount_image(Path(root) / record["image"])
    seconds = time.perf_counter() - start
    if overlay_dir is not None and result["loops"] != record["answer"]:
        recount_image(Path(root) / record["image"], Path(overlay_dir) / Path(record["image"]).name)
    return record, result, seconds


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog=Path(__file__).name, description=__doc__.splitlines()[0])
    parser.add_argument("dataset_dir", type=Path, help="folder holding annotations.jsonl and the images it names")
    parser.add_argument("--limit", type=int, default=None, help="recount only the first K images")
    parser.add_argument("--workers", type=int, default=1, help="processes; 1 runs without a pool (default 1)")
    parser.add_argument("--min-accuracy", type=float, default=None, help="exit 1 when the exact fraction is below this")
    parser.add_argument("--overlay-dir", type=Path, default=None, help="write a loop-coloured PNG for every mismatch")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.workers < 1 or (args.limit is not None and args.limit < 1):
        parser.error(f"need --workers >= 1 and --limit >= 1; got {args.workers}, {args.limit}")
    if args.min_accuracy is not None and not 0 <= args.min_accuracy <= 1:  # nan too: it would pass every dataset
        parser.error(f"--min-accuracy is a fraction from 0 to 1, got {args.min_accuracy}")
    try:
        records = read_records(args.dataset_dir, args.limit)
        if args.overlay_dir is not None:
            try:
                args.overlay_dir.mkdir(parents=True, exist_ok=True)
            except OSError as error:  # a file there, or a path under one
                parser.error(f"--overlay-dir {args.overlay_dir} is no folder that can be made "
                             f"({error.strerror or error})")
        overlay_dir = str(args.overlay_dir) if args.overlay_dir is not None else None
        jobs = [(str(args.dataset_dir), r, overlay_dir) for r in records]
        start = time.perf_counter()
        workers = min(args.workers, len(jobs))  # a pool bigger than the job list only costs start-up
        if workers > 1:
            with Pool(workers) as pool:
                results = pool.map(_recount_record, jobs, chunksize=1)
        else:
            results = [_recount_record(j) for j in jobs]
        wall_s = time.perf_counter() - start
    except DatasetInputError as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2

    correct = 0
    for record, result, _ in results:
        if result["loops"] == record["answer"]:
            correct += 1
        else:
            print(f"MISMATCH {record['image']}: answer {record['answer']} recount {json.dumps(result)}")
    total = len(results)
    per_image_s = sum(s for _, _, s in results) / max(total, 1)
    flagged = sum(r["ambiguous"] for _, r, _ in results)
    print(f"{total} images, {per_image_s:.2f} s/image/core, wall {wall_s:.1f} s, {flagged} flagged ambiguous")
    print(f"recount: {correct}/{total} exact")
    if args.min_accuracy is not None and correct < args.min_accuracy * total:
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
