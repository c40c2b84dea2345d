"""Tangled closed-loop counting: a procedural dataset generator.

Each image is a tangle of smooth closed loops drawn in one dark colour on an off-white, faintly noisy canvas.
Loops cross each other and themselves, but every crossing is a clear X and no two strands run close together
elsewhere, so a careful person can trace each loop all the way round. The answer is the number of loops.

    python creation.py --n 500 --seed 0                 # the published dataset, written here
    python creation.py --n 20 --seed 3 --out /tmp/loops --workers 1

It writes images/, annotations.jsonl and data.json (scenes/ with --scenes) into the folder holding this file
or --out. Grading model replies lives in scoring.py and publishing (Hub, VLMEvalKit) in export.py;
`creation.py --evaluate ...` and `--export-hub ...` hand over to them. creation.md explains the design;
README.md ("What you get") shows how to install and run and what each file holds.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import errno
import functools
import hashlib
import importlib
import itertools
import json
import math
import multiprocessing
import os
import shutil
import signal
import stat
import sys
import threading
import time
import zlib
from collections import Counter, deque
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Iterable, Iterator, NamedTuple, NoReturn


def leave_quietly(signum, frame) -> NoReturn:
    """Ctrl-C before main has set its own handler, while numpy and Pillow load."""
    print("creation.py: interrupted", file=sys.stderr)
    raise SystemExit(130)


if __name__ == "__main__" and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, leave_quietly)

import numpy as np  # noqa: E402
from PIL import Image, PngImagePlugin  # noqa: E402
from tqdm import tqdm  # noqa: E402

try:
    import fcntl
except ImportError:  # not on Windows: there, nothing stops two runs writing one folder at once
    fcntl = None

GENERATOR_VERSION = "3.0.0"  # part of a dataset's identity: bump it whenever output changes
SCHEMA_VERSION = 1
TASK_NAME = "tangled_loops"
IMAGES_DIR = "images"
ANNOTATIONS_FILE = "annotations.jsonl"
DATA_FILE = "data.json"
QUESTION = ("How many distinct closed loops are tangled together in this image? Each loop is a single continuous "
            "curve that closes back on itself — there are no loose endpoints anywhere. All loops are drawn in the "
            "same colour and may cross other loops or themselves freely. Count the total number of distinct closed "
            "loops and report the count as a positive integer.")

WORKERS_PER_CORE = 4  # beyond the cores, workers only share them, each holding its memory: 100000 is a typo
JOBS_IN_FLIGHT_PER_WORKER = 8  # results return in order, so a slow image must not starve the others of jobs
MIN_CLEAR_PAPER_PX = 2.0  # least bare paper a config may leave between two strokes at their closest
LENS_ARC_RATIO = 1.5  # an eye's sides are nearly straight (under 1.1 x their chord); a curl's lobe is far longer
GRID_CELL_PX = 4.5  # above the longest segment at default settings, so a crossing search reads 3 x 3 cells

# Drawing is on a one-channel tone scale stored through a fixed palette: every pixel lies on the ink-paper ramp.
INK_TONE = 24  # tone of a fully covered ink pixel
PAPER_TONE = 232  # tone of bare canvas before noise
NOISE_SIGMA_TONE = 3.0  # std of per-pixel canvas noise, tone levels
INK_RGB = (32, 34, 40)
PAPER_RGB = (243, 239, 228)
REVIEW_DIR = "review"  # overlays and the contact sheet: never inside images/
REVIEW_COLOURS = [(230, 25, 75), (60, 180, 75), (0, 130, 200), (245, 130, 48), (145, 30, 180), (70, 240, 240),
                  (240, 50, 230), (170, 110, 40), (0, 128, 128), (128, 0, 0), (128, 128, 0), (0, 0, 128)]  # a loop each
CROSSING_RING_PX = 9  # radius of the ring marking a crossing in an overlay
THUMBNAIL_PX = 256  # side of one image on the contact sheet
CONTACT_SHEET_FILE = "contact_sheet.png"
PNG_TAG = "tangled_loops"  # PNG text key marking an overlay (its image's pixel hash) or contact sheet (its run's)
SCENES_DIR = "scenes"  # one JSON file of geometry per image: never inside images/
SCENE_MAX_ARC_PX = 4.0  # most arc between consecutive points of a scene's polyline
SCENE_DECIMALS = 1  # scene coordinates are rounded to 0.1 px
ANSWER_DISTRIBUTIONS = ("equal", "uniform")

# Budgets of the default mode, in px for the default drawable side; other canvases scale them. They are drawn
# for max_loops rings whatever N, and merges make the N loops (creation.md, "How an image is made").
BALANCED_REFERENCE_SIDE_PX = 914.0  # size minus twice interior_margin at the defaults
BALANCED_MEAN_PERIMETER_PX = (750.0, 1000.0)  # total ink length / max_loops, drawn per image
BALANCED_PERIMETER_PX = (550.0, 2600.0)  # bounds on one loop's share of the ink
BALANCED_SQUARED_SHARES = 0.22  # mean sum of squared perimeter shares (see perimeter_shares)
BALANCED_MAX_CONCENTRATION = 50.0  # Dirichlet alpha when there are too few rings to reach that mean: near-equal shares
BALANCED_SPACING_PX = (90.0, 160.0)  # waypoint spacing shared by all loops of an image
BALANCED_WIGGLE = (0.3, 0.5)  # radial waypoint jitter, fraction of the spacing
BALANCED_CURLS = 3.0  # curls per image, uniform in [0, this + 1): few, as each makes a ring dearer to place...
BALANCED_CURL_LOOPS = 11  # ...at this --max-loops, scaled with it as the ink is
BALANCED_CROSSING_DENSITY = (0.16, 0.24)  # crossings between rings per (total length / side)^2
CROSSING_SLACK = 3.0  # crossings a loop may run ahead of the image's budget
PLACEMENTS_PER_SHAPE = 16  # positions tried for one budgeted shape before it is redrawn
CURL_DEPTH = (3.5, 5.5)  # prolate-trochoid ratio: small lobes, seldom crossed; lower gives too sharp a tip
CURL_ARC_GAPS = 3.56  # arc a curl adds, in waypoint gaps: mean trochoid arc over one period, minus one
NESTED_CURL_SHARE = (0.0, 1.0)  # per-image probability that a pair of the curls left is nested (hidden from a count)
NESTED_CURL_ROOM = 0.7  # room a nested curl takes on its loop, in ring curls (it needs no gap of its own)
INNER_CURL_ARC_GAPS = 3.0  # arc a nested curl adds, in waypoint gaps
INNER_CURL_DEPTH = (3.0, 3.5)  # a nested curl's trochoid ratio: higher crosses too shallowly, lower bends too tightly
# Merges: where two rings become one loop. A cross-join cuts two strands at a near pass and reconnects them across
# each other (a new X); a splice cuts them at a crossing and reconnects them turning away (the X becomes a near pass).
# Lengths scale with the drawable side, as the budgets do.
DOCK_GAP_PX = (18.0, 38.0)  # a ring is screened at positions this far beside a strand, so near passes are common
NEAR_PASS_GAP_PX = (14.0, 45.0)  # centre-line distance of two rings' strands where a cross-join may cut them
NEAR_PASS_COS = 0.85  # least |cos| between those strands: nearly parallel
NEAR_PASS_CLEAR_PX = 45.0  # from a near pass to the nearest crossing
CROSS_JOIN_ANGLE = (55.0, 80.0)  # degrees, the X a cross-join makes
SPLICE_MIN_ANGLE = 50.0  # degrees: a shallower crossing spliced leaves two strands running side by side
SPLICE_GAP_PX = (20.0, 28.0)  # about how far apart a splice leaves the two strands at their closest
SPLICE_CLEAR_PX = 30.0  # from a spliced crossing to the nearest other crossing
MERGE_SPACING_PX = 80.0  # between two merge sites
MERGE_TRIES = 12  # choices of merges tried on one ring tangle before the sample restarts
MAX_LOOP_RATIO = 2.34  # most max_loops / min_loops: 11 rings take the 6 merges 5 loops need in about 9 tangles of 10


# ---------------------------------------------------------------------------
# Config


def unused_shape_flags(flags: list[str]) -> ValueError:
    """The refusal of original-shape flags in the budgeted mode, where they would be silently ignored."""
    return ValueError(f"{', '.join(flags)}: used only with --original-shapes; by default each loop's size "
                      "comes from its share of the image's ink budget")


def idle_parallel_gap(cfg: Config) -> ValueError:
    """The refusal of a chosen --parallel-gap that cannot catch anything --min-gap lets through."""
    return ValueError(f"--parallel-gap {cfg.parallel_gap:g} is not above --min-gap {cfg.min_gap:g}: away from a "
                      "crossing no two strands come that close, so the rule would check nothing; raise it above "
                      "--min-gap, or pass 0 to turn it off")


def flag(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def refuse_first(refusals: dict[str, bool]) -> None:
    """Refuse, in one line, the first of a table of refusals (message: whether its rule is broken) that applies."""
    refused = next((message for message, broken in refusals.items() if broken), None)
    if refused:
        raise ValueError(refused)


def knob(default, help: str, group: str, **parser_options):
    """A Config field: its default, its --help text and the group of flags it is listed in."""
    return dataclasses.field(default=default, metadata={"help": help, "group": group, **parser_options})


ORIGINAL_SHAPE_FIELDS = ("min_radius", "max_radius", "radius_jitter", "max_waypoints")  # unused when budgeted
RULE = "traceability rules"  # the --help group of the knobs that keep every loop traceable
ORIGINAL = "with --original-shapes: "  # the start of the --help of a knob only that mode reads


# Bounds of single fields: least (open where it is a float to stay above), most and why; rules between fields
# are in Config. Each value outside is refused in one line naming the flag.
POSITIVE = math.ulp(0.0)
BOUNDS = {
    "n": (1, 10_000_000, "about 5 TB of images"),  # and as many record files in one folder
    "seed": (0, None, ""),
    **{name: (1, 100, "far more than a person can count in one image") for name in ("min_loops", "max_loops")},
    "min_radius": (POSITIVE, None, ""),
    "min_waypoints": (4, 100, "a loop through more is a scribble; a cubic loop needs at least 4"),
    "max_waypoints": (4, 100, "a loop through more is a scribble"),
    "angle_jitter": (0, None, ""),
    "radius_jitter": (0, float(np.nextafter(1, 0)), "a waypoint must stay on its side of the centre"),
    "points_per_loop": (64, 20_000, "segments far under a pixel show nothing more and only cost memory"),
    "size": (1, 8192, "Pillow refuses to open larger images as decompression bombs"),  # 67 M pixels; its limit, 89 M
    "interior_margin": (0, None, ""),
    "stroke_width": (POSITIVE, None, ""),
    **{name: (0, None, "") for name in ("min_gap", "parallel_gap", "max_parallel_run", "min_crossing_separation",
                                        "min_same_pair_separation", "crossing_cluster_px", "min_curvature_radius",
                                        "max_crossing_bend", "bend_window", "min_curl_px")},
    "min_crossing_angle": (0, float(np.nextafter(90, 0)), "a crossing is at most a right angle"),
    "wide_lens_angle": (0, 90, "a crossing is at most a right angle"),
    **{name: (1, None, "") for name in ("loop_attempts", "sample_restarts")},
}


@dataclass(frozen=True)
class Config:
    """Every knob of one dataset; each field is also the CLI flag of the same name."""
    n: int = knob(500, "images in the dataset", "dataset")
    seed: int = knob(0, "run seed, non-negative; sample i draws from SeedSequence(seed, spawn_key=(i,))", "dataset")
    min_loops: int = knob(5, "fewest loops in one image", "loops")
    max_loops: int = knob(11, "most loops in one image", "loops")
    answers: str = knob("equal", "equal: every count equally often, decided per index from the seed; "
                        "uniform: independent draws", "loops", choices=ANSWER_DISTRIBUTIONS)
    original_shapes: bool = knob(False, "the original description's loop shapes (mean radius 150-275 px, no "
                                 "budgets), for comparison only: the ink then gives the count away", "loops")
    min_radius: float = knob(150.0, ORIGINAL + "smallest mean radius of a loop's waypoint ring, px", "loops")
    max_radius: float = knob(275.0, ORIGINAL + "largest mean radius of a loop's waypoint ring, px", "loops")
    min_waypoints: int = knob(6, "fewest spline waypoints per loop", "loops")
    max_waypoints: int = knob(10, ORIGINAL + "most spline waypoints per loop", "loops")
    angle_jitter: float = knob(0.42, "waypoint angle jitter, rad, capped to keep the waypoints in ring order", "loops")
    radius_jitter: float = knob(0.32, ORIGINAL + "waypoint radius jitter, fraction of the mean radius", "loops")
    points_per_loop: int = knob(900, "points on a loop of the longest budgeted length (every loop with "
                                "--original-shapes); bends are checked at this many spline parameters", "loops")
    size: int = knob(1024, "canvas side, px", "canvas")
    interior_margin: float = knob(55.0, "ink-free border along every edge, px", "canvas")
    stroke_width: float = knob(3.0, "line width, px", "canvas")
    min_gap: float = knob(9.0, "least distance between two strands' centre lines away from a crossing, px", RULE)
    parallel_gap: float = knob(15.0, "centre-line distance under which two strands run side by side, px; "
                               "0 turns this rule off", RULE)
    max_parallel_run: float = knob(40.0, "longest arc two strands may run side by side (within --parallel-gap) "
                                   "away from their crossings, px", RULE)
    min_crossing_angle: float = knob(30.0, "shallowest allowed crossing, degrees", RULE)
    min_crossing_separation: float = knob(12.0, "distance between any two crossings, px", RULE)
    min_same_pair_separation: float = knob(30.0, "distance between two crossings of the same two loops, px", RULE)
    wide_lens_angle: float = knob(50.0, "crossing angle under which the eye between two crossings of the same "
                                  "two loops must be --parallel-gap wide, not --min-gap, degrees", RULE)
    crossing_cluster_px: float = knob(25.0, "radius within which a crossing may have at most one other crossing, "
                                      "px: three closer together read as one blot", RULE)
    min_curvature_radius: float = knob(8.0, "tightest allowed bend, px", RULE)
    max_crossing_bend: float = knob(0.5, "most a strand may turn within --bend-window of a crossing, as a share "
                                    "of the crossing angle, unless it keeps the curvature it has either side", RULE)
    bend_window: float = knob(10.0, "arc either side of a crossing over which --max-crossing-bend is held, px", RULE)
    min_curl_px: float = knob(60.0, "least reach of the small lobe a loop makes where it crosses itself, from "
                              "that crossing, px", RULE)
    loop_attempts: int = knob(400, "redraws of one loop before the sample restarts", RULE)
    sample_restarts: int = knob(25, "restarts before a sample fails", RULE)

    def __post_init__(self) -> None:
        defaults = Config.__dataclass_fields__
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, float):
                if not np.isfinite(value):
                    raise ValueError(f"{flag(field.name)} must be a finite number, got {value}")
                object.__setattr__(self, field.name, value + 0.0)  # -0.0 reads as 0 but in numpy's bounds and data.json
        for name, (least, most, why) in BOUNDS.items():
            value = getattr(self, name)
            if not value >= least:
                bound = "above 0" if least == POSITIVE else f"at least {least:,}"
                raise ValueError(f"{flag(name)} must be {bound}, got {value:,}")
            if most is not None and value > most:
                bound = f"below {round(most):,}" if most != round(most) else f"at most {most:,}"
                raise ValueError(f"{flag(name)} must be {bound} ({why}), got {value:,}")
        budgeted = not self.original_shapes  # budgeted loops use neither max_radius nor max_waypoints
        unused = [flag(name) for name in ORIGINAL_SHAPE_FIELDS if getattr(self, name) != defaults[name].default]
        ordered = [("min_loops", "max_loops")] + ([] if budgeted else [("min_radius", "max_radius"),
                                                                       ("min_waypoints", "max_waypoints")])
        # Every strand is searched for neighbours out to these gaps, so they also bound the work.
        gap_limit = max(self.size, 1024) / 8  # on small canvases, never under the defaults
        ink_reach = self.stroke_width / 2 + 0.5  # half a stroke plus a pixel of antialiasing from the centre line
        clear_paper = self.min_gap - 2 * ink_reach
        interior = self.size - 2 * self.interior_margin
        widest_ring = 2 * self.max_radius * (1 + self.radius_jitter)
        refuse_first({  # the rules between fields, in the order they are checked
            str(unused_shape_flags(unused)): budgeted and bool(unused),
            f"--answers must be one of {', '.join(ANSWER_DISTRIBUTIONS)}, got {self.answers}":
                self.answers not in ANSWER_DISTRIBUTIONS,
            **{f"{flag(low)} {getattr(self, low)} exceeds {flag(high)} {getattr(self, high)}":
               getattr(self, low) > getattr(self, high) for low, high in ordered},
            **{f"{flag(name)} must be at most {gap_limit:g} px (an eighth of --size, of 1024 on smaller canvases): "
               f"strands kept that far apart leave no room for a tangle; got {getattr(self, name)!r}":
               getattr(self, name) > gap_limit for name in ("min_gap", "parallel_gap")},
            # Refused only when chosen: a wider --min-gap alone outdoes the default (the CLI refuses one named).
            str(idle_parallel_gap(self)):
                self.parallel_gap != defaults["parallel_gap"].default and self.parallel_gap_checks_nothing,
            f"--min-gap {self.min_gap:g} leaves {clear_paper:g} px of bare paper between two strands drawn at "
            f"--stroke-width {self.stroke_width:g}; strands that close read as touching: raise --min-gap to at "
            f"least {2 * ink_reach + MIN_CLEAR_PAPER_PX:g}":
                clear_paper < MIN_CLEAR_PAPER_PX - 1e-9,  # the tolerance lets stroke width + 3 pass despite rounding
            f"--min-curvature-radius {self.min_curvature_radius:g} is tighter than the ink's reach ({ink_reach:g} px "
            f"at --stroke-width {self.stroke_width:g}): such a bend fills in and reads as a blob; raise it to at "
            f"least {ink_reach:g}": self.min_curvature_radius < ink_reach,
            f"--interior-margin {self.interior_margin:g} leaves no room on a --size {self.size} canvas": interior <= 0,
            f"--max-radius {self.max_radius} cannot fit: a loop may span {widest_ring:g} px but --size {self.size} "
            f"minus twice --interior-margin {self.interior_margin} leaves {interior:g} px":
                widest_ring > interior and not budgeted,  # budgeted loops are sized by their ink share instead
            f"--min-loops must be at least 2 (or pass --original-shapes), got {self.min_loops}: the loops join one "
            "tangle by crossing one another": budgeted and self.min_loops < 2,
            f"every image is --max-loops {self.max_loops} rings merged down to its count of loops, and a tangle "
            f"seldom has room to merge more than about half of them (--min-loops {self.min_loops}): at most "
            f"{MAX_LOOP_RATIO:g} times as many loops at the top as at the bottom: "
            f"--max-loops at most {math.floor(MAX_LOOP_RATIO * self.min_loops)} here, or --min-loops at least "
            f"{math.ceil(self.max_loops / MAX_LOOP_RATIO)}":
                budgeted and self.max_loops > MAX_LOOP_RATIO * self.min_loops,
        })

    @property
    def parallel_gap_checks_nothing(self) -> bool:
        """Away from crossings no strands come nearer than min_gap, so a parallel gap at or under it checks nothing."""
        return 0 < self.parallel_gap <= self.min_gap


# ---------------------------------------------------------------------------
# Loop shapes: waypoints on a ring and the periodic spline through them (both modes)


def ring_angles(count: int, angle_jitter: float, rng: np.random.Generator) -> np.ndarray:
    """Angles of `count` waypoints round a ring, jittered but in ring order.  (K,)"""
    spacing = 2 * np.pi / count
    jitter = min(angle_jitter, 0.45 * spacing)  # under half the spacing: swapped neighbours make kinks and cusps
    return rng.uniform(0, 2 * np.pi) + spacing * np.arange(count) + rng.uniform(-jitter, jitter, count)


def sample_waypoints(cfg: Config, rng: np.random.Generator) -> np.ndarray:
    """Waypoints on a jittered ring around the origin, in ring order.  (K, 2)"""
    count = int(rng.integers(cfg.min_waypoints, cfg.max_waypoints + 1))
    angles = ring_angles(count, cfg.angle_jitter, rng)
    mean_radius = rng.uniform(cfg.min_radius, cfg.max_radius)
    radii = mean_radius * (1 + rng.uniform(-cfg.radius_jitter, cfg.radius_jitter, count))
    return np.column_stack([radii * np.cos(angles), radii * np.sin(angles)])


def next_points(points: np.ndarray) -> np.ndarray:
    """Each point's successor round a closed polyline: np.roll(points, -1, axis=0), without roll's overhead.  (P, 2)"""
    return np.concatenate((points[1:], points[:1]))


def tangents(points: np.ndarray) -> np.ndarray:
    """Unit tangent at each point of a closed polyline (P, 2), from its two neighbours.  (P, 2)"""
    step = next_points(points) - np.roll(points, 1, axis=0)
    return step / np.hypot(*step.T)[:, None]


def fit_closed_spline(waypoints: np.ndarray, num_points: int, check_points: int) -> tuple[np.ndarray, np.ndarray]:
    """Periodic cubic B-spline through the waypoints: num_points points (num_points, 2) and the radius of
    curvature, px, at check_points parameters, so a short loop is checked for tight bends as finely as a long one."""
    from scipy.interpolate import BSpline, splprep  # here, not at the top: --help, --merge and reruns draw no spline
    closed = np.vstack([waypoints, waypoints[:1]])  # splprep ignores the repeated last point's value
    (knots, coefficients, degree), _ = splprep(closed.T, s=0, per=True, k=3)
    # One 2-D BSpline evaluates exactly what splev would, faster; splprep's output needs no constructor checks.
    spline = BSpline.construct_fast(knots, np.column_stack(coefficients), degree)
    points = spline(np.linspace(0.0, 1.0, num_points, endpoint=False))
    u = np.linspace(0.0, 1.0, check_points, endpoint=False)
    d1, d2 = spline(u, 1), spline(u, 2)
    speed = np.hypot(d1[:, 0], d1[:, 1])
    turn = np.abs(cross2(d1, d2))
    with np.errstate(divide="ignore"):
        return points, np.where(turn > 0, speed**3 / turn, np.inf)  # the radius of curvature


# ---------------------------------------------------------------------------
# Loop shapes, default mode: max_loops rings whatever N, sharing per-image budgets of ink and crossings
#
# Drawn alike, N loops give N away (N perimeters of ink, N turns, N loop-sized shapes on a thumbnail): so every
# image is drawn as max_loops rings and max_loops - N of them are merged afterwards (the sampler).


@dataclass(frozen=True)
class LoopShape:
    """What the budgeted default asks of one ring; its exact form is redrawn on every attempt."""
    perimeter: float  # px, met exactly by scaling
    waypoints: int  # ring waypoints before curls
    wiggle: float  # radial waypoint jitter, fraction of the waypoint spacing
    curls: int  # self-crossing curls on the ring, each in its own waypoint gap with a free gap either side
    crossing_cap: float  # most crossings between different rings once this ring is placed
    nested: int = 0  # of those curls, how many carry a second curl on their lobe


def budget_scale(cfg: Config) -> float:
    """How much larger than at the defaults the drawable side is: every length budget scales with it."""
    return (cfg.size - 2 * cfg.interior_margin) / BALANCED_REFERENCE_SIDE_PX


def ring_shapes(cfg: Config, rng: np.random.Generator) -> tuple[LoopShape, ...]:
    """Per-ring targets for one image's max_loops rings, largest first; nothing here knows N."""
    scale = budget_scale(cfg)
    rings = cfg.max_loops
    total = rings * scale * rng.uniform(*BALANCED_MEAN_PERIMETER_PX)
    num_curls = int(rng.uniform(0, BALANCED_CURLS * rings / BALANCED_CURL_LOOPS + 1))  # in proportion to the ink
    # A curl takes its gap, CURL_ARC_GAPS of arc and a free gap; capping the spacing by the total length over
    # num_curls + rings leaves the rings room for every curl.
    footprint = 2 + CURL_ARC_GAPS
    spacing = min(scale * rng.uniform(*BALANCED_SPACING_PX), total / (footprint * (num_curls + rings)))
    wiggle = rng.uniform(*BALANCED_WIGGLE)
    perimeters = -np.sort(-perimeter_shares(total, rings, scale, rng))
    room = perimeters / spacing / footprint  # (R,) curls each ring has room for
    # A per-image share of the pairs of curls is nested; each sits on a ring curl.
    nested_total = rng.binomial(num_curls // 2, rng.uniform(*NESTED_CURL_SHARE))
    curls = np.zeros(rings, dtype=int)
    for _ in range(num_curls - nested_total):  # one at a time, so full rings drop out and density stays even
        weights = np.where(curls < np.floor(room), perimeters, 0.0)
        curls[rng.choice(rings, p=weights / weights.sum())] += 1
    nested = np.zeros(rings, dtype=int)
    ring_gaps = perimeters / spacing - CURL_ARC_GAPS * curls  # (R,) what is left for the ring itself
    for _ in range(nested_total):  # on the curls of rings with room left, else on the ring if it has room
        fits = ((curls + NESTED_CURL_ROOM * (nested + 1) <= room)
                & (ring_gaps - INNER_CURL_ARC_GAPS * (nested + 1) >= cfg.min_waypoints))
        weights = np.where(fits, curls - nested, 0).astype(float)
        if weights.any():
            nested[rng.choice(rings, p=weights / weights.sum())] += 1
            continue
        weights = np.where((curls + NESTED_CURL_ROOM * nested + 1 <= room)
                           & (ring_gaps - CURL_ARC_GAPS - INNER_CURL_ARC_GAPS * nested >= cfg.min_waypoints),
                           perimeters, 0.0)
        if not weights.any():
            break  # too little ink for this curl anywhere
        chosen = rng.choice(rings, p=weights / weights.sum())
        curls[chosen] += 1
        ring_gaps[chosen] -= CURL_ARC_GAPS
    waypoints = np.maximum(np.rint(ring_gaps - INNER_CURL_ARC_GAPS * nested), cfg.min_waypoints)
    # Most crossings between different rings once each is placed, in placement order.  (R,)
    relative_length = total / (scale * BALANCED_REFERENCE_SIDE_PX)
    budget = rng.uniform(*BALANCED_CROSSING_DENSITY) * relative_length**2
    with_earlier = perimeters * (np.cumsum(perimeters) - perimeters)  # (R,)
    share = np.cumsum(with_earlier) / with_earlier.sum()
    caps = np.maximum(budget * share, 2 * np.arange(len(perimeters))) + CROSSING_SLACK
    return tuple(LoopShape(float(p), int(k), float(wiggle), int(c), float(cap), int(m))
                 for p, k, c, cap, m in zip(perimeters, waypoints, curls, caps, nested))


def perimeter_shares(total: float, num_loops: int, scale: float, rng: np.random.Generator) -> np.ndarray:
    """Loop perimeters summing to total, each inside BALANCED_PERIMETER_PX.  (N,) px
    alpha keeps the mean sum of squared shares at BALANCED_SQUARED_SHARES whatever the count."""
    c = BALANCED_SQUARED_SHARES
    alpha = (1 - c) / max(c * num_loops - 1, (1 - c) / BALANCED_MAX_CONCENTRATION)
    low, high = scale * BALANCED_PERIMETER_PX[0], scale * BALANCED_PERIMETER_PX[1]
    while True:  # Config guarantees num_loops * high > total, so a draw fits with fair odds
        perimeters = low + (total - num_loops * low) * rng.dirichlet(np.full(num_loops, alpha))
        if perimeters.max() <= high:
            return perimeters


def curl_waypoints(start: np.ndarray, end: np.ndarray, side: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Five waypoints of a prolate-trochoid curl in each gap start -> end, on side (+1 or -1).  (C, 2) in, (C, 5, 2) out
    The curve leaves and rejoins the gap's ends and crosses itself once, steeply for depth >= 2."""
    t = np.pi / 3 * np.arange(-2, 3)  # (5,)
    chord = end - start
    unit = np.hypot(*chord.T)[:, None] / (2 * np.pi)  # (C, 1) px per trochoid unit
    along = chord / (2 * np.pi * unit)
    across = side[:, None] * np.column_stack([-along[:, 1], along[:, 0]])
    u = t - depth[:, None] * np.sin(t)  # (C, 5)
    v = -depth[:, None] * (1 + np.cos(t))
    return (0.5 * (start + end))[:, None, :] + unit[:, :, None] * (u[..., None] * along[:, None, :]
                                                                   + v[..., None] * across[:, None, :])


def balanced_waypoints(shape: LoopShape, cfg: Config, rng: np.random.Generator) -> np.ndarray:
    """A unit-radius jittered ring with curls spliced into some of its gaps, in path order.  (K', 2)"""
    count = shape.waypoints
    angles = ring_angles(count, cfg.angle_jitter, rng)
    radii = 1 + shape.wiggle * (2 * np.pi / count) * rng.uniform(-1, 1, count)
    ring = np.column_stack([radii * np.cos(angles), radii * np.sin(angles)])
    # Curls go in every other gap (odd ones for an odd count, so not both the last and the first), so no two
    # share a waypoint; a curl's size follows its gap, so the longest gaps give the roundest.
    candidates = np.arange(1 if count % 2 else rng.integers(2), count, 2)
    gap_length = np.hypot(*(np.take(ring, (candidates + 1) % count, axis=0) - np.take(ring, candidates, axis=0)).T)
    gaps = np.sort(candidates[np.argsort(gap_length)[len(candidates) - shape.curls:]])
    side = rng.choice([-1.0, 1.0], shape.curls)
    depth = rng.uniform(*CURL_DEPTH, shape.curls)
    if shape.curls == 0:  # many loops carry none, and splicing nothing in costs as much as splicing some
        return ring
    curls = curl_waypoints(ring[gaps], ring[(gaps + 1) % count], side, depth)  # (C, 5, 2)
    # Each ring point is followed by its gap's curl, or by NaN rows that are then dropped.
    path = np.full((count, 10, 2), np.nan)
    path[:, 0] = ring
    path[gaps, 1:6] = curls
    if shape.nested:
        # A nested curl replaces its lobe's apex, between the lobe's points either side, and hangs outwards.
        which = rng.choice(shape.curls, shape.nested, replace=False)
        depth = rng.uniform(*INNER_CURL_DEPTH, shape.nested)
        path[gaps[which], 3:8] = curl_waypoints(curls[which, 1], curls[which, 3], -side[which], depth)
        path[gaps[which], 8:10] = curls[which, 3:5]
    path = path.reshape(-1, 2)
    return path[~np.isnan(path[:, 0])]


def balanced_loop(shape: LoopShape, cfg: Config, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Points and radius of curvature of one budgeted loop, scaled to its exact perimeter; the point count
    follows the perimeter, so segments are about as long on every loop."""
    longest = budget_scale(cfg) * BALANCED_PERIMETER_PX[1]
    num_points = max(64, math.ceil(cfg.points_per_loop * shape.perimeter / longest))
    points, curvature_radius = fit_closed_spline(balanced_waypoints(shape, cfg, rng), num_points, cfg.points_per_loop)
    factor = shape.perimeter / np.hypot(*(next_points(points) - points).T).sum()
    return factor * points, factor * curvature_radius


def placement_range(points: np.ndarray, cfg: Config) -> tuple[list[float], list[float]] | None:
    """The least and greatest shift (x, y) that keep every point of a loop inside the margin, or None."""
    xs, ys = points.T  # per column, and scalars until the draw: numpy's overhead outweighs such small arithmetic
    low = [cfg.interior_margin - xs.min(), cfg.interior_margin - ys.min()]
    high = [cfg.size - cfg.interior_margin - xs.max(), cfg.size - cfg.interior_margin - ys.max()]
    return None if low[0] > high[0] or low[1] > high[1] else (low, high)


# ---------------------------------------------------------------------------
# Geometry checks: pure numpy over flat tables of segments (crossings, clearance, angles, parallel stretches, curls)
#
# numpy is slow along a short last axis (a point's two coordinates, a loop's dozen crossings), so points are split
# into their coordinates where it counts, and tables put the long axis last.


RULES = {  # every traceability rule, in the order a check blames them, and what to change when most
    # redraws break it; count_faults and crossing_faults state the first six, try_add_loop the others; last,
    # the two reasons a choice of merges fails that are not rules (merge_rings)
    "disconnected": "lower --max-loops",
    "crossing_budget": "lower --max-loops",
    "crossing_angle": "lower --max-loops or --min-crossing-angle",
    "crossing_bend": "lower --max-loops or raise --max-crossing-bend",
    "crossing_separation": "lower --max-loops, --min-crossing-separation or --crossing-cluster-px",
    "same_pair_separation": "lower --max-loops, --min-same-pair-separation, --min-gap or --wide-lens-angle (two "
                            "crossings of the same two loops must leave a gap of --min-gap between them, of "
                            "--parallel-gap below --wide-lens-angle)",
    "curl_size": "lower --min-curl-px",
    "min_gap": "lower --max-loops or --min-gap",
    "parallel": "lower --max-loops or --parallel-gap, or raise --max-parallel-run",
    "curvature": "lower --angle-jitter or --min-curvature-radius (with --original-shapes, also --max-waypoints "
                 "or --radius-jitter)",
    "interior_margin": "lower --interior-margin (with --original-shapes, also --max-radius)",
    "merge_sites": "lower --max-loops or raise --min-loops (fewer rings to merge into loops)",
    "bare_lobe": "lower --max-loops or raise --min-loops (fewer rings to merge into loops)",
}


# a[index] and a[mask] along the first axis: there numpy's fancy indexing takes a slow general path, and take
# and compress give the same, faster.
def rows_at(a: np.ndarray, index: np.ndarray) -> np.ndarray:
    return a.take(index, axis=0)


def rows_where(a: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return a.compress(mask, axis=0)


def cross2(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]


def outer_dot(vectors: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Dot product of every vector (S, 2) with every offset (W, 2), spelled out: a BLAS `@` starts threads
    that fight the workers for the cores.  (S, W)"""
    product = np.multiply.outer(vectors[:, 0], offsets[:, 0])
    product += np.multiply.outer(vectors[:, 1], offsets[:, 1])
    return product


@dataclass(frozen=True)
class Segments:
    """Every segment of a set of loops, flattened; segment i runs start[i] -> end[i]."""
    start: np.ndarray  # (S, 2) px
    end: np.ndarray  # (S, 2) px
    loop: np.ndarray  # (S,) loop id
    index: np.ndarray  # (S,) position of the segment along its loop
    arc: np.ndarray  # (S,) arc length from the loop's first point to the segment's midpoint, px
    perimeter: np.ndarray  # (S,) length of the segment's loop, px
    bend_deg: np.ndarray  # (S,) how sharply the loop bends at the segment (loop_segments), degrees

    @functools.cached_property  # the sampler reads a new loop's midpoints several times
    def mid(self) -> np.ndarray:
        return 0.5 * (self.start + self.end)

    def __len__(self) -> int:
        return len(self.loop)


def loop_segments(points: np.ndarray, loop_id: int, bend_window_px: float) -> Segments:
    """One loop's segments. Its bend at each is the turn over bend_window_px either side, less what the flanking
    arcs turn as well, since the eye follows a strand that keeps its curvature through a crossing."""
    end = next_points(points)
    step = end - points
    lengths = np.hypot(step[:, 0], step[:, 1])
    arc = np.cumsum(lengths) - 0.5 * lengths
    heading = np.arctan2(step[:, 1], step[:, 0])
    turn = heading - np.concatenate((heading[-1:], heading[:-1]))  # at vertex k, where segment k starts
    # Bends are at least min_curvature_radius, so no vertex turns by half a turn and one wrap is exact.
    turn = np.where(turn > np.pi, turn - 2 * np.pi, np.where(turn < -np.pi, turn + 2 * np.pi, turn))
    turned = np.cumsum(turn)
    total, perimeter, vertex = turned[-1:].sum(), lengths.sum(), arc - 0.5 * lengths
    # The closed loop repeats one perimeter either side, adding its whole turn, so arcs past its seam need no modulo.
    vertex_around = np.concatenate([vertex - perimeter, vertex, vertex + perimeter])
    turned_around = np.concatenate([turned - total, turned, turned + total])
    edges = np.array([-3, -1, 1, 3])[:, None] * bend_window_px + arc  # (4, P): where the flanks and the window end
    so_far = turned_around.take(np.searchsorted(vertex_around, edges, side="right") - 1)
    before, centre, after = np.diff(so_far, axis=0)
    bend_deg = np.degrees(np.minimum(np.abs(centre), 2 * np.abs(centre - 0.5 * (before + after))))
    count = len(points)
    return Segments(points, end, np.full(count, loop_id), np.arange(count), arc, np.full(count, perimeter), bend_deg)


def concat_segments(parts: list[Segments]) -> Segments:
    return Segments(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in dataclasses.fields(Segments)))


@dataclass(frozen=True)
class Crossings:
    """Crossings found so far, one a row; each of a crossing's two strands is named by its loop and its arc."""
    point: np.ndarray  # (C, 2) px
    angle_deg: np.ndarray  # (C,) acute angle between the strands, degrees
    loop_a: np.ndarray  # (C,) loop ids, loop_a <= loop_b
    loop_b: np.ndarray
    arc_a: np.ndarray  # (C,) arc position of the crossing segment on loop_a, px
    arc_b: np.ndarray
    bend_deg: np.ndarray  # (C,) the sharper bend of the two strands there (loop_segments)
    perimeter_a: np.ndarray  # (C,) length of loop_a, px: where a loop crosses itself, the loop its arcs run along

    @staticmethod
    def empty() -> Crossings:
        return Crossings(np.zeros((0, 2)), *(np.zeros(0) for _ in range(7)))

    def __len__(self) -> int:
        return len(self.angle_deg)

    def __add__(self, other: Crossings) -> Crossings:
        return Crossings(*(np.concatenate([getattr(self, f.name), getattr(other, f.name)])
                           for f in dataclasses.fields(Crossings)))

    @property
    def is_self(self) -> np.ndarray:
        return self.loop_a == self.loop_b

    def take(self, rows: np.ndarray) -> Crossings:
        return Crossings(*(rows_at(getattr(self, f.name), rows) for f in dataclasses.fields(Crossings)))


def arc_distance(a: np.ndarray, b: np.ndarray, perimeter: np.ndarray) -> np.ndarray:
    """Distance along a closed loop between two arc positions in [0, perimeter), going the short way round."""
    d = np.abs(a - b)
    return np.minimum(d, perimeter - d)


def segments_cross(p0, p1, q0, q1) -> np.ndarray:
    """Which segment pairs p0p1 x q0q1 cross.  (M, 2) in, (M,) bool out
    A point on the other's line counts as left of it, so a curve through a vertex crosses exactly one pair there."""
    dp, dq = p1 - p0, q1 - q0
    q_sides_differ = (cross2(dp, q0 - p0) >= 0) != (cross2(dp, q1 - p0) >= 0)
    p_sides_differ = (cross2(dq, p0 - q0) >= 0) != (cross2(dq, p1 - q0) >= 0)
    return q_sides_differ & p_sides_differ


def crossing_geometry(p0, p1, q0, q1) -> tuple[np.ndarray, np.ndarray]:
    """Where crossing segment pairs p0p1 x q0q1 cross, and at what acute angle.  (M, 2) in, (M, 2), (M,) out"""
    dp, dq = p1 - p0, q1 - q0
    denom = cross2(dp, dq)
    with np.errstate(divide="ignore", invalid="ignore"):  # signs can say "cross" where rounding leaves denom 0
        t = cross2(q0 - p0, dq) / denom
    point = p0 + t[:, None] * dp
    dot = dp[:, 0] * dq[:, 0] + dp[:, 1] * dq[:, 1]
    return point, np.degrees(np.arctan2(np.abs(denom), np.abs(dot)))


def point_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance from every point of a to every point of b.  (A, 2), (B, 2) in, (A, B) out"""
    return np.hypot(a[:, 0, None] - b[:, 0], a[:, 1, None] - b[:, 1])


def clamp(x: np.ndarray, low, high) -> np.ndarray:
    """np.clip(x, low, high) without np.clip's per-call argument checks, which cost more than the work here."""
    return np.minimum(np.maximum(x, low), high)


def point_segment_distance(x, a, b) -> np.ndarray:
    abx, aby = b[:, 0] - a[:, 0], b[:, 1] - a[:, 1]
    axx, axy = x[:, 0] - a[:, 0], x[:, 1] - a[:, 1]
    t = clamp((axx * abx + axy * aby) / np.maximum(abx * abx + aby * aby, 1e-12), 0.0, 1.0)
    return np.hypot(t * abx - axx, t * aby - axy)


def longest_segment(segs: Segments) -> float:
    """Two segments whose midpoints are farther apart than this cannot cross."""
    return float(np.hypot(*(segs.end - segs.start).T).max())


def separate_strand_pairs(segs: Segments, pairs: np.ndarray, cfg: Config) -> np.ndarray:
    """Candidate pairs (M, 2) of rows of segs, less two segments of one loop under 3 min_gap apart along it: one
    strand bending, not two (bent no tighter than min_curvature_radius, no loop returns within min_gap sooner)."""
    u, v = pairs[:, 0], pairs[:, 1]
    same_loop = rows_at(segs.loop, u) == rows_at(segs.loop, v)
    separate = ~same_loop | (arc_distance(rows_at(segs.arc, u), rows_at(segs.arc, v), rows_at(segs.perimeter, u))
                             > 3.0 * cfg.min_gap)
    return rows_where(pairs, separate)


def crossings_between(first: Segments, second: Segments, i: np.ndarray, j: np.ndarray) -> Crossings:
    """Crossings among candidate pairs of separate strands, segment first[i[m]] against second[j[m]]."""
    ends = (rows_at(first.start, i), rows_at(first.end, i), rows_at(second.start, j), rows_at(second.end, j))
    hit = segments_cross(*ends)
    # Few candidates cross, so where and at what angle is worked out for those alone.
    point, angle = crossing_geometry(*(rows_where(a, hit) for a in ends))
    return label_crossings(first, second, rows_where(i, hit), rows_where(j, hit), point, angle)


def label_crossings(first: Segments, second: Segments, i: np.ndarray, j: np.ndarray, point: np.ndarray,
                    angle_deg: np.ndarray) -> Crossings:
    """The crossing of first[i[m]] with second[j[m]] at point[m], angle_deg[m], with its loops, arcs and bends."""
    loop_i, loop_j = rows_at(first.loop, i), rows_at(second.loop, j)
    arc_i, arc_j = rows_at(first.arc, i), rows_at(second.arc, j)
    swap = loop_i > loop_j  # each crossing's sides in loop order, so a pair of loops has one key
    return Crossings(point, angle_deg, np.where(swap, loop_j, loop_i), np.where(swap, loop_i, loop_j),
                     np.where(swap, arc_j, arc_i), np.where(swap, arc_i, arc_j),
                     np.maximum(rows_at(first.bend_deg, i), rows_at(second.bend_deg, j)),
                     np.where(swap, rows_at(second.perimeter, j), rows_at(first.perimeter, i)))


def unexcused_pairs(pairs: np.ndarray, segs: Segments, crossings: Crossings, gap_px: float,
                    longest: float) -> np.ndarray:
    """Which segment pairs (K, 2) lie inside no gap_px crossing window of their two strands.  (K,) bool"""
    u, v = pairs[:, 0], pairs[:, 1]
    loop_u, loop_v = rows_at(segs.loop, u), rows_at(segs.loop, v)
    swap = loop_u > loop_v
    u, v = np.where(swap, v, u), np.where(swap, u, v)
    loop_u, loop_v = np.minimum(loop_u, loop_v), np.maximum(loop_u, loop_v)
    # (C, K) tables, the crossings the short axis. A crossing's window, the arc round it where its strands may be
    # closer than gap_px: gap_px / sin(theta), 1.2 x for bending, plus a segment for where it falls in its segment.
    window = (1.2 * gap_px / np.sin(np.radians(np.maximum(crossings.angle_deg, 1.0))) + longest)[:, None]  # (C, 1)
    same_strands = (loop_u == crossings.loop_a[:, None]) & (loop_v == crossings.loop_b[:, None])
    arc_u, arc_v = rows_at(segs.arc, u), rows_at(segs.arc, v)
    perimeter_u, perimeter_v = rows_at(segs.perimeter, u), rows_at(segs.perimeter, v)

    def within(crossing_arc_u, crossing_arc_v):  # (C, K): both segments of a pair inside one crossing's window
        return ((arc_distance(arc_u, crossing_arc_u[:, None], perimeter_u) <= window)
                & (arc_distance(arc_v, crossing_arc_v[:, None], perimeter_v) <= window))
    # A self-crossing's two sides are interchangeable, so try both orientations.
    inside = (within(crossings.arc_a, crossings.arc_b)
              | (crossings.is_self[:, None] & within(crossings.arc_b, crossings.arc_a)))
    return ~np.any(same_strands & inside, axis=0)


def clearance_faults(pairs: np.ndarray, segs: Segments, crossings: Crossings, cfg: Config,
                     longest: float) -> np.ndarray:
    """The pairs (K, 2) closer than min_gap that no crossing excuses; the excused ones are set aside first,
    since nearly every close pair sits at a crossing and exact distances cost more."""
    pairs = rows_where(pairs, unexcused_pairs(pairs, segs, crossings, cfg.min_gap, longest))
    u, v = pairs[:, 0], pairs[:, 1]
    p0, p1, q0, q1 = rows_at(segs.start, u), rows_at(segs.end, u), rows_at(segs.start, v), rows_at(segs.end, v)
    # Two segments are closest at an end of one of them, unless they cross.
    ends = np.minimum.reduce([point_segment_distance(p0, q0, q1), point_segment_distance(p1, q0, q1),
                              point_segment_distance(q0, p0, p1), point_segment_distance(q1, p0, p1)])
    return rows_where(pairs, np.where(segments_cross(p0, p1, q0, q1), 0.0, ends) < cfg.min_gap)


def parallel_runs_px(pairs: np.ndarray, segs: Segments, crossings: Crossings, cfg: Config,
                     longest: float) -> np.ndarray:
    """Longest arc along each strand that stays within parallel_gap of one other strand, outside every
    crossing window of the two, wrapping round the closed loop.  (R,) px"""
    pairs = rows_where(pairs, unexcused_pairs(pairs, segs, crossings, cfg.parallel_gap, longest))
    u, v = pairs[:, 0], pairs[:, 1]
    # Midpoint to segment both ways, so a pair's order does not matter: for nearly parallel segments, their distance.
    ends_u, ends_v = (rows_at(segs.start, u), rows_at(segs.end, u)), (rows_at(segs.start, v), rows_at(segs.end, v))
    near = np.minimum(point_segment_distance(rows_at(segs.mid, u), *ends_v),
                      point_segment_distance(rows_at(segs.mid, v), *ends_u)) < cfg.parallel_gap
    u, v = rows_where(u, near), rows_where(v, near)
    rows, beside = np.concatenate([u, v]), np.concatenate([rows_at(segs.loop, v), rows_at(segs.loop, u)])
    return longest_runs_px(segs, rows, beside)


def longest_runs_px(segs: Segments, rows: np.ndarray, beside: np.ndarray) -> np.ndarray:
    """Per (loop, other loop) pair, the arc of the longest run of consecutive marked rows (M,) beside (M,).
    Segments are stored loop by loop, each in one block, in order along it.  (R,) px"""
    loops = int(segs.loop.max()) + 1  # a (loop, other loop) pair is the key loop * loops + other
    counts = np.bincount(segs.loop, minlength=loops)  # (loops,) segments per loop
    first = np.cumsum(counts) - counts
    keys, which = np.unique(rows_at(segs.loop, rows).astype(np.int64) * loops + beside, return_inverse=True)
    owner = keys // loops
    n = rows_at(counts, owner)[:, None]  # (R, 1)
    marked = np.zeros((len(keys), int(counts.max())), dtype=bool)  # (R, P), P the longest loop's count
    marked[which, rows_at(segs.index, rows)] = True
    lengths = np.hypot(*(segs.end - segs.start).T)  # (S,) px
    # Two laps round each loop catch a run that wraps past its first segment; a loop marked all round is apart.
    index = np.arange(2 * marked.shape[1])[None, :] % n  # (R, 2P)
    twice = np.take_along_axis(marked, index, axis=1)
    step = np.where(twice, lengths[first[owner][:, None] + index], 0.0)
    total = np.cumsum(step, axis=1)
    run = total - np.maximum.accumulate(np.where(twice, 0.0, total), axis=1)
    whole = marked.sum(axis=1) == n[:, 0]
    return np.where(whole, rows_at(segs.perimeter, first[owner]), run.max(axis=1))


def lobe_reach_px(segs: Segments, crossings: Crossings) -> np.ndarray:
    """How far the smaller lobe (shorter arc) of each self-crossing of one loop reaches from it.  (C,) px"""
    low = np.minimum(crossings.arc_a, crossings.arc_b)[:, None]  # (C, 1)
    high = np.maximum(crossings.arc_a, crossings.arc_b)[:, None]
    between = (segs.arc > low) & (segs.arc < high)  # (C, P)
    lobe = np.where(high - low <= segs.perimeter[0] / 2, between, ~between)
    return np.max(np.where(lobe, point_distances(crossings.point, segs.mid), 0.0), axis=1)


def joined_by_short_arcs(crossings: Crossings, new: slice, dist: np.ndarray) -> np.ndarray:
    """For two self-crossings of one loop, whether arcs under LENS_ARC_RATIO x their distance join them,
    pairing their arc positions off: then they bound an eye.  (N, C)"""
    def along(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return arc_distance(a[new][:, None], b[None, :], crossings.perimeter_a[new][:, None])
    straight = np.maximum(along(crossings.arc_a, crossings.arc_a), along(crossings.arc_b, crossings.arc_b))
    swapped = np.maximum(along(crossings.arc_a, crossings.arc_b), along(crossings.arc_b, crossings.arc_a))
    return np.minimum(straight, swapped) <= LENS_ARC_RATIO * dist


def same_pair_separation_px(angle_deg: np.ndarray, cfg: Config, eye: np.ndarray | bool = True) -> np.ndarray:
    """Least distance between two crossings of the same two loops, given the shallower angle_deg: the lens
    between them, about D tan(theta / 4) wide, must be min_gap wide (parallel_gap below wide_lens_angle, where eye)."""
    width = np.where((angle_deg < cfg.wide_lens_angle) & eye, max(cfg.min_gap, cfg.parallel_gap), cfg.min_gap)
    return np.maximum(cfg.min_same_pair_separation, width / np.tan(np.radians(np.maximum(angle_deg, 1.0)) / 4))


def count_faults(crossings: np.ndarray, room: float) -> dict[str, np.ndarray]:
    """The rules on how many crossings a budgeted loop makes with the loops before it, for counts (K,):
    in one piece (a loop apart is easy to count) and within its cap (room), so crossings do not track N."""
    return {"disconnected": crossings < 1, "crossing_budget": crossings > room}


def crossing_faults(new: Crossings, old: Crossings, cfg: Config, copy: np.ndarray | None = None
                    ) -> dict[str, np.ndarray]:
    """Which crossing rule each new crossing breaks, in RULES order: the one statement of these rules.  (H,) bool each
    New crossings meet every old one and the new ones of their own copy (copy (H,)); old ones were checked before."""
    copy = np.zeros(len(new), dtype=np.int64) if copy is None else copy
    every, first_new = old + new, len(old)
    dist = point_distances(new.point, every.point)  # (H, C + H)
    same_copy = copy[:, None] == copy[None, :]  # (H, H)
    meets = np.concatenate([np.ones((len(new), first_new), dtype=bool), same_copy], axis=1)
    meets[np.arange(len(new)), first_new + np.arange(len(new))] = False  # not itself
    near = meets & (dist <= cfg.crossing_cluster_px)
    near_old = near[:, :first_new]  # (H, C)
    # An old crossing joins a cluster when its old neighbours and the new ones of a copy near it reach two.
    touched = np.flatnonzero(near_old.any(axis=0))
    old_neighbours = np.zeros(first_new, dtype=np.int64)
    old_neighbours[touched] = (point_distances(rows_at(old.point, touched), old.point)
                               <= cfg.crossing_cluster_px).sum(axis=1) - 1  # less itself
    copy_neighbours = same_copy.astype(np.int64) @ near_old.astype(np.int64)  # (H, C)
    crowded = ((meets & (dist < cfg.min_crossing_separation)).any(axis=1) | (near.sum(axis=1) >= 2)
               | (near_old & (old_neighbours + copy_neighbours >= 2)).any(axis=1))
    same_pair = meets & (new.loop_a[:, None] == every.loop_a) & (new.loop_b[:, None] == every.loop_b)
    shallower = np.minimum(new.angle_deg[:, None], every.angle_deg[None, :])
    # Two crossings of a loop with itself bound an eye only if short arcs join them (not two curls).
    own = new.is_self
    eye = (~own[:, None] | joined_by_short_arcs(every, slice(first_new, None), dist)) if own.any() else True
    return {
        # Two strands meeting shallower than min_crossing_angle read as touching.
        "crossing_angle": new.angle_deg < cfg.min_crossing_angle,
        # A strand turning by beta beside a crossing at theta leaves the wrong way only theta - beta more crooked
        # than its own (creation.md, "Bends beside a crossing").
        "crossing_bend": new.bend_deg > cfg.max_crossing_bend * new.angle_deg,
        "crossing_separation": crowded,
        "same_pair_separation": (same_pair & (dist < same_pair_separation_px(shallower, cfg, eye))).any(axis=1),
    }


def unbroken(faults: dict[str, np.ndarray]) -> np.ndarray:
    """Which rows break none of the rules.  (K,) bool"""
    return ~np.any(list(faults.values()), axis=0)


def first_broken(faults: dict[str, np.ndarray]) -> str | None:
    """The first rule any row breaks, or None."""
    return next((rule for rule, broken in faults.items() if broken.any()), None)


def rule_to_blame(faults: dict[str, np.ndarray]) -> str | None:
    """The first rule that every row still standing breaks, rows falling at each rule they break; None if one passes."""
    standing = True
    for rule, broken in faults.items():
        standing = standing & ~broken
        if not np.any(standing):
            return rule
    return None


def curl_too_small(reach_px: np.ndarray, cfg: Config) -> bool:
    """Whether a lobe a loop makes by crossing itself reaches less than min_curl_px: a pinch, not a curl."""
    return bool(np.any(reach_px < cfg.min_curl_px))


def runs_too_long(runs_px: np.ndarray, cfg: Config) -> bool:
    """Whether two strands run side by side, within parallel_gap, for longer than max_parallel_run."""
    return bool(np.any(runs_px > cfg.max_parallel_run))


@dataclass(frozen=True)
class SegmentGrid:
    """Segment rows bucketed by the cell of their midpoint, row by row and framed by pad empty cells, so
    finding the segments near a point takes a few lookups and never runs off the table."""
    size: int  # canvas side, px
    columns: int  # cells per row and per column of the canvas
    pad: int  # empty cells framing the canvas's on every side
    first: np.ndarray  # (width**2 + 1,) where each cell's run starts in order
    order: np.ndarray  # (S,) segment rows sorted by cell
    mid: np.ndarray  # (S, 2) midpoints by segment row, px

    @property
    def width(self) -> int:  # cells per row and per column of the table, frame included
        return self.columns + 2 * self.pad


def grid_cells(points: np.ndarray, columns: int, pad: int) -> np.ndarray:
    """Table index of the cell holding each point (points off the canvas count as on its edge).  (P,)"""
    col, row = (clamp(np.floor(points / GRID_CELL_PX).astype(np.int64), 0, columns - 1) + pad).T
    return row * (columns + 2 * pad) + col


def build_grid(mid: np.ndarray, size: int, pad: int) -> SegmentGrid:
    columns = int(size // GRID_CELL_PX) + 1
    cell = grid_cells(mid, columns, pad)
    first = np.concatenate([[0], np.cumsum(np.bincount(cell, minlength=(columns + 2 * pad)**2))])
    return SegmentGrid(size, columns, pad, first, np.argsort(cell, kind="stable"), mid)


def tangle_grid(segs: Segments, cfg: Config, longest: float) -> SegmentGrid:
    """The grid of a tangle, framed for the widest search a next loop makes; the spare cell lets a next loop's
    segments be a cell longer without a rebuild."""
    reach = max(cfg.min_gap, cfg.parallel_gap) + max(longest, GRID_CELL_PX)
    return build_grid(segs.mid, cfg.size, math.ceil(reach / GRID_CELL_PX) + 1)


def grid_pairs(grid: SegmentGrid, points: np.ndarray, radius: float) -> tuple[np.ndarray, np.ndarray]:
    """Every (point, segment row) pair whose midpoints are at most radius apart.  (M,), (M,)"""
    reach = int(np.ceil(radius / GRID_CELL_PX))
    if reach > grid.pad:  # wider than the frame (a next loop's segments much longer): rebuilt with a wider one
        grid = build_grid(grid.mid, grid.size, reach)
    # Table index of the first cell of each row of each point's neighbourhood; one past its last is 2 reach + 1 on.
    row_first = np.arange(-reach, reach + 1) * grid.width - reach  # (R,) from the point's own cell
    run_first = grid_cells(points, grid.columns, grid.pad)[:, None] + row_first  # (P, R)
    run_start = rows_at(grid.first, run_first)
    run_stop = rows_at(grid.first, run_first + (2 * reach + 1))
    # Flat indices of the runs that hold segments (most are empty): cheaper than nonzero's two index arrays.
    busy = np.flatnonzero(run_stop > run_start)
    start = rows_at(run_start.ravel(), busy)
    length = rows_at(run_stop.ravel(), busy) - start
    # Expand each run into its members: position = run start + rank within the run.
    rank = np.arange(length.sum()) - np.repeat(np.cumsum(length) - length, length)
    segment = rows_at(grid.order, np.repeat(start, length) + rank)
    point = np.repeat(busy // run_first.shape[1], length)
    gap = rows_at(points, point) - rows_at(grid.mid, segment)
    close = np.einsum("ij,ij->i", gap, gap) <= radius * radius
    return rows_where(point, close), rows_where(segment, close)


# ---------------------------------------------------------------------------
# The sampler: how the answer N is decided, then loops placed one at a time


def loop_count(cfg: Config, index: int, rng: np.random.Generator) -> int:
    """The answer for sample index, fixed before any loop is drawn, so rejection cannot skew it; "equal" takes
    each block of indices as a shuffle of every count, seeded by the run seed and the block alone."""
    if cfg.answers == "uniform":
        return int(rng.integers(cfg.min_loops, cfg.max_loops + 1))
    counts = np.arange(cfg.min_loops, cfg.max_loops + 1)
    block, slot = divmod(index, len(counts))
    # A two-element spawn key (1, block) can never equal a sample's one-element key.
    block_rng = np.random.default_rng(np.random.SeedSequence(cfg.seed, spawn_key=(1, block)))
    return int(block_rng.permutation(counts)[slot])


class PlacementError(RuntimeError):
    status = 1  # the exit status: the flags were valid, the sampler gave up


@dataclass(frozen=True)
class Tangle:
    """Loops accepted so far, with their segments, a spatial index and their crossings."""
    loops: tuple[np.ndarray, ...]  # each (P, 2) px, P depending on the loop's length
    segs: Segments
    grid: SegmentGrid  # over segs
    crossings: Crossings
    longest: float  # longest_segment(segs)

    @staticmethod
    def empty(cfg: Config) -> Tangle:
        segs = loop_segments(np.zeros((0, 2)), 0, cfg.bend_window)
        return Tangle((), segs, tangle_grid(segs, cfg, 0.0), Crossings.empty(), 0.0)

    def crossing_room(self, shape: LoopShape) -> float:
        """How many more crossings between loops the shape's crossing_cap allows."""
        return shape.crossing_cap - np.count_nonzero(~self.crossings.is_self)

    @functools.cached_property  # the merges read them several times
    def along(self) -> list[np.ndarray]:
        """Each loop's unit tangents (tangents).  (P, 2) each"""
        return [tangents(points) for points in self.loops]

    @functools.cached_property
    def point_step(self) -> float:
        """The median distance between a loop's consecutive points, px (about the same on every loop)."""
        return float(np.median(np.hypot(*(next_points(self.loops[0]) - self.loops[0]).T)))


class ScreenedCrossings(NamedTuple):
    """Crossings with the tangle of translated copies of a loop, as the screen found them.  (H,) each"""
    segment: np.ndarray  # along the new loop
    row: np.ndarray  # of the tangle's segments
    point: np.ndarray  # (H, 2) px
    angle_deg: np.ndarray
    copy: np.ndarray  # which copy each crossing is of

    def of(self, copy: int) -> ScreenedCrossings:
        """One copy's crossings, to hand on to try_add_loop."""
        mine = self.copy == copy
        return ScreenedCrossings(*(rows_where(a, mine) for a in self))


def try_add_loop(tangle: Tangle, points: np.ndarray, cfg: Config, shape: LoopShape | None = None,
                 screened: ScreenedCrossings | None = None) -> tuple[Tangle | None, str | None]:
    """Add a placed loop if it keeps every rule against itself and the loops so far (only pairs with the new
    loop are examined); screened holds its crossings with the tangle already found by screen_placements."""
    from scipy.spatial import cKDTree  # here, not at the top: --help, --merge and reruns build no tree
    new = loop_segments(points, len(tangle.loops), cfg.bend_window)
    longest = max(tangle.longest, longest_segment(new))
    between = (crossings_between(new, tangle.segs, *grid_pairs(tangle.grid, new.mid, longest)) if screened is None
               else label_crossings(new, tangle.segs, *screened[:4]))
    segs = concat_segments([tangle.segs, new])
    offset = len(tangle.segs)
    new_tree = cKDTree(new.mid)

    def pairs_within_new(radius: float) -> np.ndarray:
        found = new_tree.query_pairs(radius, output_type="ndarray").astype(np.int64) + offset
        return separate_strand_pairs(segs, found, cfg)
    crossings = between + crossings_between(segs, segs, *pairs_within_new(longest).T)
    counted = count_faults(np.array([len(between)]), tangle.crossing_room(shape)) if shape and tangle.loops else {}
    if reason := first_broken({**counted, **crossing_faults(crossings, tangle.crossings, cfg)}):
        return None, reason
    curls = rows_where(np.arange(len(crossings)), crossings.is_self)
    if len(curls) and curl_too_small(lobe_reach_px(new, crossings.take(curls)), cfg):
        return None, "curl_size"
    # Clearance and parallel stretches, the costlier checks, run last, on one candidate search.
    reach = max(cfg.min_gap, cfg.parallel_gap) + longest
    mine, theirs = grid_pairs(tangle.grid, new.mid, reach)
    candidates = np.concatenate([np.column_stack([mine + offset, theirs]), pairs_within_new(reach)])  # (M, 2) rows
    gap = rows_at(segs.mid, candidates[:, 0]) - rows_at(segs.mid, candidates[:, 1])
    within_gap = np.einsum("ij,ij->i", gap, gap) <= (cfg.min_gap + longest) ** 2
    if len(clearance_faults(rows_where(candidates, within_gap), segs, crossings, cfg, longest)):
        return None, "min_gap"
    if runs_too_long(parallel_runs_px(candidates, segs, crossings, cfg, longest), cfg):
        return None, "parallel"
    crossings = tangle.crossings + crossings
    return Tangle(tangle.loops + (points,), segs, tangle_grid(segs, cfg, longest), crossings, longest), None


def placement_faults(tangle: Tangle, tries: np.ndarray, new: Segments, room: float, cfg: Config
                     ) -> tuple[dict[str, np.ndarray], ScreenedCrossings]:
    """The count_faults and crossing_faults against the tangle of each copy (tries, (K, P, 2)) of the loop new (its
    segments unmoved, as the next loop), (K,) bool each, and their crossings; copies outside the count go no further."""
    count, points = tries.shape[1], tries.reshape(-1, 2)
    ends = np.concatenate([tries[:, 1:], tries[:, :1]], axis=1).reshape(-1, 2)
    longest = max(tangle.longest, float(np.hypot(*(ends - points).T).max()))  # copies differ by rounding
    mine, theirs = grid_pairs(tangle.grid, 0.5 * (points + ends), longest)
    pairs = (rows_at(points, mine), rows_at(ends, mine), rows_at(tangle.segs.start, theirs),
             rows_at(tangle.segs.end, theirs))
    hit = segments_cross(*pairs)
    faults = count_faults(np.bincount(rows_where(mine, hit) // count, minlength=len(tries)), room)
    hit &= rows_at(unbroken(faults), mine // count)
    point, angle = crossing_geometry(*(rows_where(a, hit) for a in pairs))
    copy, segment = np.divmod(rows_where(mine, hit), count)  # (H,) each
    row = rows_where(theirs, hit)
    found = label_crossings(new, tangle.segs, segment, row, point, angle)
    # Pairs across copies are measured too and masked out: a batch's copies make few crossings.
    for rule, broken in crossing_faults(found, tangle.crossings, cfg, copy).items():
        faults[rule] = np.bincount(rows_where(copy, broken), minlength=len(tries)) > 0
    return faults, ScreenedCrossings(segment, row, point, angle, copy)


def docked_offsets(tangle: Tangle, placed: np.ndarray, cfg: Config, rng: np.random.Generator) -> np.ndarray:
    """Up to PLACEMENTS_PER_SHAPE shifts of a ring that set it beside a random strand of the tangle, DOCK_GAP_PX
    from it on a random side, and keep it inside the margin: near passes to merge at are then common.  (K, 2)"""
    rows = rng.integers(len(tangle.segs), size=PLACEMENTS_PER_SHAPE)
    along = rows_at(tangle.segs.end, rows) - rows_at(tangle.segs.start, rows)
    side = rng.choice([-1.0, 1.0], PLACEMENTS_PER_SHAPE)[:, None] * np.column_stack([-along[:, 1], along[:, 0]])
    side /= np.hypot(*side.T)[:, None]
    # The ring's point farthest towards the strand lands the gap away from it.
    nearest = rows_at(placed, np.argmax(outer_dot(placed, -side), axis=0))
    gap = budget_scale(cfg) * rng.uniform(*DOCK_GAP_PX, PLACEMENTS_PER_SHAPE)
    offsets = rows_at(tangle.segs.mid, rows) + side * gap[:, None] - nearest
    # Rounding can leave a ring as wide as the drawable area an ulp too wide to move.
    low, high = placement_range(placed, cfg) or ([0.0, 0.0], [0.0, 0.0])
    return rows_where(offsets, ((offsets >= low) & (offsets <= high)).all(axis=1))


def screen_placements(tangle: Tangle, placed: np.ndarray, cfg: Config, rng: np.random.Generator, shape: LoopShape
                      ) -> tuple[np.ndarray | None, ScreenedCrossings | None, str | None]:
    """The first of the docked positions of a ring whose crossings pass: the ring and its crossings, or None,
    None and the rule every position broke. Moving is cheaper than a spline fit."""
    offsets = docked_offsets(tangle, placed, cfg, rng)
    if not len(offsets):
        return None, None, "interior_margin"
    room = tangle.crossing_room(shape)
    new = loop_segments(placed, len(tangle.loops), cfg.bend_window)  # try_add_loop measures it again where it lands
    batches = []
    half = (len(offsets) + 1) // 2  # two batches (one when there is one position); any split agrees
    for start, stop in [(0, half), (half, len(offsets))][:1 + (half < len(offsets))]:
        tries = np.empty((stop - start, len(placed), 2))  # (K, P, 2): the loop moved by each offset
        for axis in range(2):  # one coordinate at a time (the short axis; see the geometry section's head)
            tries[..., axis] = placed[:, axis] + offsets[start:stop, axis, None]
        faults, hits = placement_faults(tangle, tries, new, room, cfg)
        allowed = unbroken(faults)
        if allowed.any():
            chosen = int(np.argmax(allowed))
            return tries[chosen], hits.of(chosen), None
        batches.append(faults)
    return None, None, rule_to_blame({rule: np.concatenate([f[rule] for f in batches]) for rule in batches[0]})


def draw_loop(cfg: Config, rng: np.random.Generator,
              shape: LoopShape | None = None) -> tuple[np.ndarray | None, str | None]:
    """One loop placed on the canvas, or None with the rule its shape broke; shape is None with --original-shapes."""
    points, curvature_radius = (balanced_loop(shape, cfg, rng) if shape is not None else
                                fit_closed_spline(sample_waypoints(cfg, rng), cfg.points_per_loop, cfg.points_per_loop))
    if curvature_radius.min() < cfg.min_curvature_radius:
        return None, "curvature"
    shifts = placement_range(points, cfg)  # to a uniform position whose every point stays inside the margin
    if shifts is None:
        return None, "interior_margin"
    return points + rng.uniform(*shifts), None


def merge_sites(tangle: Tangle, cfg: Config) -> tuple[np.ndarray, np.ndarray]:
    """Where two rings may be merged: near passes (closest approaches of two rings' nearly parallel strands,
    clear of crossings) and crossings steep and apart enough to splice, each row (ring a, point a, ring b,
    point b, gap px or crossing angle; a crossing's row of tangle.crossings last).  (S, 5), (X, 6)"""
    from scipy.spatial import cKDTree  # here, not at the top: --help, --merge and reruns build no tree
    loops, crossings = tangle.loops, tangle.crossings
    trees, along = [cKDTree(points) for points in loops], tangle.along
    scale = budget_scale(cfg)
    least_gap, most_gap = scale * NEAR_PASS_GAP_PX[0], scale * NEAR_PASS_GAP_PX[1]
    low = np.array([p.min(axis=0) for p in loops]) - most_gap
    high = np.array([p.max(axis=0) for p in loops]) + most_gap
    near = []
    for a, b in itertools.combinations(range(len(loops)), 2):
        if (low[a] > high[b]).any() or (low[b] > high[a]).any():
            continue
        gap, closest = np.full(len(loops[a]), np.inf), np.zeros(len(loops[a]), dtype=np.int64)
        near_b = np.flatnonzero(((loops[a] >= low[b]) & (loops[a] <= high[b])).all(axis=1))  # the rest are far
        gap[near_b], closest[near_b] = trees[b].query(loops[a][near_b], distance_upper_bound=most_gap)
        local = (gap <= np.roll(gap, 1)) & (gap < np.roll(gap, -1)) & (gap >= least_gap) & np.isfinite(gap)
        for i in np.flatnonzero(local):
            j = int(closest[i])
            middle = 0.5 * (loops[a][i] + loops[b][j])
            clear = not len(crossings) or np.hypot(*(crossings.point - middle).T).min() >= scale * NEAR_PASS_CLEAR_PX
            if clear and abs(along[a][i] @ along[b][j]) >= NEAR_PASS_COS:
                near.append((a, i, b, j, gap[i]))
    between = np.flatnonzero(~crossings.is_self & (crossings.angle_deg >= SPLICE_MIN_ANGLE))
    apart = point_distances(rows_at(crossings.point, between), crossings.point)
    apart[np.arange(len(between)), between] = np.inf  # not itself
    cross = [(a, trees[a].query(point)[1], b, trees[b].query(point)[1], angle) for a, b, point, angle in
             zip(crossings.loop_a[between].astype(int), crossings.loop_b[between].astype(int),
                 crossings.point[between], crossings.angle_deg[between])]
    cross = [(*site, c) for site, c, d in zip(cross, between, apart.min(axis=1, initial=np.inf))
             if d >= scale * SPLICE_CLEAR_PX]
    return np.array(near, dtype=float).reshape(-1, 5), np.array(cross, dtype=float).reshape(-1, 6)


def crossings_in_order(crossings: Crossings, num_loops: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each loop's crossings (rows of crossings) in the order the loop passes them, with the arc there."""
    rows, loops = np.arange(len(crossings)), np.concatenate([crossings.loop_a, crossings.loop_b]).astype(int)
    arcs = np.concatenate([crossings.arc_a, crossings.arc_b])
    order = np.lexsort((arcs, loops))
    split = np.cumsum(np.bincount(loops, minlength=num_loops))[:-1]
    return list(zip(np.split(np.concatenate([rows, rows])[order], split), np.split(arcs[order], split)))


def leaves_bare_lobe(passes: list, a: int, arc_a: float, b: int, arc_b: float, same_way: bool) -> bool:
    """Whether merging rings a and b at these arcs (passes from crossings_in_order) leaves a lobe nothing
    crosses, which a count of curls finds. A splice joins the faces in the X's two acute corners and closes
    the obtuse ones with its cubics; a face there cornered by the site and one crossing of a and b, the next
    along both rings, would be left cornered by that crossing alone. (A cross-join's X lies on both lobes of
    every crossing of a and b, so the test seldom fires for one.)"""
    def next_along(ring: int, arc: float, step: int) -> int:
        rows, arcs = passes[ring]
        k = np.searchsorted(arcs, arc, side="right") if step > 0 else np.searchsorted(arcs, arc) - 1
        return int(rows[k % len(rows)]) if len(rows) else -1 - ring
    # With the rings running the same way those corners lie between a forwards and b backwards.
    corners = ((1, -1), (-1, 1)) if same_way else ((1, 1), (-1, -1))
    return any(next_along(a, arc_a, step_a) == next_along(b, arc_b, step_b) for step_a, step_b in corners)


def merge_cuts(tangle: Tangle, sites: tuple[np.ndarray, np.ndarray], cfg: Config, rng: np.random.Generator
               ) -> tuple[np.ndarray, np.ndarray]:
    """The sites whose cubics bend no tighter than --min-curvature-radius, each row (ring a, point a, ring b,
    point b, half-length of the cut px, 1 if the merge there leaves a bare lobe); the cut is drawn here once.
    (S', 6), (X', 6)"""
    loops = tangle.loops
    spacing, along, passes = tangle.point_step, tangle.along, crossings_in_order(tangle.crossings, len(loops))
    scale = budget_scale(cfg)
    first = np.cumsum([0] + [len(points) for points in loops])  # each ring's first row in tangle.segs
    kept = []
    for splice, rows in enumerate(sites):
        cut, cubics = [], []
        for a, i, b, j, measure, *crossing in rows:
            a, i, b, j = int(a), int(i), int(b), int(j)
            # A cut long enough for the X or the turn it makes; the gap stands for the X's half-width.
            half = (scale * rng.uniform(*SPLICE_GAP_PX) / np.sin(np.radians(measure)) if splice else
                    0.75 * measure / np.tan(np.radians(rng.uniform(*CROSS_JOIN_ANGLE)) / 2))
            ends, pairs = site_ends(loops, along, (a, i, b, j, half), spacing)
            cubics += [(*ends[one], ends[two][0], -ends[two][1]) for one, two in pairs]
            if splice:
                arc_a, arc_b = tangle.crossings.arc_a[int(crossing[0])], tangle.crossings.arc_b[int(crossing[0])]
            else:
                arc_a, arc_b = tangle.segs.arc[first[a] + i], tangle.segs.arc[first[b] + j]
            bare = leaves_bare_lobe(passes, a, arc_a, b, arc_b, along[a][i] @ along[b][j] > 0)
            cut.append((a, i, b, j, half, bare))
        cut = np.array(cut, dtype=float).reshape(-1, 6)
        radius = cubic_min_radius(*np.array(cubics).reshape(-1, 4, 2).transpose(1, 0, 2)).reshape(-1, 2)
        kept.append(rows_where(cut, radius.min(axis=1, initial=np.inf) >= cfg.min_curvature_radius))
    return tuple(kept)


def same_pair_conflicts(crossings: Crossings, cfg: Config) -> tuple[np.ndarray, ...]:
    """Pairs of crossings of different ring pairs near enough to break the same-pair rule if merges give them
    the same two loops: their rings (K, 4), their distance and the plain and eye limits on it (K,) px each
    (breaks_same_pair takes the plain one where both would be a loop crossing itself, whose eye test needs
    the arcs)."""
    dist = point_distances(crossings.point, crossings.point)
    shallower = np.minimum(crossings.angle_deg[:, None], crossings.angle_deg[None, :])
    limit = same_pair_separation_px(shallower, cfg, True)
    a, b = crossings.loop_a.astype(int), crossings.loop_b.astype(int)
    first, second = np.nonzero(np.triu(dist < limit, 1) & ((a[:, None] != a) | (b[:, None] != b)))
    rings = np.column_stack([a[first], b[first], a[second], b[second]])
    plain = same_pair_separation_px(shallower[first, second], cfg, False)
    return rings, dist[first, second], plain, limit[first, second]


def breaks_same_pair(conflicts, component: np.ndarray) -> bool:
    """Whether, with ring r in loop component[r], two of the crossings in conflicts would break the same-pair rule."""
    rings, dist, plain, eye = conflicts
    loops = np.sort(component[rings].reshape(-1, 2, 2), axis=2)  # (K, 2, 2): each crossing's pair of loops
    same = (loops[:, 0] == loops[:, 1]).all(axis=1)
    own = loops[:, 0, 0] == loops[:, 0, 1]
    return bool(np.any(same & (dist < np.where(own, plain, eye))))


def choose_merges(tangle: Tangle, sites: tuple[np.ndarray, np.ndarray], conflicts, cross_joins: int, splices: int,
                  cfg: Config, rng: np.random.Generator) -> list[tuple] | None:
    """cross_joins near passes, then splices crossings, each kind in random order with the sites that leave
    no bare lobe first, each merging two loops still apart, away from the other sites and the same-pair
    rule: (ring a, point a, ring b, point b, half-length of the cut) each, or None if the sites run out."""
    loops, spacing = tangle.loops, tangle.point_step
    taken = [np.zeros(len(points), dtype=bool) for points in loops]
    component, spacing_px = np.arange(len(loops)), budget_scale(cfg) * MERGE_SPACING_PX
    chosen, middles = [], np.zeros((0, 2))
    for rows, wanted in ((sites[0], cross_joins), (sites[1], splices)):
        found = 0
        # Sites that leave no bare lobe go first, so few choices fail for one.
        for a, i, b, j, half, _ in rows[np.argsort(rows[:, 5] + rng.random(len(rows)) / 2)]:
            if found == wanted:
                break
            a, i, b, j = int(a), int(i), int(b), int(j)
            middle = 0.5 * (loops[a][i] + loops[b][j])
            if component[a] == component[b] or (np.hypot(*(middles - middle).T) < spacing_px).any():
                continue
            merged = np.where(component == component[a], component[b], component)
            if breaks_same_pair(conflicts, merged):
                continue
            reach = max(2, round(half / spacing)) + 4
            spans = [(r, np.arange(k - reach, k + reach + 1) % len(loops[r])) for r, k in ((a, i), (b, j))]
            if any(taken[r][span].any() for r, span in spans):
                continue
            for r, span in spans:
                taken[r][span] = True
            chosen.append((a, i, b, j, half))
            middles = np.vstack([middles, middle])
            component = merged
            found += 1
        if found < wanted:
            return None
    return chosen


def cubic_points(start: np.ndarray, leave: np.ndarray, end: np.ndarray, arrive: np.ndarray, spacing: float
                 ) -> np.ndarray:
    """The inner points, about spacing apart, of the cubic from start, leaving along unit leave, to end,
    arriving along unit arrive, its end tangents as long as the chord.  (M, 2)"""
    chord = np.hypot(*(end - start))
    t = np.linspace(0, 1, max(4, math.ceil(chord * 1.2 / spacing)) + 1)[1:-1, None]
    return ((2 * t**3 - 3 * t**2 + 1) * start + (t**3 - 2 * t**2 + t) * chord * leave
            + (3 * t**2 - 2 * t**3) * end + (t**3 - t**2) * chord * arrive)


def cubic_min_radius(start: np.ndarray, leave: np.ndarray, end: np.ndarray, arrive: np.ndarray) -> np.ndarray:
    """The tightest radius of curvature of each cubic of cubic_points, (K, 2) each in, from its derivatives at
    65 parameters.  (K,) px"""
    chord = np.hypot(*(end - start).T)[:, None, None]
    v0, v1, gap = leave[:, None] * chord, arrive[:, None] * chord, (start - end)[:, None]
    t = np.linspace(0, 1, 65)[None, :, None]
    velocity = (6 * t**2 - 6 * t) * gap + (3 * t**2 - 4 * t + 1) * v0 + (3 * t**2 - 2 * t) * v1  # (K, 65, 2)
    acceleration = (12 * t - 6) * gap + (6 * t - 4) * v0 + (6 * t - 2) * v1
    speed = np.hypot(velocity[..., 0], velocity[..., 1])
    bend = np.abs(velocity[..., 0] * acceleration[..., 1] - velocity[..., 1] * acceleration[..., 0])
    return (speed**3 / np.maximum(bend, 1e-12)).min(axis=1)


def site_ends(loops: tuple[np.ndarray, ...], along: list[np.ndarray], site: tuple, spacing: float
              ) -> tuple[dict, list]:
    """The four ends a merge cuts at a site (ring a, point a, ring b, point b, half-length), each (ring, point
    index) -> (point, direction its cubic leaves), and the two pairs of ends the cubics join: each end of a goes
    on to the end of b that continues its way (across the other cubic at a near pass, turning away from it at
    a crossing)."""
    a, i, b, j, half = site[:5]
    ends = {}
    for r, k in ((a, i), (b, j)):
        reach = max(2, round(half / spacing))
        stop, restart = (k - reach) % len(loops[r]), (k + reach) % len(loops[r])
        ends[(r, stop)] = (loops[r][stop], along[r][stop])  # an arc arrives here going forwards
        ends[(r, restart)] = (loops[r][restart], -along[r][restart])
    a_stop, a_restart, b_stop, b_restart = ends
    first, second = (b_restart, b_stop) if ends[b_restart][1] @ ends[a_stop][1] < 0 else (b_stop, b_restart)
    return ends, [(a_stop, first), (second, a_restart)]


def merged_loops(tangle: Tangle, chosen: list[tuple]) -> list[np.ndarray]:
    """The tangle's loops after the merges: at each site both strands are cut and their ends joined by cubics."""
    loops, spacing, along = tangle.loops, tangle.point_step, tangle.along
    cuts = {r: [] for r in range(len(loops))}  # ring -> (stop, restart) point indices of its cuts
    partner, ends = {}, {}  # end -> the end its cubic joins; end -> (point, direction the cubic leaves)
    for site in chosen:
        site_end, pairs = site_ends(loops, along, site, spacing)
        ends.update(site_end)
        for one, two in pairs:
            partner.update({one: two, two: one})
        (a_stop, a_restart, b_stop, b_restart) = site_end
        cuts[a_stop[0]].append((a_stop[1], a_restart[1]))
        cuts[b_stop[0]].append((b_stop[1], b_restart[1]))
    arcs = {}  # end -> (the arc's points from that end on, the end at its other side)
    for r, windows in cuts.items():
        windows.sort()
        for (_, restart), (stop, _) in zip(windows, windows[1:] + windows[:1]):
            span = np.arange(restart, stop + (len(loops[r]) if stop <= restart else 0) + 1) % len(loops[r])
            points = loops[r][span]
            arcs[(r, restart)], arcs[(r, stop)] = (points, (r, stop)), (points[::-1], (r, restart))
    merged = [points for r, points in enumerate(loops) if not cuts[r]]
    unused = set(arcs)
    while unused:
        end = next(iter(unused))
        pieces = []
        while end in unused:
            points, other = arcs[end]
            unused -= {end, other}
            join = partner[other]
            pieces += [points, cubic_points(ends[other][0], ends[other][1], ends[join][0], -ends[join][1], spacing)]
            end = join
        merged.append(np.concatenate(pieces))
    return merged


def bare_lobes(crossings: Crossings, num_loops: int) -> int:
    """How many lobes of self-crossings no other crossing lies on: what a count of curls finds."""
    count = 0
    for loop in range(num_loops):
        on_a, on_b = crossings.loop_a == loop, crossings.loop_b == loop
        positions = np.sort(np.concatenate([crossings.arc_a[on_a], crossings.arc_b[on_b]]))
        own = np.flatnonzero(crossings.is_self & on_a)
        low = np.minimum(crossings.arc_a[own], crossings.arc_b[own])
        high = np.maximum(crossings.arc_a[own], crossings.arc_b[own])
        inside = np.searchsorted(positions, high) - np.searchsorted(positions, low, side="right")
        count += np.count_nonzero(inside == 0) + np.count_nonzero(len(positions) - inside - 2 == 0)
    return count


def merge_rings(tangle: Tangle, num_loops: int, cfg: Config, rng: np.random.Generator, redraws: Counter
                ) -> Tangle | None:
    """The ring tangle merged down to num_loops loops, half the merges cross-joins and half splices, so
    crossings and near passes keep their counts; the merged loops checked again loop by loop (crossings,
    clearance, parallel stretches, curls). None if the tangle cannot take the most merges any N asks for
    (whatever N is) or no choice of merges passes."""
    sites = merge_cuts(tangle, merge_sites(tangle, cfg), cfg, rng)
    conflicts = same_pair_conflicts(tangle.crossings, cfg)
    most = cfg.max_loops - cfg.min_loops
    if choose_merges(tangle, sites, conflicts, most // 2, most - most // 2, cfg, rng) is None:
        redraws["merge_sites"] += 1
        return None
    merges, bare = cfg.max_loops - num_loops, bare_lobes(tangle.crossings, len(tangle.loops))
    for _ in range(MERGE_TRIES):
        cross_joins = merges // 2 + (int(rng.integers(2)) if merges % 2 else 0)
        chosen = choose_merges(tangle, sites, conflicts, cross_joins, merges - cross_joins, cfg, rng)
        if chosen is None:
            redraws["merge_sites"] += 1
            continue
        loops = merged_loops(tangle, chosen)
        merged, reason = Tangle.empty(cfg), None
        for points in loops:
            merged, reason = try_add_loop(merged, points, cfg)
            if reason is not None:
                break
        if reason is None and bare_lobes(merged.crossings, num_loops) > bare + 1:
            reason = "bare_lobe"  # a lobe nothing crosses, which a count of curls finds: they would follow N
        if reason is None:
            return merged
        redraws[reason] += 1
    return None


def place_loops(cfg: Config, rng: np.random.Generator, shapes: tuple, redraws: Counter) -> Tangle | None:
    """Place a loop for each shape, one at a time, redrawing only the loop that breaks a rule; None once one
    loop has been redrawn loop_attempts times."""
    tangle = Tangle.empty(cfg)
    while len(tangle.loops) < len(shapes):
        shape = shapes[len(tangle.loops)]
        for _ in range(cfg.loop_attempts):
            candidate, reason = draw_loop(cfg, rng, shape)
            screened = None
            if candidate is not None and shape is not None and tangle.loops:
                candidate, screened, reason = screen_placements(tangle, candidate, cfg, rng, shape)
            if candidate is not None:
                added, reason = try_add_loop(tangle, candidate, cfg, shape, screened)
            if reason is None:
                tangle = added
                break
            redraws[reason] += 1
        else:
            redraws["restart"] += 1
            return None
    return tangle


def sample_tangle(cfg: Config, rng: np.random.Generator, num_loops: int, index: int) -> tuple[Tangle, Counter]:
    """num_loops loops: placed as they are with --original-shapes, else max_loops rings placed and merged down
    to num_loops. A failed try restarts the sample, the count unchanged. The tangle and how many redraws each
    rule caused."""
    # Budgets are kept across restarts: failed merges are likelier at small N, and redrawing the budgets
    # would let the easy ones through more often there.
    shapes = (None,) * num_loops if cfg.original_shapes else ring_shapes(cfg, rng)
    redraws: Counter = Counter()
    for _ in range(cfg.sample_restarts):
        tangle = place_loops(cfg, rng, shapes, redraws)
        if tangle is not None and not cfg.original_shapes:
            tangle = merge_rings(tangle, num_loops, cfg, rng, redraws)
        if tangle is not None:
            return tangle, redraws
    reason, count = max(((r, c) for r, c in redraws.items() if r != "restart"), key=lambda item: item[1])
    # The rules are in pixels, so a smaller canvas fails on whichever rule its crowding hits first.
    default_size = Config.__dataclass_fields__["size"].default
    smaller = (f"; the rules' pixel defaults are set for --size {default_size}: on a smaller canvas scale them down "
               "with it, as the README's \"Smaller canvases\" shows" if cfg.size < default_size else "")
    raise PlacementError(
        f"sample {index} (seed {cfg.seed}): could not place {num_loops} loops within "
        f"{cfg.sample_restarts} restarts of {cfg.loop_attempts} redraws per loop; {count} of "
        f"{sum(redraws.values()) - redraws['restart']} redraws broke the {reason} rule: {RULES[reason]}{smaller}")


# ---------------------------------------------------------------------------
# Rendering: points in, PIL image out


# 256 colours on the line from ink to paper, indexed by tone (clipped at the ends).
PALETTE = np.clip(np.rint(np.array(INK_RGB) + (np.arange(256)[:, None] - INK_TONE) / (PAPER_TONE - INK_TONE)
                          * (np.array(PAPER_RGB) - np.array(INK_RGB))), 0, 255).astype(np.uint8).ravel().tolist()


def stroke_coverage(loops: tuple[np.ndarray, ...], cfg: Config) -> np.ndarray:
    """Fraction of each pixel covered by the strokes: falling linearly over one pixel across the edge from
    the pixel centre's distance to the nearest segment; a pixel keeps its largest.  (size, size) float32"""
    half = cfg.stroke_width / 2
    start = np.concatenate(loops)
    step = np.concatenate([next_points(p) for p in loops]) - start  # (S, 2)
    step_sq = np.maximum(np.einsum("ij,ij->i", step, step), 1e-12)
    # Integer offsets (W, 2) from the pixel holding a segment's midpoint to every pixel whose centre may lie
    # within reach of it; the midpoint sits anywhere in its pixel, so a centre is up to half a pixel nearer per axis.
    reach_px = half + 0.5 + np.sqrt(step_sq.max()) / 2
    r = int(np.ceil(reach_px + 0.5))
    ox, oy = np.meshgrid(np.arange(-r, r + 1), np.arange(-r, r + 1))
    keep = np.hypot(np.maximum(np.abs(ox) - 0.5, 0), np.maximum(np.abs(oy) - 0.5, 0)) <= reach_px
    window = np.column_stack([ox[keep], oy[keep]])
    home = np.floor(start + step / 2)  # the pixel holding each segment's midpoint
    base = home + 0.5 - start  # from each segment's start to that pixel's centre
    # Offsets are integers shared by every segment, so each (segment, offset) dot product is a per-segment term
    # plus an outer product; the (S, W) arrays are updated in place, as fresh ones cost more in page faults.
    along_dot = outer_dot(step, window)  # projection of each pixel centre onto its segment, times its length squared
    along_dot += np.einsum("ij,ij->i", base, step)[:, None]
    squared = outer_dot(base, window)  # becomes the squared distance from the pixel centre to the segment
    squared *= 2
    squared += np.einsum("ij,ij->i", base, base)[:, None] + np.einsum("ij,ij->i", window, window)[None]
    along = np.clip(along_dot / step_sq[:, None], 0.0, 1.0)  # closest point on the segment, 0 at its start
    along_dot *= 2
    along_dot -= along * step_sq[:, None]
    along_dot *= along
    squared -= along_dot
    cover = np.sqrt(np.maximum(squared, 0.0, out=squared), out=squared)
    np.subtract(half + 0.5, cover, out=cover)
    # Flat indices and one division: cheaper than nonzero's two index arrays.
    reaching = np.flatnonzero(cover > 0)  # (segment, offset) pairs whose pixel the stroke reaches, row-major
    rows, cols = np.divmod(reaching, len(window))
    # A margin as wide as the window keeps every offset on the padded canvas, so nothing needs a bounds check.
    pad = int(np.abs(window).max())
    side = cfg.size + 2 * pad
    home_flat = (home[:, 1].astype(np.int64) + pad) * side + home[:, 0].astype(np.int64) + pad
    window_flat = (window[:, 1] * side + window[:, 0]).astype(np.int64)
    coverage = np.zeros(side * side, dtype=np.float32)
    values = np.minimum(rows_at(cover.ravel(), reaching), 1.0).astype(np.float32)
    np.maximum.at(coverage, rows_at(home_flat, rows) + rows_at(window_flat, cols), values)
    return coverage.reshape(side, side)[pad:pad + cfg.size, pad:pad + cfg.size]


@functools.cache
def bare_canvas_tones() -> np.ndarray:
    """Tone of an uninked pixel for each 16-bit uniform draw: Gaussian noise round PAPER_TONE by inverting
    its distribution, one lookup per pixel instead of a normal draw.  (65536,) uint8"""
    noise = NormalDist(PAPER_TONE, NOISE_SIGMA_TONE)
    at_most = np.array([noise.cdf(tone + 0.5) for tone in range(256)])  # P(rounded tone <= tone)
    return np.searchsorted(at_most, (np.arange(65536) + 0.5) / 65536).astype(np.uint8)


def bare_canvas(cfg: Config, rng: np.random.Generator) -> np.ndarray:
    """Tones of the noisy canvas before any ink, row by row.  (size * size,) uint8"""
    return rows_at(bare_canvas_tones(), rng.integers(0, 65536, size=cfg.size * cfg.size, dtype=np.uint16))


def render_loops(loops: tuple[np.ndarray, ...], cfg: Config, rng: np.random.Generator) -> Image.Image:
    """All loops in one ink colour on a noisy off-white canvas, as a palette image."""
    coverage = stroke_coverage(loops, cfg).ravel()
    tone = bare_canvas(cfg, rng)
    # Inked pixels get the same noise, added before rounding.
    inked = np.flatnonzero(coverage > 0)  # a boolean mask is cheaper to search than float nonzeros
    noise = rng.standard_normal(len(inked), dtype=np.float32) * NOISE_SIGMA_TONE
    tone[inked] = np.clip(np.rint(PAPER_TONE + rows_at(coverage, inked) * (INK_TONE - PAPER_TONE) + noise), 0, 255)
    image = Image.fromarray(tone.reshape(cfg.size, cfg.size), mode="L")
    image.putpalette(PALETTE)
    return image


def save_png(image: Image.Image, target, tag: str | None = None) -> None:
    """PNG with Huffman-only deflate (canvas noise defeats LZ77); a tag marks an overlay or contact sheet."""
    info = PngImagePlugin.PngInfo()  # with no tag it adds nothing
    if tag is not None:
        info.add_text(PNG_TAG, tag)
    image.save(target, format="PNG", compress_type=zlib.Z_HUFFMAN_ONLY, pnginfo=info)


def pixel_sha256(image: Image.Image) -> str:
    """Hash of the decoded RGB pixels: independent of PNG encoder and storage mode."""
    return hashlib.sha256(image.convert("RGB").tobytes()).hexdigest()


def render_overlay(image: Image.Image, tangle: Tangle, cfg: Config) -> Image.Image:
    """The dataset image with each loop in its own colour, crossings ringed and self-crossings boxed; a pixel
    no loop or ring touches keeps its dataset value."""
    from PIL import ImageDraw  # here, not at the top: it loads ImageFont, and only --overlays draws rings
    rgb = np.asarray(image.convert("RGB")).astype(np.float32)
    for loop_id, points in enumerate(tangle.loops):
        colour = np.array(REVIEW_COLOURS[loop_id % len(REVIEW_COLOURS)], dtype=np.float32)
        coverage = stroke_coverage((points,), cfg)[..., None]
        rgb = rgb * (1 - coverage) + colour * coverage
    overlay = Image.fromarray(np.rint(rgb).astype(np.uint8), mode="RGB")
    draw = ImageDraw.Draw(overlay)
    radius = CROSSING_RING_PX
    for (x, y), is_self in zip(tangle.crossings.point, tangle.crossings.is_self):
        shape = draw.rectangle if is_self else draw.ellipse  # squares mark a loop crossing itself
        shape((x - radius, y - radius, x + radius, y + radius), outline=(0, 0, 0), width=2)
    return overlay


def render_contact_sheet(thumbnails: list[Image.Image], captions: list[str], columns: int) -> Image.Image:
    """Thumbnails in a grid, each with its caption printed under it."""
    from PIL import ImageDraw, ImageFont  # here, not at the top: only --contact-sheet prints text
    side = thumbnails[0].width
    caption_px = 28
    rows = -(-len(thumbnails) // columns)
    sheet = Image.new("RGB", (columns * side, rows * (side + caption_px)), "white")
    draw = ImageDraw.Draw(sheet)
    font = ImageFont.load_default(size=20)
    for slot, (thumb, caption) in enumerate(zip(thumbnails, captions)):
        left, top = (slot % columns) * side, (slot // columns) * (side + caption_px)
        sheet.paste(thumb.convert("RGB"), (left, top))
        draw.text((left + 6, top + side + 3), caption, fill="black", font=font)
    return sheet


# ---------------------------------------------------------------------------
# One sample: pure and deterministic


def sample_rng(cfg: Config, index: int) -> np.random.Generator:
    """Sample index's own stream: with seed + index, seed 0 index 1 would be the same image as seed 1 index 0."""
    return np.random.default_rng(np.random.SeedSequence(cfg.seed, spawn_key=(index,)))


def image_name(index: int, n: int) -> str:
    width = max(5, len(str(n - 1)))
    return f"{IMAGES_DIR}/{TASK_NAME}_{index:0{width}d}.png"


def scene_name(index: int, n: int) -> str:
    return f"{SCENES_DIR}/{Path(image_name(index, n)).stem}.json"


def subdivide_closed(points: np.ndarray, max_step_px: float) -> np.ndarray:
    """A closed polyline (P, 2) with points added so no segment is longer than max_step_px.  (Q, 2), Q >= P"""
    step = next_points(points) - points  # (P, 2) from each point to the next, the last back to the first
    pieces = np.maximum(np.ceil(np.hypot(*step.T) / max_step_px), 1).astype(np.int64)  # (P,)
    owner = np.repeat(np.arange(len(points)), pieces)  # (Q,) the segment each output point lies on
    first = np.cumsum(pieces) - pieces  # (P,) output row of each original point
    fraction = (np.arange(len(owner)) - rows_at(first, owner)) / rows_at(pieces, owner)  # (Q,) in [0, 1)
    return rows_at(points, owner) + fraction[:, None] * rows_at(step, owner)


def scene_of(record: dict, tangle: Tangle) -> dict:
    """The geometry of one sample as its scene file holds it, in the saved image's pixel coordinates (the
    format: README.md, "Scene files"); pixel (c, r) is centred at (c + 0.5, r + 0.5), as stroke_coverage shades."""
    slack = 2 * math.sqrt(2) * 0.5 * 10 ** -SCENE_DECIMALS  # how much longer rounding can make a segment
    loops = []
    for points in tangle.loops:
        rounded = np.round(subdivide_closed(points, SCENE_MAX_ARC_PX - slack), SCENE_DECIMALS)
        low, high = rounded.min(axis=0), rounded.max(axis=0)
        loops.append({"points": rounded.tolist(), "bbox": [*low.tolist(), *high.tolist()]})
    crossings = tangle.crossings
    pairs = np.sort(np.column_stack([crossings.loop_a, crossings.loop_b]).astype(np.int64), axis=1).tolist()
    xys, angles = np.round(crossings.point, SCENE_DECIMALS).tolist(), np.round(crossings.angle_deg, 2).tolist()
    return {**{key: record[key] for key in ("image", "index", "pixel_sha256")}, "loops": loops,
            "crossings": [{"xy": xy, "loops": pair, "angle_deg": a} for xy, pair, a in zip(xys, pairs, angles)]}


def fixed_fields(cfg: Config, index: int, num_loops: int) -> dict:
    """The fields of a sample's record that follow from the config and the index alone, in record order."""
    return {"image": image_name(index, cfg.n), "width": cfg.size, "height": cfg.size, "num_loops": num_loops,
            "question": QUESTION, "answer": num_loops, "index": index, "seed": cfg.seed}


def make_sample(cfg: Config, index: int) -> tuple[Image.Image, dict, Tangle]:
    """The image, its annotation record and its geometry for sample `index`."""
    rng = sample_rng(cfg, index)
    tangle, redraws = sample_tangle(cfg, rng, loop_count(cfg, index, rng), index)
    image = render_loops(tangle.loops, cfg, rng)
    crossings = tangle.crossings
    record = {
        **fixed_fields(cfg, index, len(tangle.loops)),
        "num_crossings": int(np.sum(~crossings.is_self)),
        "num_self_crossings": int(np.sum(crossings.is_self)),
        "min_crossing_angle_deg": round(float(crossings.angle_deg.min()), 2) if len(crossings) else None,
        "loop_redraws": int(sum(v for k, v in redraws.items() if k != "restart")),
        "pixel_sha256": pixel_sha256(image),
    }
    return image, record, tangle


# ---------------------------------------------------------------------------
# Runs: finished samples on disk, then one collect step. OUT/.tangled_loops/ holds run.json (the identity),
# records/<stem>.json (one a finished sample, written after its image), a lock and tmp/<pid>/ (creation.md, "Runs").

STATE_DIR = ".tangled_loops"
RUN_FILE = "run.json"
LOCK_WAIT_S = 2.0  # how long a shard run waits for the folder lock before it says another run holds it
EXPORT_MARKER_FILE = "tangled_loops_export.json"  # export.py's MARKER_FILE: an export folder holds it
SHOWN_MISSING = 5  # a refusal names the first few missing samples and counts the rest
OPEN_SAFELY = sum(getattr(os, name, 0) for name in ("O_NOFOLLOW", "O_NONBLOCK", "O_CLOEXEC", "O_BINARY"))


class DatasetError(RuntimeError):
    """The output folder cannot take this run as it is (another dataset, a missing sample, a pipe): exit 2."""
    status = 2


class Shard(NamedTuple):
    """Shard k of m takes every m-th index from k, so each shard gets a mix of counts."""
    k: int
    m: int


WHOLE_RUN = Shard(0, 1)


def state_path(out_dir: Path, *parts: str) -> Path:
    return out_dir.joinpath(STATE_DIR, *parts)


def record_path(out_dir: Path, index: int, n: int) -> Path:
    return state_path(out_dir, "records", f"{Path(image_name(index, n)).stem}.json")


def identity(cfg: Config) -> dict:
    """What makes two runs the same dataset: same generator, same config."""
    return {"generator_version": GENERATOR_VERSION, "config": dataclasses.asdict(cfg)}


def run_digest(run: dict) -> str:
    """A short fingerprint of a run's identity: the tag of its contact sheet."""
    wanted = {key: run.get(key) for key in ("generator_version", "config")}
    return hashlib.sha256(json.dumps(wanted, sort_keys=True).encode()).hexdigest()[:16]


def json_line(value) -> str:
    return json.dumps(value, ensure_ascii=False) + "\n"


def same_value(found, expected) -> bool:
    """Equal in type as well as value: 9.0 and True are not the 9 and 1 a record holds."""
    return type(found) is type(expected) and found == expected


def open_regular(path: Path, flags: int = os.O_RDONLY, mode: str = "rb"):
    """Open path only if it is a regular file: never through a symlink, never waiting on a pipe or device."""
    fd = os.open(path, flags | OPEN_SAFELY, 0o644)
    if stat.S_ISREG(os.fstat(fd).st_mode):
        return os.fdopen(fd, mode)
    os.close(fd)
    raise OSError(errno.EINVAL, "not a regular file", str(path))


def read_json(path: Path):
    """The JSON value in a regular file; None if absent or not JSON (UnicodeDecodeError is a ValueError)."""
    try:
        with open_regular(path) as file:
            return json.loads(file.read(), parse_constant=int)  # int("NaN") raises: not JSON
    except (OSError, ValueError, RecursionError):
        return None


def image_matches(path: Path, expected, tagged: bool = False) -> bool:
    """Whether path is a regular file holding a PNG whose pixel hash, or (tagged) PNG tag, is the one expected."""
    try:
        with open_regular(path) as file, Image.open(file, formats=["PNG"]) as image:
            return expected is not None and (image.info.get(PNG_TAG) if tagged else pixel_sha256(image)) == expected
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError):
        return False


def scene_matches(path: Path, record: dict) -> bool:
    """Whether path is a scene file naming the record's image, index and pixel hash."""
    scene = read_json(path)
    return isinstance(scene, dict) and all(same_value(scene.get(key), record.get(key))
                                           for key in ("image", "index", "pixel_sha256"))


def finished_record(cfg: Config, out_dir: Path, index: int, check_image: bool = True) -> dict | None:
    """Sample index's record if it is on disk, fits this config in every field known without drawing (an edited
    or foreign record does not) and (checked) its image has the recorded pixels."""
    record = read_json(record_path(out_dir, index, cfg.n))
    fixed = fixed_fields(cfg, index, loop_count(cfg, index, sample_rng(cfg, index)))
    if isinstance(record, dict) and all(same_value(record.get(key), value) for key, value in fixed.items()) and (
            not check_image or image_matches(out_dir / record["image"], record.get("pixel_sha256"))):
        return record
    return None


def write_atomic(path: Path, content, out_dir: Path, replace: bool = True) -> None:
    """Write content (text, or a function writing the path it is given) through tmp/<pid>/, then rename it into
    place (its folder made): whole or absent. Errors name path alone. Without replace, a file there stays."""
    tmp = state_path(out_dir, "tmp", str(os.getpid()), path.name)
    try:
        for folder in (tmp.parent, path.parent):
            folder.mkdir(parents=True, exist_ok=True)
        tmp.unlink(missing_ok=True)  # a dead process's of the same pid may be a hard link to its target
        if callable(content):
            content(tmp)
        else:
            tmp.write_text(content, encoding="utf-8")
        (os.replace if replace else os.link)(tmp, path)  # a link or pipe at path is replaced, never written through
        tmp.unlink(missing_ok=True)
    except OSError as error:  # a temporary left goes with tmp/ when a run ends with the folder to itself
        raise OSError(error.errno, error.strerror, str(path)) from None


# -- The folder: its checks, whose dataset it holds, the lock
def check_output_folder(out_dir: Path) -> None:
    """Refuse an --out that is not a writable folder, is an export, or holds the wrong kind of entry where the run
    writes."""
    if os.path.lexists(out_dir) and not out_dir.is_dir():  # one under a file cannot be made, and says so
        raise DatasetError(f"--out {out_dir} is not a folder (a file, or a link to nothing)")
    if out_dir.exists() and not os.access(out_dir, os.W_OK | os.X_OK):
        raise DatasetError(f"--out {out_dir} is not writable (its permissions, or a read-only file system): "
                           "choose another folder")
    if os.path.lexists(out_dir / EXPORT_MARKER_FILE):  # its annotations describe the export's own files
        raise DatasetError(f"--out {out_dir} is an export ({EXPORT_MARKER_FILE} marks it): generate into "
                           "another folder and export from there")
    files = [ANNOTATIONS_FILE, DATA_FILE, f"{STATE_DIR}/{RUN_FILE}", f"{STATE_DIR}/lock"]
    linked = [IMAGES_DIR, SCENES_DIR, REVIEW_DIR, f"{REVIEW_DIR}/overlays"]  # a linked one is written into
    for name in files + [STATE_DIR, f"{STATE_DIR}/records", f"{STATE_DIR}/tmp"] + linked:
        path, what = out_dir / name, "file" if name in files else "folder"
        wrong = not (path.is_file() if name in files else path.is_dir()) or (path.is_symlink() and name not in linked)
        if os.path.lexists(path) and wrong:  # a pipe or device would hang a read, a link redirect a write
            raise DatasetError(f"{path} is not a plain {what}, and the run writes a {what} there: move it away")


def folder_claim(cfg: Config, out_dir: Path, shard: Shard, overwrite: bool, merge: bool
                 ) -> tuple[dict | None, bool, bool]:
    """Whose dataset out_dir holds, from its run file alone: (the run file or None; whether this run replaces what
    is there; whether it writes its run file over another). Refuses another dataset unless overwrite, any for a
    merge, and a shard of another split."""
    path = state_path(out_dir, RUN_FILE)
    found = read_json(path)
    found = found if isinstance(found, dict) and isinstance(found.get("config"), dict) else None
    declared = found and {"generator_version": found.get("generator_version"), **found["config"]}
    wanted = {"generator_version": GENERATOR_VERSION, **dataclasses.asdict(cfg)}
    difference = f"no readable {STATE_DIR}/{RUN_FILE}" if found is None else next(
        (f"{key} {json.dumps(declared.get(key))[:40]}, not {json.dumps(value)}"
         for key, value in wanted.items() if not same_value(declared.get(key), value)), None)
    held = any(os.path.lexists(out_dir / name) for name in (ANNOTATIONS_FILE, DATA_FILE)) or any(
        state_path(out_dir, "records").glob("*.json"))
    replace = difference is not None and (held or os.path.lexists(path))
    if merge and difference:  # a merge never removes: most likely a flag is mistyped
        raise DatasetError(f"{out_dir} holds no shard runs of these flags to merge ({difference}); a merge never "
                           "removes shard work")
    if replace and (held or found is None) and not overwrite:  # a run file whose run drew nothing: replaced unasked
        raise DatasetError(f"{out_dir} holds a different dataset ({difference}); choose another --out or pass "
                           "--overwrite to replace it")
    if not difference and shard != WHOLE_RUN and found.get("shards") not in (None, shard.m):
        raise DatasetError(f"{out_dir} holds shards of a {found['shards']}-way split; this run is shard "
                           f"{shard.k}/{shard.m}: give every shard the same M")
    return found, replace, replace or (not difference and shard != WHOLE_RUN and "shards" not in found)


def remove_replaced_dataset(out_dir: Path, old_run: dict | None) -> None:
    """--overwrite: delete what the old run's records name and still matches, then the records; never a file
    whose folder leads out of out_dir through a symlink."""
    base = os.path.realpath(out_dir)

    def remove(path: Path, matches: bool) -> None:
        if matches and os.path.commonpath([base, os.path.realpath(path.parent)]) == base:
            path.unlink(missing_ok=True)
    for path in state_path(out_dir, "records").glob("*.json"):
        record = read_json(path)
        image = record.get("image") if isinstance(record, dict) else None
        if isinstance(image, str) and image.startswith(IMAGES_DIR + "/") and image.count("/") == 1:
            sha, name = record.get("pixel_sha256"), Path(image)
            scene, overlay = out_dir / SCENES_DIR / f"{name.stem}.json", out_dir / REVIEW_DIR / "overlays" / name.name
            remove(scene, scene_matches(scene, record))
            remove(overlay, image_matches(overlay, sha, tagged=True))  # an untagged PNG is a user's, whatever it shows
            remove(out_dir / image, image_matches(out_dir / image, sha))
        path.unlink()
    sheet = out_dir / REVIEW_DIR / CONTACT_SHEET_FILE
    remove(sheet, old_run is not None and image_matches(sheet, run_digest(old_run), tagged=True))


def flock(file, exclusive: bool, wait_s: float = 0.0) -> bool:
    """Lock an open file, shared or alone, trying for up to wait_s; whether it was taken (a change of mode may
    drop it). Windows has no such locks: there, runs go unguarded."""
    for _ in range(round(wait_s / 0.05) + 1):
        with contextlib.suppress(BlockingIOError):
            if fcntl is not None:
                fcntl.flock(file, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
            return True
        time.sleep(0.05)
    return False


@contextlib.contextmanager
def claimed_folder(cfg: Config, out_dir: Path, shard: Shard, overwrite: bool, merge: bool) -> Iterator[dict]:
    """Hold out_dir and yield its run file: checked before anything is written, then locked (shared by shard runs
    of one dataset, alone for the rest) and claimed; whichever run ends alone removes every run's temporaries."""
    check_output_folder(out_dir)
    shared = shard != WHOLE_RUN and not overwrite  # how the run holds the lock while it draws
    alone = folder_claim(cfg, out_dir, shard, overwrite, merge)[2] or not shared  # a run file is rewritten alone
    try:
        state_path(out_dir).mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise DatasetError(f"cannot make the --out folder {out_dir}: {error.strerror or error}") from None
    run = json_line({**identity(cfg), **({} if shard == WHOLE_RUN else {"shards": shard.m})})
    live = DatasetError(f"another run is writing into {out_dir} right now; let it finish or stop it, then run again")
    live.status = 1  # the same command later will do
    with open_regular(state_path(out_dir, "lock"), os.O_WRONLY | os.O_CREAT, "wb") as lock:
        try:
            if not flock(lock, alone, 0.0 if alone else LOCK_WAIT_S):  # a shard run waits out one clearing tmp/
                raise live
            for _ in range(2):  # read again under the lock, and after writing: another run may claim it meanwhile
                found, replace, rewrite = folder_claim(cfg, out_dir, shard, overwrite, merge)
                if found is not None and not rewrite:
                    break
                if rewrite and not alone:
                    raise live
                if replace:
                    remove_replaced_dataset(out_dir, found)
                with contextlib.suppress(FileExistsError):  # of shard runs started together, the first names it
                    write_atomic(state_path(out_dir, RUN_FILE), run, out_dir, alone)
            if not flock(lock, exclusive=not shared):  # back to shared, for a shard run
                raise live
            yield found
        finally:
            if flock(lock, exclusive=True):  # no other run writes here now
                shutil.rmtree(state_path(out_dir, "tmp"), ignore_errors=True)


# -- Workers and the dataset files
def worker_signals(parent_pid: int) -> None:
    """Worker start-up: the parent alone handles Ctrl-C and SIGTERM sent to the whole process group (it ends the
    workers); Linux kills a worker whose parent dies unwarned (kill -9), or an idle one would wait forever."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a Python handler could miss it while the worker waits
    with contextlib.suppress(OSError):  # not Linux
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # 1 is PR_SET_PDEATHSIG, from linux/prctl.h
    if os.getppid() != parent_pid:  # it died before the request was made
        os._exit(1)


class StopRequest:
    """The stop signal a run received, kept because the KeyboardInterrupt its handler raises can be lost (one
    raised while a finalizer runs is printed and ignored): the run checks it again after each image."""
    stop: int | None = None

    def handle(self, signum, frame) -> NoReturn:
        self.stop = signum
        raise KeyboardInterrupt


STOP_REQUEST = StopRequest()


def run_jobs(function, jobs: Iterable, total: int, workers: int, quiet: bool, label: str):
    """function(job) for each job, in job order, on up to `workers` forked processes (with one, in this process);
    jobs is read as results come back. Not multiprocessing.Pool: it waits forever on a lock a killed worker held."""
    workers = min(workers, total)  # a pool forks all its workers up front, busy or not
    methods = multiprocessing.get_all_start_methods()  # fork where there is one, as worker_signals expects
    context = multiprocessing.get_context("fork" if "fork" in methods else methods[0])
    others, in_flight, most = set(multiprocessing.active_children()), deque(), JOBS_IN_FLIGHT_PER_WORKER * workers
    pool = workers > 1 and ProcessPoolExecutor(workers, mp_context=context, initializer=worker_signals,
                                               initargs=(os.getpid(),))
    try:
        with tqdm(total=total, desc=label, unit="img", disable=quiet, file=sys.stderr) as progress:
            for job in itertools.chain(jobs, [None] * most):  # a few jobs in flight per worker; the Nones drain them
                if job is not None:
                    in_flight.append(pool.submit(function, job) if pool else functools.partial(function, job))
                if len(in_flight) == most or (job is None and in_flight):
                    yield in_flight.popleft().result() if pool else in_flight.popleft()()
                    progress.update()
                    if STOP_REQUEST.stop is not None:
                        raise KeyboardInterrupt
    except BaseException:  # stopped early (Ctrl-C, SIGTERM, an error): end the workers now, mid-image
        for process in set(multiprocessing.active_children()) - others:  # the pool names them only privately
            process.terminate()
        raise
    finally:
        if pool:
            pool.shutdown(wait=True, cancel_futures=True)


def canonical_command(cfg: Config) -> str:
    """The command that regenerates this dataset (any output folder, any worker count)."""
    parts = ["python creation.py"]
    for field in dataclasses.fields(Config):
        value = getattr(cfg, field.name)
        if isinstance(value, bool):  # a switch: named when on, absent when off
            parts += [flag(field.name)] * value
        elif field.name not in ORIGINAL_SHAPE_FIELDS or cfg.original_shapes:  # the budgeted mode refuses them
            parts.append(f"{flag(field.name)} {command_number(value) if isinstance(value, float) else value}")
    return " ".join(parts)


def command_number(value: float) -> str:
    """A value as short as it reads back exactly: 55 rather than 55.0, but every digit of 0.4234567."""
    short = f"{value:g}"
    return short if float(short) == value else repr(value)


# -- Drawing and collecting
def produce_sample(job: tuple[Config, int, Path, bool, bool, bool]) -> str:
    """Worker: keep a finished sample (drawing again a missing overlay or scene), else draw it and write its image,
    overlay and scene, then its record: "kept" or "drawn". A merge only checks: "kept", "missing" or "scene"."""
    cfg, index, out_dir, overlays, scenes, merge = job
    record = finished_record(cfg, out_dir, index)
    overlay_path = out_dir / REVIEW_DIR / "overlays" / Path(image_name(index, cfg.n)).name
    scene_path = out_dir / scene_name(index, cfg.n)
    keep = record is not None
    need_overlay = overlays and not (keep and image_matches(overlay_path, record["pixel_sha256"], tagged=True))
    need_scene = scenes and not (keep and scene_matches(scene_path, record))
    if merge or (keep and not (need_overlay or need_scene)):
        return "missing" if not keep else "scene" if need_scene else "kept"
    image, record, tangle = make_sample(cfg, index)
    if not keep:
        write_atomic(out_dir / record["image"], lambda tmp: save_png(image, tmp), out_dir)
    if need_overlay:
        overlay = render_overlay(image, tangle, cfg)
        write_atomic(overlay_path, lambda tmp: save_png(overlay, tmp, record["pixel_sha256"]), out_dir)
    if need_scene:
        write_atomic(scene_path, json_line(scene_of(record, tangle)), out_dir)
    if not keep:
        write_atomic(record_path(out_dir, index, cfg.n), json_line(record), out_dir)
    return "kept" if keep else "drawn"


def missing_samples(cfg: Config, missing: list[int], shards=None) -> DatasetError:
    """The refusal of a collect with samples missing: the first few, and which shards they belong to."""
    shown = ", ".join(image_name(index, cfg.n) for index in missing[:SHOWN_MISSING])
    more = f" and {len(missing) - SHOWN_MISSING:,} more" if len(missing) > SHOWN_MISSING else ""
    ks = sorted({index % shards for index in missing}) if type(shards) is int and shards > 0 else []
    named = f" of shard {', '.join(f'{k}/{shards}' for k in ks[:SHOWN_MISSING])}" if ks else ""
    more_shards = f" and {len(ks) - SHOWN_MISSING} more shards" if len(ks) > SHOWN_MISSING else ""
    return DatasetError(f"missing {len(missing):,} of {cfg.n:,} samples{named}{more_shards}: {shown}{more}")


def collect(cfg: Config, out_dir: Path, contact_sheet: int = 0) -> None:
    """Write annotations.jsonl and data.json from the record files, in index order, and the contact sheet."""
    records = [finished_record(cfg, out_dir, index, check_image=False) for index in range(cfg.n)]
    if None in records:  # removed or edited since it was checked
        raise missing_samples(cfg, [records.index(None)])
    histogram = Counter(record["answer"] for record in records)
    header = {"task": TASK_NAME, "generator_version": GENERATOR_VERSION, "schema_version": SCHEMA_VERSION,
              "command": canonical_command(cfg), "config": dataclasses.asdict(cfg), "question": QUESTION,
              "num_samples": len(records), "answer_histogram": {str(k): histogram[k] for k in sorted(histogram)}}
    write_atomic(out_dir / ANNOTATIONS_FILE, "".join(map(json_line, records)), out_dir)
    write_atomic(out_dir / DATA_FILE, json.dumps({**header, "samples": records}, ensure_ascii=False, indent=1) + "\n",
                 out_dir)
    if contact_sheet:
        shown, thumbnails = records[:contact_sheet], []
        for record in shown:
            with Image.open(out_dir / record["image"]) as image:
                thumbnails.append(image.convert("RGB").resize((THUMBNAIL_PX, THUMBNAIL_PX), Image.LANCZOS))
        captions = [f"#{r['index']}  answer {r['answer']}" for r in shown]
        sheet = render_contact_sheet(thumbnails, captions, columns=math.ceil(math.sqrt(len(shown))))
        write_atomic(out_dir / REVIEW_DIR / CONTACT_SHEET_FILE,
                     lambda tmp: save_png(sheet, tmp, run_digest(identity(cfg))), out_dir)


def generate_dataset(cfg: Config, out_dir: Path, workers: int, quiet: bool = False, shard: Shard = WHOLE_RUN,
                     overwrite: bool = False, overlays: bool = False, scenes: bool = False, contact_sheet: int = 0,
                     merge: bool = False) -> int:
    """Keep every finished sample of the shard and draw the rest, or (merge) check that the shard runs finished
    every one (and its scene, asked for); a whole run and a merge then collect. Returns how many were drawn."""
    with claimed_folder(cfg, out_dir, shard, overwrite and not merge, merge) as found:
        indices, outcomes = range(shard.k, cfg.n, shard.m), {"kept": [], "drawn": [], "missing": [], "scene": []}
        jobs = ((cfg, index, out_dir, overlays, scenes, merge) for index in indices)
        label = "checking" if merge else TASK_NAME
        with contextlib.closing(run_jobs(produce_sample, jobs, len(indices), workers, quiet, label)) as results:
            for outcome, index in zip(results, indices):  # closing stops the pool before tmp/ is cleared
                outcomes[outcome].append(index)
        if outcomes["missing"]:
            raise missing_samples(cfg, outcomes["missing"], found.get("shards"))
        if outcomes["scene"]:
            raise DatasetError(f"{len(outcomes['scene'])} scene file(s) missing or not matching their record, first "
                               f"{scene_name(outcomes['scene'][0], cfg.n)}; a generation run with --scenes writes them")
        if shard == WHOLE_RUN:
            collect(cfg, out_dir, contact_sheet)
        return len(outcomes["drawn"])


# ---------------------------------------------------------------------------
# CLI


class OneLineParser(argparse.ArgumentParser):
    """Bad input gets one line and exit status 2, without the usage block."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def parse_shard(text: str) -> Shard:
    k, slash, m = text.partition("/")
    if not (slash and k.isdigit() and m.isdigit() and int(k) < int(m)):
        raise argparse.ArgumentTypeError(f"expected K/M with 0 <= K < M, got {text!r}")
    return Shard(int(k), int(m))


def folder(text: str) -> Path:
    """A path argument; an empty one (an unset shell variable) would quietly mean the current folder."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty (an unset shell variable?); pass . for the current folder")
    return Path(text)


def usable_cores() -> int:
    """Cores this process may run on: fewer than the machine has under taskset or a batch scheduler."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1  # Linux has it


def build_parser() -> OneLineParser:
    """Run flags by hand; every Config field becomes the flag of the same name, with its help and default."""
    p = OneLineParser(prog="creation.py", description="Generate the tangled closed-loop counting dataset.",
                      epilog="Grade model replies: --evaluate PREDICTIONS.jsonl [--dataset DIR] [--json] "
                             "[--report-dir R] (python scoring.py --help). Publish a dataset: --export-hub OUT or "
                             "--export-vlmevalkit FILE.tsv, with --dataset DIR (python export.py --help).")
    run = p.add_argument_group("dataset")
    groups = {"dataset": run}
    run.add_argument("--out", type=folder, default=Path(__file__).resolve().parent,
                     help="output folder (default: the folder holding creation.py)")
    run.add_argument("--workers", type=int, default=usable_cores(),
                     help="worker processes; 1 runs without a pool (default: one per usable core)")
    run.add_argument("--quiet", action="store_true", help="no progress bar and no closing summary; errors still print")
    run.add_argument("--overwrite", action="store_true",
                     help="replace a different dataset in --out (only files this generator writes are removed)")
    review = p.add_argument_group("extra outputs (outside images/, never part of the dataset files)")
    review.add_argument("--overlays", action="store_true",
                        help="also write review/overlays/*.png: each loop in its own colour, crossings marked")
    review.add_argument("--contact-sheet", type=int, default=0, metavar="K",
                        help="also write review/contact_sheet.png: the first K images with answers (default 0: none)")
    review.add_argument("--scenes", action="store_true",
                        help="also write scenes/<image name>.json: loops and crossings in pixel coordinates "
                             "(with --merge: check them)")
    scale = p.add_argument_group("sharding (runs on many machines)")
    scale.add_argument("--shard", type=parse_shard, metavar="K/M",
                       help="make only shard K of M (K = 0..M-1) into --out; when every shard is there, --merge")
    scale.add_argument("--merge", action="store_true",
                       help="check every sample the shard runs left in --out and write annotations.jsonl and data.json")
    # Config flags default to None, so a flag given on the command line can be told from one left out.
    for field in dataclasses.fields(Config):
        meta = field.metadata
        group = groups.get(meta["group"]) or groups.setdefault(meta["group"], p.add_argument_group(meta["group"]))
        options = {k: v for k, v in meta.items() if k not in ("help", "group")}
        if field.type == "bool":
            group.add_argument(flag(field.name), action="store_true", default=None, help=meta["help"])
        else:
            shown = command_number(field.default) if field.type == "float" else field.default
            group.add_argument(flag(field.name), type={"int": int, "float": float, "str": str}[field.type],
                               default=None, help=f"{meta['help']} (default {shown})", **options)
        if field.name == "original_shapes":
            group.add_argument("--balanced", action="store_true",
                               help="the default mode (budgeted ink, turning and crossings); kept for old commands")
    return p


def config_from_args(args: argparse.Namespace) -> Config:
    """The Config the command line names; a ValueError naming the flag where it or a run flag is refused."""
    if args.balanced and args.original_shapes:
        raise ValueError("--balanced is the default mode; it cannot go with --original-shapes")
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(Config) if getattr(args, f.name) is not None}
    unused = [flag(name) for name in ORIGINAL_SHAPE_FIELDS if name in given]
    if unused and not args.original_shapes:  # named at its default value, which Config cannot tell
        raise unused_shape_flags(unused)
    cfg = Config(**given)
    if "parallel_gap" in given and cfg.parallel_gap_checks_nothing:  # named at its default value
        raise idle_parallel_gap(cfg)
    shard, most_workers = args.shard or WHOLE_RUN, WORKERS_PER_CORE * usable_cores()
    refusals = {  # the run flags' own rules, in the order they are checked
        f"--workers must be at least 1, got {args.workers}": args.workers < 1,
        f"--workers must be at most {most_workers} ({WORKERS_PER_CORE} per core this process may use: more only "
        f"share the cores, each holding about 150 MiB), got {args.workers}": args.workers > most_workers,
        "--merge combines finished shards; run it without --shard": args.merge and args.shard,
        f"--shard {shard.k}/{shard.m}: more shards than --n {cfg.n} images, so some would hold none; "
        f"split into at most {cfg.n}": shard.m > cfg.n,
        f"--contact-sheet must be non-negative, got {args.contact_sheet}": args.contact_sheet < 0,
        "--contact-sheet needs the whole dataset: pass it to --merge instead of --shard":
            args.contact_sheet and args.shard,
        "--overlays is made while generating: pass it with --shard": args.overlays and args.merge,
    }
    refuse_first(refusals)
    return cfg


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    names = [arg.partition("=")[0] for arg in argv]  # each flag also as the abbreviation argparse allows
    export = any(len(name) > len("--export-") and any(target.startswith(name) for target in
                                                      ("--export-hub", "--export-vlmevalkit")) for name in names)
    if export or any(name in ("--dataset", "--json", "--report-dir") or (len(name) >= 4 and
                                                                          "--evaluate".startswith(name))
                     for name in names):  # programs of their own, loaded only when asked for (scoring: no numpy)
        return importlib.import_module("export" if export else "scoring").main(argv, prog="creation.py")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        cfg = config_from_args(args)
    except ValueError as error:
        parser.error(str(error))
    shard = args.shard or WHOLE_RUN
    count = len(range(shard.k, cfg.n, shard.m))
    # SIGTERM, and Ctrl-C unless a caller ignores it, stop the run through STOP_REQUEST. Handlers can be
    # set from the main thread alone: a harness calling main() from another keeps its own.
    STOP_REQUEST.stop = None
    signals = [signal.SIGTERM] + [signal.SIGINT] * (signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    previous = {sig: signal.signal(sig, STOP_REQUEST.handle) for sig in signals
                if threading.current_thread() is threading.main_thread()}
    try:
        drawn = generate_dataset(cfg, args.out, args.workers, args.quiet, shard, args.overwrite, args.overlays,
                                 args.scenes, args.contact_sheet, args.merge)
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM
        how, status = ("terminated", 143) if STOP_REQUEST.stop == signal.SIGTERM else ("interrupted", 130)
        print(f"creation.py: {how}; run the same command again to resume", file=sys.stderr)
        return status
    except (DatasetError, PlacementError) as error:
        print(f"creation.py: error: {error}", file=sys.stderr)
        return error.status
    except BrokenProcessPool:
        print("creation.py: error: a worker process was killed (by a signal, or out of memory); "
              "run the same command again to resume", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"creation.py: error: {error.filename or args.out}: {error.strerror or error}", file=sys.stderr)
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    files = f" and wrote {ANNOTATIONS_FILE}, {DATA_FILE}" if shard == WHOLE_RUN else ""
    done = (f"merged every shard's samples into {ANNOTATIONS_FILE} and {DATA_FILE}" if args.merge
            else f"drew {count} images{files}" if drawn == count
            else f"kept {count - drawn} of {count} images, which match their records, drew {drawn}{files}")
    if not args.quiet:
        tqdm.write(f"{done} in {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    if signal.getsignal(signal.SIGINT) is leave_quietly:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:  # before main's own handling starts, or after it ends
        leave_quietly(signal.SIGINT, None)
