"""Longest parallel stretch per image, measured from the scene files alone.

A plain second measure of the rule that no two strands run side by side:
it never imports the generator, and it reads the centre lines the scene
files hold (a dataset made with `--scenes`), not the generator's segments.

Each loop is resampled every 1 px of arc. A point is marked when a point of
another strand lies within --gap px: of another loop, or of the same loop
more than SAME_STRAND_ARC_PX away along it. Near a crossing two strands are
necessarily close, so marked points near a crossing are set aside, under
each of several definitions of "near" (a benchmark's user may draw that line
elsewhere than the generator does):

* crossing windows: within gap / sin(angle) of arc, along either loop, of a
  crossing of that loop (the distance at which two straight strands crossing
  at that angle are gap apart);
* discs: within a fixed distance of any crossing point.

An image's figure is its longest run of consecutive marked points along one
loop, in px of arc (wrapping round the loop). The table gives, per
definition, the median, 90th percentile and longest over the images, and the
share of images over 45 px and over 60 px.

    python tests/parallel_stretch.py DATASET_DIR [--gap PX] [--discs PX ...] [--limit K] [--workers W]
"""

from __future__ import annotations

import argparse
import json
import sys
from multiprocessing import Pool
from pathlib import Path

import numpy as np
from scipy.spatial import cKDTree

from dataset_records import DatasetInputError, read_records

SAME_STRAND_ARC_PX = 60.0  # a loop's own points nearer than this along it are one strand bending
STEP_PX = 1.0  # resampling step along each loop
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


def longest_run_px(marked: np.ndarray, loop: np.ndarray) -> float:
    """Longest run of consecutive marked samples along one loop, wrapping round it, in px."""
    best = 0.0
    for k in np.unique(loop):
        flags = marked[loop == k]
        if flags.all():
            return max(best, len(flags) * STEP_PX)
        if not flags.any():
            continue
        flags = np.roll(flags, -int(np.argmin(flags)))  # start on an unmarked sample, so no run wraps
        edges = np.flatnonzero(np.diff(np.concatenate([[0], flags.astype(np.int8), [0]])))
        best = max(best, float((edges[1::2] - edges[::2]).max()) * STEP_PX)
    return best


def stretches(scene: dict, gap: float, discs: tuple[float, ...]) -> dict[str, float]:
    """The image's longest parallel stretch, px, under the crossing windows and under each disc radius."""
    samples = [resample_closed(np.asarray(loop["points"], dtype=float)) for loop in scene["loops"]]
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
        window = gap / np.sin(np.radians(max(c["angle_deg"], 1.0)))
        for k in set(c["loops"]):
            on_loop = np.flatnonzero(loop == k)
            distance = np.hypot(*(points[on_loop] - xy).T)
            first = on_loop[np.argmin(distance)]
            sides = [first]
            if c["loops"][0] == c["loops"][1]:  # a loop crossing itself passes the point twice
                away = arc_gap(arc[on_loop], arc[first], length[first]) > 2 * window
                sides.append(on_loop[away][np.argmin(distance[away])])
            for side in sides:
                near_window[on_loop[arc_gap(arc[on_loop], arc[side], length[side]) <= window]] = True
    figures = {WINDOWS: longest_run_px(marked & ~near_window, loop)}
    to_crossing = cKDTree(at).query(points)[0] if len(at) else np.full(len(points), np.inf)
    for radius in discs:
        figures[f"discs of {radius:g} px"] = longest_run_px(marked & (to_crossing > radius), loop)
    return figures


def scene_path(dataset_dir: Path, record: dict) -> Path:
    return dataset_dir / "scenes" / f"{Path(record['image']).stem}.json"


def measure(job: tuple[Path, float, tuple[float, ...]]) -> dict[str, float]:
    path, gap, discs = job
    try:
        scene = json.loads(path.read_text(encoding="utf-8"))
        return stretches(scene, gap, discs)
    except (ValueError, KeyError, TypeError, IndexError) as error:
        raise DatasetInputError(f"{path}: not a scene file ({type(error).__name__}: {error})") from None


def summary(figures: list[dict[str, float]]) -> list[str]:
    lines = [f"{'crossings set aside by':<24}{'median':>8}{'p90':>8}{'longest':>9}{'> 45 px':>9}{'> 60 px':>9}"]
    for name in figures[0]:
        v = np.array([f[name] for f in figures])
        lines.append(f"{name:<24}{np.median(v):>8.1f}{np.percentile(v, 90):>8.1f}{v.max():>9.1f}"
                     f"{np.mean(v > 45):>9.1%}{np.mean(v > 60):>9.1%}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=Path(__file__).name, description=__doc__.splitlines()[0])
    parser.add_argument("dataset_dir", type=Path)
    parser.add_argument("--gap", type=float, default=15.0, help="centre-line distance that counts as side by side, px")
    parser.add_argument("--discs", type=float, nargs="*", default=[10.0, 15.0, 20.0],
                        help="radii of the fixed discs round each crossing to try, px")
    parser.add_argument("--limit", type=int, help="measure only the first K images")
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)
    if not args.gap > 0 or any(not r >= 0 for r in args.discs):
        parser.error("--gap must be positive and every --discs radius non-negative")
    if args.workers < 1 or (args.limit is not None and args.limit < 1):
        parser.error("--workers and --limit must be at least 1")
    try:
        records = read_records(args.dataset_dir, args.limit)
        paths = [scene_path(args.dataset_dir, r) for r in records]
        missing = next((p for p in paths if not p.is_file()), None)
        if missing is not None:
            raise DatasetInputError(f"{missing} not found: make the dataset with --scenes")
        jobs = [(p, args.gap, tuple(args.discs)) for p in paths]
        workers = min(args.workers, len(jobs))
        if workers > 1:
            with Pool(workers) as pool:
                figures = pool.map(measure, jobs, chunksize=4)
        else:
            figures = [measure(job) for job in jobs]
    except DatasetInputError as error:
        print(f"parallel_stretch.py: error: {error}", file=sys.stderr)
        return 2
    print(f"longest parallel stretch per image within {args.gap:g} px, {len(figures)} images:")
    print("\n".join(summary(figures)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
