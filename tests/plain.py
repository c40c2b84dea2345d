"""A plain, careful implementation of the task description: the speed baseline.

tests/bench.py times this next to creation.py, as whole processes and per
image, and reports the generator's speed as a ratio. It never imports
creation.py and is not used to make the dataset.

    python tests/plain.py --n 70 --seed 0 --out /tmp/plain

It does what the description asks, the way a user who cares about speed but
adds no rules of their own would: N in [5, 11]; each loop a periodic cubic
spline (splprep per=True, k=3, s=0; splev at 900 points) through 6-10
waypoints on a jittered ring, shifted to a uniform position 55 px inside the
canvas; loops placed one at a time, a loop redrawn when its strands come
within 9 px of another strand (or of itself, far enough along it) anywhere
but near a real crossing; candidate pairs from cKDTree, tested with numpy;
strokes drawn with Pillow at 2x and box-reduced; Gaussian canvas noise; an
RGB PNG at zlib's default level; annotations.jsonl with the pixel hash.
Deliberately absent: the generator's crossing-angle, crossing-separation,
curvature, parallel-stretch and curl rules, its budgets and balanced answers.
"""

import argparse
import hashlib
import json
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw
from scipy.interpolate import splev, splprep
from scipy.spatial import cKDTree

CANVAS_PX = 1024
MARGIN_PX = 55
LOOPS = (5, 11)  # inclusive
WAYPOINTS = (6, 10)  # inclusive
MEAN_RADIUS_PX = (150.0, 275.0)
ANGLE_JITTER = 0.42  # rad
RADIUS_JITTER = 0.32  # fraction of the mean radius
POINTS_PER_LOOP = 900
MIN_GAP_PX = 9.0  # closest two strands may come away from a crossing
CROSSING_WINDOW_PX = 20.0  # arc along each strand, either side of a crossing, where they may be closer
SELF_GAP_PX = 3 * MIN_GAP_PX  # a loop's own points closer than this along it are one strand bending
ATTEMPTS_PER_LOOP, RESTARTS = 200, 50
SUPERSAMPLE, STROKE_PX = 2, 3
INK_TONE, PAPER_TONE, NOISE_SIGMA = 24.0, 232.0, 3.0  # grey levels
INK_RGB, PAPER_RGB = np.array([32, 34, 40]), np.array([243, 239, 228])
TONE_TO_RGB = np.clip(np.rint(INK_RGB + (np.arange(256)[:, None] - INK_TONE) / (PAPER_TONE - INK_TONE)
                               * (PAPER_RGB - INK_RGB)), 0, 255).astype(np.uint8)  # (256, 3)
QUESTION = (
    "How many distinct closed loops are tangled together in this image? Each loop "
    "is a single continuous curve that closes back on itself — there are no loose "
    "endpoints anywhere. All loops are drawn in the same colour and may cross other "
    "loops or themselves freely. Count the total number of distinct closed loops and "
    "report the count as a positive integer."
)
SPLINE_U = np.linspace(0.0, 1.0, POINTS_PER_LOOP, endpoint=False)


def sample_loop(rng):
    """(900, 2) points of one closed loop inside the margin, or None if it is too big to fit."""
    count = int(rng.integers(WAYPOINTS[0], WAYPOINTS[1] + 1))
    spacing = 2 * np.pi / count
    # Sorted, so jitter larger than half the spacing cannot swap neighbours into a kink.
    angles = np.sort(rng.uniform(0, 2 * np.pi) + spacing * np.arange(count)
                     + rng.uniform(-ANGLE_JITTER, ANGLE_JITTER, count))
    radii = rng.uniform(*MEAN_RADIUS_PX) * (1 + rng.uniform(-RADIUS_JITTER, RADIUS_JITTER, count))
    x, y = radii * np.cos(angles), radii * np.sin(angles)
    tck, _ = splprep([np.append(x, x[0]), np.append(y, y[0])], per=True, k=3, s=0)  # last point stands for the first
    points = np.column_stack(splev(SPLINE_U, tck))
    low = MARGIN_PX - points.min(axis=0)  # the spline overshoots its waypoints, so place it after fitting
    high = CANVAS_PX - MARGIN_PX - points.max(axis=0)
    return None if np.any(low > high) else points + rng.uniform(low, high)


def cross2(a, b):
    return a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0]


def segments_cross(p0, p1, q0, q1):
    """Which segment pairs p0p1, q0q1 (M, 2 each) cross, and where along each (0-1).  (M,) bool, (M,), (M,)"""
    dp, dq = p1 - p0, q1 - q0
    denom = cross2(dp, dq)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = cross2(q0 - p0, dq) / denom
        u = cross2(q0 - p0, dp) / denom
    return (t >= 0) & (t < 1) & (u >= 0) & (u < 1), t, u


def point_segment_distance(x, a, b):
    ab, ax = b - a, x - a
    t = np.clip(np.einsum("ij,ij->i", ax, ab) / np.maximum(np.einsum("ij,ij->i", ab, ab), 1e-12), 0, 1)
    return np.hypot(*(ax - t[:, None] * ab).T)


def segment_distance(p0, p1, q0, q1):
    """Closest distance of segment pairs that do not cross (the caller handles those).  (M,)"""
    return np.minimum.reduce([point_segment_distance(p0, q0, q1), point_segment_distance(p1, q0, q1),
                              point_segment_distance(q0, p0, p1), point_segment_distance(q1, p0, p1)])


def arc_gap(a, b, perimeter):
    gap = np.abs(a - b)
    return np.minimum(gap, perimeter - gap)  # closed curves: the short way round


class Placed:
    """The loops accepted so far as flat segment tables, with a k-d tree over segment midpoints."""

    def __init__(self):
        self.loops, self.start, self.end = [], np.zeros((0, 2)), np.zeros((0, 2))  # segment i: start[i] -> end[i]
        self.owner, self.arc, self.perimeter = np.zeros(0, int), np.zeros(0), np.zeros(0)  # per segment
        self.tree, self.longest = None, 0.0  # over segment midpoints; the longest segment, px
        self.crossings = []  # (loop, other loop) of every crossing, equal for a self-crossing

    def add(self, points, crossings):
        """Accept a loop and the crossings check_loop found for it."""
        loop = len(self.loops)
        end = np.roll(points, -1, axis=0)
        lengths = np.hypot(*(end - points).T)
        self.loops.append(points)
        self.start, self.end = np.concatenate([self.start, points]), np.concatenate([self.end, end])
        self.owner = np.concatenate([self.owner, np.full(len(points), loop)])
        self.arc = np.concatenate([self.arc, np.cumsum(lengths) - lengths / 2])
        self.perimeter = np.concatenate([self.perimeter, np.full(len(points), lengths.sum())])
        self.tree, self.longest = cKDTree((self.start + self.end) / 2), max(self.longest, lengths.max())
        self.crossings += [(loop, other if other >= 0 else loop) for other, _, _ in crossings]


def check_loop(points, placed):
    """The new loop's crossings [(other loop, arc on new, arc on other)], or None if it comes too close.

    The other loop is -1 for a self-crossing. Only pairs involving the new loop
    are tested: the placed loops passed when they were added.
    """
    start, end = points, np.roll(points, -1, axis=0)  # segment i joins point i to i + 1, the last closes the loop
    lengths = np.hypot(*(end - start).T)
    arc, perimeter = np.cumsum(lengths) - lengths / 2, lengths.sum()  # arc position of each segment's middle
    mine = (start, end, arc, np.full(len(points), perimeter), np.full(len(points), -1))  # the new loop as "other"
    tree = cKDTree((start + end) / 2)
    # Two segments can only cross if their midpoints are within one segment length, and
    # only come within MIN_GAP_PX if their midpoints are within MIN_GAP_PX + one segment length.
    longest = max(lengths.max(), placed.longest)
    i, j = tree.query_pairs(MIN_GAP_PX + longest, output_type="ndarray").T  # the new loop against itself
    gap = np.abs(i - j)
    gap = np.minimum(gap, len(points) - gap)  # circular index gap
    # Within SELF_GAP_PX along the loop two segments are one strand bending, not an approach;
    # neighbours (gap 1) share a point and never cross.
    near_self = gap > np.ceil(SELF_GAP_PX / lengths.mean())
    may_cross = (gap > 1) & (np.hypot(*(start[i] + end[i] - start[j] - end[j]).T) <= 2 * longest)
    searches = [(i, j, mine, may_cross, near_self)]
    if placed.tree is not None:  # the new loop against the placed ones
        found = tree.sparse_distance_matrix(placed.tree, MIN_GAP_PX + longest, output_type="ndarray")
        others = (placed.start, placed.end, placed.arc, placed.perimeter, placed.owner)
        searches.append((found["i"], found["j"], others, found["v"] <= longest, np.ones(len(found), dtype=bool)))
    crossings, close = [], []
    for i, j, (other_start, other_end, other_arc, other_perimeter, other_loop), may_cross, may_be_near in searches:
        ci, cj = i[may_cross], j[may_cross]
        hit, t, u = segments_cross(start[ci], end[ci], other_start[cj], other_end[cj])
        ci, cj, t, u = ci[hit], cj[hit], t[hit], u[hit]
        crossings += zip(other_loop[cj], arc[ci] + (t - 0.5) * lengths[ci],
                         other_arc[cj] + (u - 0.5) * np.hypot(*(other_end[cj] - other_start[cj]).T))
        i, j = i[may_be_near], j[may_be_near]  # crossing pairs stay in: their own crossing excuses them
        close.append((start[i], end[i], other_start[j], other_end[j], other_loop[j], arc[i], other_arc[j],
                      other_perimeter[j]))
    p0, p1, q0, q1, near_loop, near_arc, near_other_arc, near_other_perimeter = (
        np.concatenate(column) for column in zip(*close))
    excused = np.zeros(len(near_loop), dtype=bool)
    c_loop, c_arc, c_other = (np.array(column) for column in zip(*crossings)) if crossings else (np.zeros(0),) * 3
    for loop in np.unique(c_loop):  # strand by strand: a pair can only be excused by a crossing of its own two loops
        rows, cols = np.flatnonzero(near_loop == loop), c_loop == loop  # (K,) pairs, (C,) crossings

        def within(arc_new, arc_other):  # (K, C): both segments inside one crossing's window
            return ((arc_gap(near_arc[rows, None], arc_new[cols], perimeter) <= CROSSING_WINDOW_PX)
                    & (arc_gap(near_other_arc[rows, None], arc_other[cols], near_other_perimeter[rows, None])
                       <= CROSSING_WINDOW_PX))

        # A self-crossing's two strands are interchangeable: try the pair the other way round too.
        swapped = within(c_other, c_arc) if loop < 0 else False
        excused[rows] = np.any(within(c_arc, c_other) | swapped, axis=1)
    p0, p1, q0, q1 = p0[~excused], p1[~excused], q0[~excused], q1[~excused]
    # Excusing first leaves few pairs for the costlier exact distance.
    return None if np.any(segment_distance(p0, p1, q0, q1) < MIN_GAP_PX) else crossings


def sample_tangle(num_loops, rng, index):
    """num_loops loops placed one at a time; a loop that fails is redrawn, the others stay."""
    for _ in range(RESTARTS):
        placed = Placed()
        while len(placed.loops) < num_loops:
            for _ in range(ATTEMPTS_PER_LOOP):
                points = sample_loop(rng)
                crossings = None if points is None else check_loop(points, placed)
                if crossings is not None:
                    placed.add(points, crossings)
                    break
            else:
                break  # this loop will not fit among the others: start the sample again
        else:
            return placed
    raise RuntimeError(f"sample {index}: could not place {num_loops} loops in {RESTARTS} restarts")


def render(loops, rng):
    """RGB image: strokes drawn at 2x and box-reduced (antialiasing), on a noisy off-white canvas."""
    big = Image.new("L", (CANVAS_PX * SUPERSAMPLE,) * 2, 0)  # ink coverage, 255 = full
    draw = ImageDraw.Draw(big)
    for points in loops:
        # 900 points turn so little per joint that round joints (joint="curve", 40 ms an image) add nothing.
        closed = np.vstack([points, points[:1]]) * SUPERSAMPLE
        draw.line(closed.ravel().tolist(), fill=255, width=STROKE_PX * SUPERSAMPLE)
    coverage = np.asarray(big.reduce(SUPERSAMPLE), dtype=np.float32)  # (1024, 1024), 2x2 box mean
    tone = PAPER_TONE + coverage * ((INK_TONE - PAPER_TONE) / 255)
    tone += rng.standard_normal(tone.shape, dtype=np.float32) * NOISE_SIGMA  # one noise value for all channels
    tone = np.clip(np.rint(tone), 0, 255).astype(np.uint8)
    image = Image.fromarray(tone, "L")
    image.putpalette(TONE_TO_RGB.ravel().tolist())  # every pixel on the ink-paper line
    return image.convert("RGB")  # through the palette: 15x faster than numpy's fancy indexing


def make_image(seed, index):
    """Sample `index` of a run: its RGB image and annotation record (no disk access)."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(index,)))
    num_loops = int(rng.integers(LOOPS[0], LOOPS[1] + 1))
    placed = sample_tangle(num_loops, rng, index)
    image = render(placed.loops, rng)
    selfs = sum(int(a == b) for a, b in placed.crossings)
    record = {"image": f"images/tangled_loops_{index:05d}.png", "width": CANVAS_PX, "height": CANVAS_PX,
              "num_loops": num_loops, "question": QUESTION, "answer": num_loops, "index": index, "seed": seed,
              "num_crossings": len(placed.crossings) - selfs, "num_self_crossings": selfs,
              "pixel_sha256": hashlib.sha256(image.tobytes()).hexdigest()}
    return image, record


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20, help="number of images")
    parser.add_argument("--seed", type=int, default=0, help="run seed; sample i draws from SeedSequence(seed, (i,))")
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--quiet", action="store_true", help="print nothing")
    args = parser.parse_args()
    (args.out / "images").mkdir(parents=True, exist_ok=True)
    clock = time.perf_counter()
    with open(args.out / "annotations.jsonl", "w", encoding="utf-8") as annotations:
        for index in range(args.n):
            image, record = make_image(args.seed, index)
            image.save(args.out / record["image"], format="PNG")  # Pillow's default: zlib level 6
            annotations.write(json.dumps(record, ensure_ascii=False) + "\n")
    if not args.quiet:
        seconds = time.perf_counter() - clock
        print(f"{args.n} images in {seconds:.1f} s: {args.n / seconds:.2f} images/s")


if __name__ == "__main__":
    main()
