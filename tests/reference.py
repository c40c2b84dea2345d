"""Plain prototype of the tangled-loops task description: the speed baseline.

tests/bench.py times this next to creation.py in the same run on the same
machine and reports the generator's speed as a ratio of images/s. It is not
used to produce the dataset and must not import creation.py.

    python tests/reference.py --n 20 --seed 0 --out /tmp/refout

It follows the "Generation Procedure" of the task description the way a
first prototype would: N loops (5-11), each a periodic cubic spline through
6-10 waypoints on a jittered ring, dense-sampled at 900 points; all crossings
found by vectorised segment intersection; a sample rejected when two strokes
come within ~9 px of each other away from a real crossing; strokes drawn at 2x
and downsampled, noise added, saved as a default (zlib level 6) RGB PNG.

One liberty: rejecting the whole sample almost never succeeds at N >= 8, so
only the offending loop is redrawn (bounded attempts, then the sample starts
over). Deliberately omitted are the real generator's extra rules: minimum
crossing angle, separation between crossings, caps on crossings per loop,
the balanced loop-shape sampler, its anti-shortcut checks and its faster
encoder.
"""

import argparse
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw
from scipy.interpolate import splev, splprep
from scipy.spatial import cKDTree

CANVAS = 1024
MARGIN = 55
MIN_LOOPS, MAX_LOOPS = 5, 11
MIN_WAYPOINTS, MAX_WAYPOINTS = 6, 10
ANGLE_JITTER = 0.42  # rad
RADIUS_JITTER = 0.32  # fraction of the mean radius
MIN_RADIUS, MAX_RADIUS = 150.0, 275.0
POINTS_PER_LOOP = 900
NEAR_PX = 9.0
CROSSING_WINDOW_PX = 20.0  # arc length along each curve excused around a crossing
# A curve is always close to itself near any of its own points; only arcs
# further apart than this along the loop count as a self-approach.
SELF_GAP_PX = 3 * NEAR_PX
REDRAWS_PER_SAMPLE = 60
SUPERSAMPLE = 2
STROKE_PX = 3
INK = np.array([30, 30, 30], dtype=np.float32)
PAPER = np.array([245, 242, 235], dtype=np.float32)
NOISE_SIGMA = 3.0


def sample_loop(rng):
    """(900, 2) points of one closed spline loop placed inside the margin."""
    count = rng.integers(MIN_WAYPOINTS, MAX_WAYPOINTS + 1)
    mean_radius = rng.uniform(MIN_RADIUS, MAX_RADIUS)
    angles = rng.uniform(0, 2 * np.pi) + 2 * np.pi * np.arange(count) / count
    # Sorted so that jitter larger than half the spacing cannot fold the ring.
    angles = np.sort(angles + rng.uniform(-ANGLE_JITTER, ANGLE_JITTER, count))
    radii = mean_radius * (1 + rng.uniform(-RADIUS_JITTER, RADIUS_JITTER, count))
    x, y = radii * np.cos(angles), radii * np.sin(angles)
    # splprep(per=True) ignores the last point's value: it stands for the first.
    tck, _ = splprep([np.append(x, x[0]), np.append(y, y[0])], per=True, k=3, s=0)
    points = np.column_stack(splev(np.linspace(0, 1, POINTS_PER_LOOP), tck))
    points[-1] = points[0]
    # Placed after fitting because the spline overshoots its waypoints.
    low, high = points.min(axis=0), points.max(axis=0)
    centre = rng.uniform(MARGIN - low, CANVAS - MARGIN - high)
    return points + centre


def segments(loops):
    """Segment endpoints, owning loop and arc position (of the midpoint) of every loop."""
    starts = np.concatenate([loop[:-1] for loop in loops])
    ends = np.concatenate([loop[1:] for loop in loops])
    owner = np.repeat(np.arange(len(loops)), POINTS_PER_LOOP - 1)
    arc, perimeter = [], []
    for loop in loops:
        lengths = np.linalg.norm(np.diff(loop, axis=0), axis=1)
        arc.append(np.cumsum(lengths) - lengths / 2)
        perimeter.append(np.full(len(lengths), lengths.sum()))
    return starts, ends, owner, np.concatenate(arc), np.concatenate(perimeter)


def cross(a, b):
    """z component of the 2D cross product, row by row."""
    return a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0]


def arc_distance(a, b, perimeter):
    gap = np.abs(a - b)
    return np.minimum(gap, perimeter - gap)  # closed curves wrap around


def find_crossings(starts, ends, owner, arc, perimeter):
    """(i, j, arc_i, arc_j) of every crossing, as segment rows and arc positions."""
    longest = np.linalg.norm(ends - starts, axis=1).max()
    # Two segments can only intersect if their midpoints are within one segment length.
    i, j = cKDTree((starts + ends) / 2).query_pairs(longest, output_type="ndarray").T
    same = owner[i] == owner[j]
    neighbours = same & (arc_distance(arc[i], arc[j], perimeter[i]) <= longest * 1.5)
    i, j = i[~neighbours], j[~neighbours]
    p, r = starts[i], ends[i] - starts[i]
    q, s = starts[j], ends[j] - starts[j]
    denom = cross(r, s)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = cross(q - p, s) / denom
        u = cross(q - p, r) / denom
    hit = (denom != 0) & (t >= 0) & (t <= 1) & (u >= 0) & (u <= 1)
    length_i = np.linalg.norm(r[hit], axis=1)
    length_j = np.linalg.norm(s[hit], axis=1)
    i, j = i[hit], j[hit]
    return i, j, arc[i] + (t[hit] - 0.5) * length_i, arc[j] + (u[hit] - 0.5) * length_j


def offences_per_loop(loops):
    """How many unexcused close approaches each loop takes part in."""
    starts, ends, owner, arc, perimeter = segments(loops)
    cross_i, cross_j, cross_arc_i, cross_arc_j = find_crossings(starts, ends, owner, arc, perimeter)
    a, b = cKDTree((starts + ends) / 2).query_pairs(NEAR_PX, output_type="ndarray").T
    same = owner[a] == owner[b]
    far_along = arc_distance(arc[a], arc[b], perimeter[a]) > SELF_GAP_PX
    a, b = a[~same | far_along], b[~same | far_along]

    excused = np.zeros(len(a), dtype=bool)
    for ci, cj, arc_ci, arc_cj in zip(cross_i, cross_j, cross_arc_i, cross_arc_j):
        # A near pair is part of this crossing if each of its segments is
        # close along its own curve to the crossing, in either orientation.
        for first, second, arc_first, arc_second in ((ci, cj, arc_ci, arc_cj), (cj, ci, arc_cj, arc_ci)):
            on_first = (owner[a] == owner[first]) & (owner[b] == owner[second])
            near_first = arc_distance(arc[a], arc_first, perimeter[a]) <= CROSSING_WINDOW_PX
            near_second = arc_distance(arc[b], arc_second, perimeter[b]) <= CROSSING_WINDOW_PX
            excused |= on_first & near_first & near_second
    offenders = np.concatenate([owner[a[~excused]], owner[b[~excused]]])
    return np.bincount(offenders, minlength=len(loops))


def sample_tangle(num_loops, rng):
    """Loops that pass validation: redraw the worst offender until none is left."""
    while True:
        loops = [sample_loop(rng) for _ in range(num_loops)]
        for _ in range(REDRAWS_PER_SAMPLE):
            offences = offences_per_loop(loops)
            if not offences.any():
                return loops
            loops[int(offences.argmax())] = sample_loop(rng)


def render(loops, rng):
    """RGB image: strokes drawn at 2x, downsampled for antialiasing, then noise."""
    big = Image.new("L", (CANVAS * SUPERSAMPLE,) * 2, 255)
    draw = ImageDraw.Draw(big)
    for loop in loops:
        draw.line([tuple(p) for p in loop * SUPERSAMPLE], fill=0,
                  width=STROKE_PX * SUPERSAMPLE, joint="curve")
    small = big.resize((CANVAS, CANVAS), Image.LANCZOS)
    ink = 1 - np.asarray(small, dtype=np.float32)[..., None] / 255
    noise = rng.normal(0, NOISE_SIGMA, (CANVAS, CANVAS, 1)).astype(np.float32)
    rgb = PAPER + ink * (INK - PAPER) + noise  # same noise on all three channels
    return Image.fromarray(np.clip(np.rint(rgb), 0, 255).astype(np.uint8), "RGB")


def make_reference_image(seed: int, index: int, out_path) -> int:
    """Write one image to out_path; return its number of loops."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(index,)))
    num_loops = int(rng.integers(MIN_LOOPS, MAX_LOOPS + 1))
    render(sample_tangle(num_loops, rng), rng).save(out_path)  # Pillow default: zlib level 6
    return num_loops


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20, help="number of images")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    for index in range(args.n):
        make_reference_image(args.seed, index, args.out / f"tangled_loops_{index:05d}.png")
    seconds = time.perf_counter() - start
    print(f"{args.n} images in {seconds:.1f} s: {args.n / seconds:.2f} images/s")


if __name__ == "__main__":
    main()
