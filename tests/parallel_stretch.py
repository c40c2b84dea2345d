"""Longest parallel stretch per image, measured from the scene files alone.

A plain second measure of the rule that no two strands run side by side:
it never imports the generator, and it reads the centre lines the scene
files hold (a dataset made with `--scenes`), not the generator's segments.

Each loop is resampled every 1 px of arc. A point is marked when a point of
another strand lies within --gap px (15 by default): of another loop, or of
the same loop more than SAME_STRAND_ARC_PX (60 px) away along it. Near a crossing two strands are
necessarily close, so marked points near a crossing are set aside, under
each of several definitions of "near" (a benchmark's user may draw that line
elsewhere than the generator does):

* crossing windows: within gap / sin(angle) of arc, along either loop, of a
  crossing of that loop (the distance at which two straight strands crossing
  at that angle are gap apart);
* discs: within a fixed distance of any crossing point.

An image's figure is its longest run of consecutive marked points along one
loop, in px of arc (wrapping round the loop; a loop marked all round counts
its whole length). The table gives, per definition, the median, 90th
percentile and longest of those figures over the images, in px, and the
share of images whose figure is over 45 px and over 60 px. A folder or scene
file it cannot read is refused in one line, with exit status 2. With
--max-p90 or --max-over-60 it gates the crossing-windows row (issue 14's
limits are a 90th percentile of 45 px and 1 % of images over 60 px) and exits
1 when that row breaks one.

    python tests/parallel_stretch.py DATASET_DIR [--gap PX] [--discs PX ...] [--limit K] [--workers W]
        [--max-p90 PX] [--max-over-60 F]
"""

from __future__ import annotations

import json
import math
import os
import sys
from multiprocessing import Pool
from pathlib import Path

import numpy as np
from scipy.spatial import cKDTree

from dataset_records import DatasetInputError, OneLineParser, read_records

SAME_STRAND_ARC_PX = 60.0  # a loop's own points nearer than this along it are one strand bending
SAME_PASS_ARC_PX = 5.0  # a self-crossing's second pass is the nearest point at least this far along the loop
MAX_INK_SIDES = 100  # most total loop length, in image sides: the default images hold under ten
STEP_PX = 1.0  # resampling step along each loop
MAX_GAP_PX = 100.0
WINDOWS = "crossing windows"


def resample_closed(points: np.ndarray) -> tuple[np.ndarray, float]:
    """A closed polyline (P, 2) resampled every STEP_PX of arc from its first point, and its length."""
    closed = np.vstack([points, points[:1]])
    arc = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(closed, axis=0).T))])
    at = np.arange(0.0, arc[-1], STEP_PX)
    return np.column_stack([np.interp(at, arc, closed[:, 0]), np.interp(at, arc, closed[:, 1])]), float(arc[-1])


def arc_gap(a: np.ndarray, b: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Distance along a closed loop of the given length between arc positions a and b, the short way."""
    d = np.abs(a - b)
    return np.minimum(d, length - d)


def longest_run_px(marked: np.ndarray, spans: list[slice], lengths: list[float]) -> float:
    """Longest run of consecutive marked samples along any one loop, wrapping round it, in px; a loop
    marked all round gives its whole length (spans and lengths, px, by loop)."""
    best = 0.0
    for span, length in zip(spans, lengths):
        flags = marked[span]
        if flags.all():
            best = max(best, length)
            continue
        if not flags.any():
            continue
        flags = np.roll(flags, -int(np.argmin(flags)))  # start on an unmarked sample, so no run wraps
        edges = np.flatnonzero(np.diff(np.concatenate([[0], flags.astype(np.int8), [0]])))
        best = max(best, float((edges[1::2] - edges[::2]).max()) * STEP_PX)
    return best


class SceneError(ValueError):
    """A scene file that does not hold loops and crossings as creation.py writes them."""


def checked_scene(scene, size: float) -> dict:
    """scene, if it holds closed loops of at least three points inside a size px image, at most
    MAX_INK_SIDES sides long in all, and crossings that name two of those loops with an angle in
    [0, 90] degrees; SceneError otherwise."""
    loops = scene.get("loops") if isinstance(scene, dict) else None
    crossings = scene.get("crossings") if isinstance(scene, dict) else None
    if not isinstance(loops, list) or not loops or not isinstance(crossings, list):
        raise SceneError('no list of "loops" and list of "crossings"')
    ink = 0.0
    for k, loop in enumerate(loops):
        points = np.asarray(loop.get("points") if isinstance(loop, dict) else None, dtype=float)
        if points.ndim != 2 or points.shape[1:] != (2,) or len(points) < 3:
            raise SceneError(f"loop {k} is not a list of at least three [x, y] points")
        if not (np.isfinite(points).all() and points.min() >= -size and points.max() <= 2 * size):
            raise SceneError(f"loop {k} has a point far outside the {size:g} px image")
        length = np.hypot(*(np.roll(points, -1, axis=0) - points).T).sum()
        if length < 3 * STEP_PX:
            raise SceneError(f"loop {k} is {length:g} px long, too short to be a loop")
        ink += length  # every px of it is a sample, so the total bounds the work
    if ink > MAX_INK_SIDES * size:
        raise SceneError(f"its loops are {ink:.0f} px long in all, over {MAX_INK_SIDES} image sides")
    for c, crossing in enumerate(crossings):
        pair = crossing.get("loops") if isinstance(crossing, dict) else None
        xy = np.asarray(crossing.get("xy") if isinstance(crossing, dict) else None, dtype=float)
        angle = crossing.get("angle_deg") if isinstance(crossing, dict) else None
        if not (isinstance(pair, list) and len(pair) == 2 and all(type(i) is int and 0 <= i < len(loops) for i in pair)
                and xy.shape == (2,) and np.isfinite(xy).all()
                and isinstance(angle, (int, float)) and 0 <= angle <= 90):
            raise SceneError(f'crossing {c} is not {{"xy": [x, y], "loops": [a, b] of the loops, '
                             f'"angle_deg": in [0, 90]}}')
    return scene


def stretches(scene: dict, gap: float, discs: tuple[float, ...]) -> dict[str, float]:
    """The image's longest parallel stretch, px, under the crossing windows and under each disc radius."""
    samples = [resample_closed(np.asarray(loop["points"], dtype=float)) for loop in scene["loops"]]
    lengths = [length for _, length in samples]
    ends = np.cumsum([len(p) for p, _ in samples])
    spans = [slice(end - len(p), end) for end, (p, _) in zip(ends, samples)]  # each loop's samples, in order
    points = np.vstack([p for p, _ in samples])
    loop = np.concatenate([np.full(len(p), k) for k, (p, _) in enumerate(samples)])
    arc = np.concatenate([np.arange(len(p)) * STEP_PX for p, _ in samples])
    length = np.concatenate([np.full(len(p), n) for p, n in samples])
    pairs = cKDTree(points).query_pairs(gap, output_type="ndarray")
    u, v = pairs[:, 0], pairs[:, 1]
    other = (loop[u] != loop[v]) | (arc_gap(arc[u], arc[v], length[u]) > SAME_STRAND_ARC_PX)
    marked = np.zeros(len(points), dtype=bool)
    marked[u[other]] = marked[v[other]] = True

    crossings = scene["crossings"]
    at = np.array([c["xy"] for c in crossings], dtype=float).reshape(-1, 2)
    near_window = np.zeros(len(points), dtype=bool)
    for c, xy in zip(crossings, at):
        window = gap / math.sin(math.radians(max(c["angle_deg"], 1.0)))  # as the generator's rule bounds it
        for k in set(c["loops"]):
            on_loop = np.arange(spans[k].start, spans[k].stop)
            distance = np.hypot(*(points[on_loop] - xy).T)
            first = on_loop[np.argmin(distance)]
            sides = [first]
            away = arc_gap(arc[on_loop], arc[first], length[first]) > SAME_PASS_ARC_PX
            if c["loops"][0] == c["loops"][1] and away.any():  # a loop crossing itself passes the point twice
                sides.append(on_loop[away][np.argmin(distance[away])])
            for side in sides:
                near_window[on_loop[arc_gap(arc[on_loop], arc[side], length[side]) <= window]] = True
    figures = {WINDOWS: longest_run_px(marked & ~near_window, spans, lengths)}
    to_crossing = cKDTree(at).query(points)[0] if len(at) else np.full(len(points), np.inf)
    for radius in discs:
        figures[disc_name(radius)] = longest_run_px(marked & (to_crossing > radius), spans, lengths)
    return figures


def disc_name(radius: float) -> str:
    return f"discs of {radius:g} px"


def scene_path(dataset_dir: Path, record: dict) -> Path:
    return dataset_dir / "scenes" / f"{Path(record['image']).stem}.json"


def measure(job: tuple[Path, float, float, tuple[float, ...]]) -> dict[str, float]:
    path, size, gap, discs = job
    try:
        scene = checked_scene(json.loads(path.read_text(encoding="utf-8")), size)
    except (ValueError, TypeError, OverflowError, RecursionError) as error:  # SceneError is a ValueError
        raise DatasetInputError(f"{path}: not a scene file ({type(error).__name__}: {error})") from None
    except OSError as error:
        raise DatasetInputError(f"{path}: {error.strerror or error}") from None
    return stretches(scene, gap, discs)


def gate_failures(figures: list[dict[str, float]], max_p90: float | None, max_over_60: float | None) -> list[str]:
    """What the crossing-windows row breaks of the limits given (None: no limit)."""
    v = np.array([f[WINDOWS] for f in figures])
    p90, over_60 = float(np.percentile(v, 90)), float(np.mean(v > 60))
    broken = []
    if max_p90 is not None and p90 > max_p90:
        broken.append(f"90th percentile {p90:.1f} px > {max_p90:g} px")
    if max_over_60 is not None and over_60 > max_over_60:
        broken.append(f"{over_60:.1%} of images over 60 px > {max_over_60:.1%}")
    return broken


def summary(figures: list[dict[str, float]]) -> list[str]:
    lines = [f"{'crossings set aside by':<24}{'median':>8}{'p90':>8}{'longest':>9}{'> 45 px':>9}{'> 60 px':>9}"]
    for name in figures[0]:
        v = np.array([f[name] for f in figures])
        lines.append(f"{name:<24}{np.median(v):>8.1f}{np.percentile(v, 90):>8.1f}{v.max():>9.1f}"
                     f"{np.mean(v > 45):>9.1%}{np.mean(v > 60):>9.1%}")
    return lines


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog=Path(__file__).name, description=__doc__.splitlines()[0])
    parser.add_argument("dataset_dir", type=Path, help="a dataset folder made with --scenes")
    parser.add_argument("--gap", type=float, default=15.0,
                        help="centre-line distance that counts as side by side, px, at most 100 (default 15)")
    parser.add_argument("--discs", type=float, nargs="*", default=[10.0, 15.0, 20.0],
                        help="radii of the fixed discs round each crossing to try as well, px (default 10 15 20; "
                             "none: the crossing windows alone)")
    parser.add_argument("--limit", type=int, help="measure only the first K images")
    parser.add_argument("--workers", type=int, default=1, help="processes, at most one per core (default 1)")
    parser.add_argument("--max-p90", type=float, help="exit 1 when the crossing-windows row's 90th percentile "
                                                      "is over this, px")
    parser.add_argument("--max-over-60", type=float, help="exit 1 when the crossing-windows row's share of "
                                                          "images over 60 px is over this fraction")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not 0 < args.gap <= MAX_GAP_PX:  # nan too; a wide gap pairs up every point of an image
        parser.error(f"--gap is a distance over 0 and at most {MAX_GAP_PX:g} px, got {args.gap}")
    if any(not 0 <= r < math.inf for r in args.discs):
        parser.error(f"every --discs radius is a distance of at least 0 px, got {args.discs}")
    if args.workers < 1 or (args.limit is not None and args.limit < 1):
        parser.error(f"need --workers >= 1 and --limit >= 1; got {args.workers}, {args.limit}")
    if args.max_p90 is not None and not args.max_p90 >= 0:  # nan too: it would pass every dataset
        parser.error(f"--max-p90 is a distance of at least 0 px, got {args.max_p90}")
    if args.max_over_60 is not None and not 0 <= args.max_over_60 <= 1:
        parser.error(f"--max-over-60 is a fraction from 0 to 1, got {args.max_over_60}")
    discs = tuple({disc_name(r): r for r in args.discs}.values())  # radii that print alike are one row
    try:
        records = read_records(args.dataset_dir, args.limit)
        jobs = []
        for record in records:
            path = scene_path(args.dataset_dir, record)
            if not path.is_file():
                raise DatasetInputError(f"{path} not found: no scene file for {record['image']} (make the "
                                        "dataset with --scenes)")
            size = (record.get("width"), record.get("height"))
            if not all(type(side) is int and side > 0 for side in size):
                raise DatasetInputError(f"the record of {record['image']} has no width and height in px")
            jobs.append((path, float(max(size)), args.gap, discs))
        workers = min(args.workers, len(jobs), os.cpu_count() or 1)
        if workers > 1:
            with Pool(workers) as pool:
                figures = pool.map(measure, jobs, chunksize=4)
        else:
            figures = [measure(job) for job in jobs]
    except DatasetInputError as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2
    print(f"longest parallel stretch per image, px of arc along one loop, where strands are within "
          f"{args.gap:g} px ({len(figures)} images):")
    print("\n".join(summary(figures)))
    broken = gate_failures(figures, args.max_p90, args.max_over_60)
    if broken:
        print(f"{parser.prog}: the crossing-windows row breaks its limit: {'; '.join(broken)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
