"""Prototype for issue 41 (the gist of a thumbnail), second design: joins made while the rings are placed.

Like joined_rings.py, 11-12 rings whatever N, each after the first docked beside a strand of the tangle. Here each
dock's role is drawn before placement: U - N joins (spliced into an X at once, and the joined loop checked by
try_add_loop against the tangle without its old part), (DECOYS - joins + 1) // 2 decoys (both strands pushed
through at once) and plain near passes. Joins and decoys dock only beside strands 60 px clear of crossings. No
ring tangle is thrown away for want of join sites, so no selection by N; a shape set that cannot be placed is
redrawn. The ring budget is EXTRA crossings above creation.py's, since docked rings cross more. Measured in
docs/experiments.md ("joins while placing").

    python docs/prototypes/placed_joins.py N SEED OUT [WORKERS]   # images/ and annotations.jsonl in OUT
"""
from __future__ import annotations

import json
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
from scipy.spatial import cKDTree

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import creation as C  # noqa: E402
import joined_rings as J  # noqa: E402

EXTRA = 12.0  # crossings added to the ring budget
ROW_CLEAR = 60.0  # px from a dock strand to any crossing, for joins and decoys


def without_loop(tangle, r, cfg):
    segs, cr = tangle.segs, tangle.crossings
    keep = segs.loop != r
    f = lambda a: a[keep]
    loop = f(segs.loop); loop = loop - (loop > r)
    s2 = C.Segments(f(segs.start), f(segs.end), loop, f(segs.index), f(segs.arc), f(segs.perimeter), f(segs.bend_deg))
    ck = (cr.loop_a != r) & (cr.loop_b != r)
    c2 = cr.take(np.flatnonzero(ck))
    c2 = replace(c2, loop_a=c2.loop_a - (c2.loop_a > r), loop_b=c2.loop_b - (c2.loop_b > r))
    longest = C.longest_segment(s2) if len(s2) else 0.0
    loops = tangle.loops[:r] + tangle.loops[r + 1:]
    return C.Tangle(loops, s2, C.tangle_grid(s2, cfg, longest), c2, longest)


def dock_screen(tangle, placed, cfg, rng, shape, need_site=True):
    """Docked positions beside strands clear of crossings; the chosen copy, its crossings, and the site."""
    k = C.PLACEMENTS_PER_SHAPE
    segs = tangle.segs
    pts0 = tangle.crossings.point
    if need_site and len(pts0):
        far = cKDTree(pts0).query(segs.mid, distance_upper_bound=ROW_CLEAR)[0] > ROW_CLEAR
        pool = np.flatnonzero(far)
        if len(pool) == 0:
            return None, None, None, "crossing_separation"
        rows = pool[rng.integers(len(pool), size=k)]
    else:
        rows = rng.integers(len(segs), size=k)
    p = segs.mid[rows]
    d = segs.end[rows] - segs.start[rows]
    d /= np.hypot(*d.T)[:, None]
    n = np.column_stack([-d[:, 1], d[:, 0]]) * rng.choice([-1.0, 1.0], k)[:, None]
    support = np.argmax(placed @ (-n).T, axis=0)
    gaps = rng.uniform(*J.DOCK_GAP, k)
    offsets = p + n * gaps[:, None] - placed[support]
    low, high = C.placement_range(placed, cfg) or ([0.0, 0.0], [0.0, 0.0])
    inside = (offsets >= low).all(axis=1) & (offsets <= high).all(axis=1)
    if not inside.any():
        return None, None, None, "interior_margin"
    rows, p, n, support, gaps, offsets = rows[inside], p[inside], n[inside], support[inside], gaps[inside], offsets[inside]
    room = tangle.crossing_room(shape)
    bend_deg = C.loop_segments(placed, 0, cfg.bend_window).bend_deg
    tries = placed[None] + offsets[:, None]
    faults, hits = C.placement_faults(tangle, tries, bend_deg, room, cfg)
    allowed = faults.allowed(room)
    if not allowed.any():
        return None, None, None, faults.reason(room)
    mids = p + n * (0.5 * gaps)[:, None]
    for c in np.flatnonzero(allowed):
        own = hits.point[hits.copy == c]
        if not need_site:
            return tries[c], hits.of(c), None, None
        if len(pts0) and np.hypot(*(pts0 - mids[c]).T).min() < J.CLEAR_OF_CROSSINGS:
            continue
        if len(own) and np.hypot(*(own - mids[c]).T).min() < J.CLEAR_OF_CROSSINGS:
            continue
        site = (int(segs.loop[rows[c]]), int(segs.index[rows[c]]), -1, int(support[c]), float(gaps[c]))
        return tries[c], hits.of(c), site, None
    return None, None, None, "site"


def join_at(tangle, ring, site, shape, cfg, rng):
    l, a, _, b, gap = site
    w = 0.75 * gap / np.tan(np.radians(rng.uniform(*J.JOIN_ANGLE)) / 2)
    merged = J.apply_joins([tangle.loops[l], ring], [(0, a, 1, b, gap, w)], rng)
    if merged is None or len(merged) != 1:
        return None, "bad_join"
    q = merged[0]
    if J.min_radius(q) < cfg.min_curvature_radius:
        return None, "join_curvature"
    t2 = without_loop(tangle, l, cfg)
    out, reason = C.try_add_loop(t2, q, cfg, shape)
    return out, (None if out is not None else "join_" + reason)


def decoy_at(tangle, ring, site, shape, cfg, rng):
    l, a, _, b, gap = site
    loops = [tangle.loops[l], ring]
    spacing = np.median(np.hypot(*(np.roll(ring, -1, axis=0) - ring).T))
    bumped = J.bump(loops, (0, a, 1, b, gap), rng, spacing)
    old, new = bumped[0][0], bumped[1][0]
    if min(J.min_radius(old), J.min_radius(new)) < cfg.min_curvature_radius:
        return None, "decoy_curvature"
    t2 = without_loop(tangle, l, cfg)
    t2, reason = C.try_add_loop(t2, old, cfg)
    if t2 is None:
        return None, "decoy_" + reason
    out, reason = C.try_add_loop(t2, new, cfg, shape)
    return out, (None if out is not None else "decoy_" + reason)


def sample(cfg, rng, n, rings, shapes):
    joins = rings - n
    decoys = (J.DECOYS - joins + 1) // 2
    roles = np.array(["join"] * joins + ["decoy"] * decoys + ["plain"] * (rings - 1 - joins - decoys))
    roles = np.concatenate([["first"], rng.permutation(roles)])
    redraws = Counter()
    for _ in range(cfg.sample_restarts):
        tangle = C.Tangle.empty(cfg)
        bonus = 0.0
        for k in range(rings):
            shape = shapes[k]
            eff = replace(shape, crossing_cap=shape.crossing_cap + bonus)
            for _ in range(cfg.loop_attempts):
                cand, reason = C.draw_loop(cfg, rng, shape)
                if cand is not None and k > 0:
                    cand, screened, site, reason = dock_screen(tangle, cand, cfg, rng, eff, roles[k] != 'plain')
                if cand is not None:
                    if k == 0 or roles[k] == "plain":
                        added, reason = C.try_add_loop(tangle, cand, cfg, eff, None if k == 0 else screened)
                    elif roles[k] == "join":
                        added, reason = join_at(tangle, cand, site, eff, cfg, rng)
                    else:
                        added, reason = decoy_at(tangle, cand, site, replace(eff, crossing_cap=eff.crossing_cap + 2), cfg, rng)
                if reason is None:
                    if k and roles[k] == "join":
                        bonus -= np.count_nonzero(~tangle.crossings.is_self) - np.count_nonzero(~added.crossings.is_self) + len(screened.point)
                    elif k and roles[k] == "decoy":
                        bonus += 2
                    tangle = added
                    break
                redraws[reason] += 1
            else:
                redraws["restart"] += 1
                break
        else:
            return tangle, redraws
    raise C.PlacementError(f"{redraws}")


def make_sample(cfg, index):
    rng = C.sample_rng(cfg, index)
    n = C.loop_count(cfg, index, rng)
    rings = int(rng.integers(max(J.RINGS[0], n), J.RINGS[1] + 1))
    J.EXTRA_CROSSINGS = EXTRA
    for _ in range(20):
        shapes = J.ring_shapes(cfg, rng, rings, 0)
        try:
            tangle, redraws = sample(cfg, rng, n, rings, shapes)
            break
        except C.PlacementError:
            continue
    else:
        raise C.PlacementError(f"sample {index}: no shape set placed")
    assert len(tangle.loops) == n, (len(tangle.loops), n)
    image = C.render_loops(tangle.loops, cfg, rng)
    record = {**C.fixed_fields(cfg, index, n),
              "num_crossings": int(np.sum(~tangle.crossings.is_self)),
              "num_self_crossings": int(np.sum(tangle.crossings.is_self)),
              "rings": rings, "joins": rings - n, "restarts": redraws["restart"]}
    return image, record, tangle, redraws


def job(args):
    cfg, index, out = args
    t = time.process_time()
    image, record, _, _ = make_sample(cfg, index)
    record["seconds"] = round(time.process_time() - t, 3)
    C.save_png(image, Path(out) / record["image"])
    return record


def main():
    import multiprocessing
    from tqdm import tqdm
    n, seed, out = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    workers = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    (out / "images").mkdir(parents=True, exist_ok=True)
    cfg = C.Config(n=n, seed=seed)
    with multiprocessing.Pool(workers) as pool:
        records = list(tqdm(pool.imap(job, [(cfg, k, str(out)) for k in range(n)], chunksize=4), total=n))
    with open(out / "annotations.jsonl", "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
