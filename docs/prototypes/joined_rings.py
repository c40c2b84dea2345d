"""Prototype of the joined-rings design for issue 41 (the gist of a thumbnail): not the generator.

U rings, U drawn from RINGS whatever N, are placed as creation.py places loops, each beside a strand of the
tangle (docked_screen), so near passes (two strands of different rings 14-45 px apart, nearly parallel, clear
of crossings) are common. U - N near passes between different loops are turned into an X by cutting both
strands and reconnecting them across each other (a join: the count falls by one); (DECOYS - joins + 1) // 2
other near passes get both strands pushed into each other, a shallow overlap with two crossings (a decoy).
So rings, crossings and touches do not follow N; only which touches are X's does. Every rule is checked
again on the joined loops (validate). Measured in docs/experiments.md ("joined rings").

    python docs/prototypes/joined_rings.py N SEED OUT [WORKERS]   # images/ and annotations.jsonl in OUT
"""
from __future__ import annotations

import json
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import creation as C  # noqa: E402

RINGS = (11, 12)  # inclusive, drawn whatever N
EXTRA_CROSSINGS = -4.0  # on the ring budget, for the crossings the swaps add
JOIN_GAP = (14.0, 45.0)  # px, centre-line distance at a near pass
JOIN_ANGLE = (55.0, 80.0)  # degrees, the X a join makes
CLEAR_OF_CROSSINGS = 45.0  # px from a near pass to any crossing
SITE_SPACING = 80.0  # px between chosen near passes
JOIN_TRIES = 12  # sets of swaps tried on one ring tangle before it is redrawn
PARALLEL_COS = 0.85  # least |cos| between the two strands at a near pass
DOCK_GAP = (18.0, 38.0)  # px between a docked ring and the strand it docks beside
DECOYS = 7  # joins plus twice the decoys, whatever N: the crossings the swaps add
BUMP_HALF = (75.0, 110.0)  # px along the strand a decoy bends
LENS_DEPTH = (30.0, 60.0)  # px the two strands of a decoy overlap at the middle


def ring_shapes(cfg, rng, rings, joins):
    cfg2 = replace(cfg, min_loops=rings, max_loops=rings)
    shapes = C.balanced_shapes(cfg2, rng, rings)
    perims = np.array([s.perimeter for s in shapes])
    scale = C.budget_scale(cfg)
    rel = perims.sum() / (scale * C.BALANCED_REFERENCE_SIDE_PX)
    budget = (rng.uniform(*C.BALANCED_CROSSING_DENSITY) * rel**2
              + C.CURLS_PER_MISSING_LOOP * (rings - cfg.min_loops) + EXTRA_CROSSINGS)
    with_earlier = perims * (np.cumsum(perims) - perims)
    share = np.cumsum(with_earlier) / with_earlier.sum()
    caps = np.maximum(budget * share, 2 * np.arange(rings)) + C.CROSSING_SLACK
    return tuple(replace(s, crossing_cap=float(c)) for s, c in zip(shapes, caps))


def docked_screen(tangle, placed, cfg, rng, shape):
    """Like C.screen_placements, but each position sets the new loop beside a random strand of the tangle."""
    import itertools
    k = C.PLACEMENTS_PER_SHAPE
    rows = rng.integers(len(tangle.segs), size=k)
    p = tangle.segs.mid[rows]
    d = tangle.segs.end[rows] - tangle.segs.start[rows]
    d /= np.hypot(*d.T)[:, None]
    n = np.column_stack([-d[:, 1], d[:, 0]]) * rng.choice([-1.0, 1.0], k)[:, None]
    q = placed[np.argmax(placed @ (-n).T, axis=0)]  # (k, 2) support points facing p
    offsets = p + n * rng.uniform(*DOCK_GAP, k)[:, None] - q
    low, high = C.placement_range(placed, cfg) or ([0.0, 0.0], [0.0, 0.0])
    inside = (offsets >= low).all(axis=1) & (offsets <= high).all(axis=1)
    offsets = offsets[inside]
    if len(offsets) == 0:
        return None, None, "interior_margin"
    room = tangle.crossing_room(shape)
    new = C.loop_segments(placed, len(tangle.loops), cfg.bend_window)
    tries = placed[None] + offsets[:, None]  # the same sums as creation.py's screen
    faults, hits = C.placement_faults(tangle, tries, new, room, cfg)
    allowed = C.unbroken(faults)
    if allowed.any():
        chosen = int(np.argmax(allowed))
        return tries[chosen], hits.of(chosen), None
    return None, None, C.rule_to_blame(faults)


def place(cfg, rng, shapes):
    """creation.sample_tangle with these shapes and the docked screen; None if it gives up."""
    originals = C.balanced_shapes, C.screen_placements
    C.balanced_shapes, C.screen_placements = (lambda *_: shapes), docked_screen
    try:
        return C.sample_tangle(cfg, rng, len(shapes), -1)
    except C.PlacementError:
        return None, Counter({"place_fail": 1})
    finally:
        C.balanced_shapes, C.screen_placements = originals


def tangents(points):
    t = np.roll(points, -1, axis=0) - np.roll(points, 1, axis=0)
    return t / np.hypot(*t.T)[:, None]


def near_passes(loops, crossing_points):
    """(ring i, index a, ring j, index b, gap) of local closest approaches between different rings."""
    from scipy.spatial import cKDTree
    trees = [cKDTree(p) for p in loops]
    sites = []
    for i, p in enumerate(loops):
        for j in range(i + 1, len(loops)):
            dist, idx = trees[j].query(p, distance_upper_bound=JOIN_GAP[1] + 5)
            ok = np.isfinite(dist)
            if not ok.any():
                continue
            d = np.where(ok, dist, np.inf)
            local = (d <= np.roll(d, 1)) & (d < np.roll(d, -1)) & (d >= JOIN_GAP[0]) & (d <= JOIN_GAP[1])
            for a in np.flatnonzero(local):
                b = int(idx[a])
                mid = 0.5 * (p[a] + loops[j][b])
                if len(crossing_points) and np.hypot(*(crossing_points - mid).T).min() < CLEAR_OF_CROSSINGS:
                    continue
                ta, tb = tangents(p)[a], tangents(loops[j])[b]
                if abs(ta @ tb) < PARALLEL_COS:
                    continue
                sites.append((i, int(a), j, b, float(d[a])))
    return sites


def hermite(p0, v0, p1, v1, spacing):
    chord = np.hypot(*(p1 - p0))
    n = max(4, int(np.ceil(chord * 1.2 / spacing)))
    t = np.linspace(0, 1, n + 1)[1:-1, None]
    h00, h10, h01, h11 = 2 * t**3 - 3 * t**2 + 1, t**3 - 2 * t**2 + t, -2 * t**3 + 3 * t**2, t**3 - t**2
    return h00 * p0 + h10 * v0 + h01 * p1 + h11 * v1


def apply_joins(loops, chosen, rng):
    """Final loops after the swaps: walk arcs and connectors."""
    spacing = np.median(np.hypot(*(np.roll(loops[0], -1, axis=0) - loops[0]).T))
    cuts = {i: [] for i in range(len(loops))}  # ring -> list of (lo, hi) cut index windows (cyclic)
    ends = {}  # endpoint key -> (point, away direction)
    connectors = []
    for (i, a, j, b, gap, w) in chosen:
        keys = []
        for r, x in ((i, a), (j, b)):
            p = loops[r]
            k = max(2, int(round(w / spacing)))
            lo, hi = (x - k) % len(p), (x + k) % len(p)
            cuts[r].append((lo, hi))
            t = tangents(p)
            ends[(r, lo, "in")] = (p[lo], t[lo])  # arc arrives here going forward; away = forward
            ends[(r, hi, "out")] = (p[hi], -t[hi])
            keys.append(((r, lo, "in"), (r, hi, "out")))
        (a_in, a_out), (b_in, b_out) = keys
        ta = ends[a_in][1]
        # A_in pairs with the end of B whose away direction runs against ta.
        first = b_out if ends[b_out][1] @ ta < 0 else b_in
        second = b_in if first == b_out else b_out
        connectors += [(a_in, first), (second, a_out)]
    return walk(loops, cuts, ends, connectors, spacing)


def walk(loops, cuts, ends, connectors, spacing):
    for r, windows in cuts.items():
        n = len(loops[r])
        covered = np.zeros(n, dtype=int)
        for lo, hi in windows:
            covered[np.arange(lo - 3, hi + (n if hi < lo else 0) + 4) % n] += 1
        if covered.max() > 1:
            return None
    # Arcs: for each ring, between consecutive cuts, from an "out" end to the next "in" end.
    arcs = []  # (end key 1, end key 2, points)
    for r, windows in cuts.items():
        p = loops[r]
        if not windows:
            arcs.append((None, None, p))
            continue
        windows = sorted(windows)
        for k, (lo, hi) in enumerate(windows):
            nlo, _ = windows[(k + 1) % len(windows)]
            idx = np.arange(hi, nlo + (len(p) if nlo <= hi else 0) + 1) % len(p)
            arcs.append(((r, hi, "out"), (r, nlo, "in"), p[idx]))
    partner = {}
    for e1, e2 in connectors:
        partner[e1], partner[e2] = e2, e1
    arc_at = {}
    for n, (e1, e2, _) in enumerate(arcs):
        if e1 is not None:
            arc_at[e1], arc_at[e2] = (n, 0), (n, 1)
    out, used = [], set()
    for n, (e1, e2, pts) in enumerate(arcs):
        if n in used:
            continue
        if e1 is None:
            out.append(pts)
            used.add(n)
            continue
        pieces, m, entered_at = [], n, 0
        while m not in used:
            used.add(m)
            f1, f2, q = arcs[m]
            if entered_at == 0:
                pieces.append(q)
                leave = f2
            else:
                pieces.append(q[::-1])
                leave = f1
            nxt = partner[leave]
            p0, away0 = ends[leave]
            p1, away1 = ends[nxt]
            chord = np.hypot(*(p1 - p0))
            pieces.append(hermite(p0, away0 * chord, p1, -away1 * chord, spacing))
            m, entered_at = arc_at[nxt]
        out.append(np.concatenate(pieces)[:-0 or None])
    # Drop a repeated closing point if any.
    return [q[:-1] if np.allclose(q[0], q[-1]) else q for q in out]


def min_radius(points):
    a, b, c = np.roll(points, 1, axis=0), points, np.roll(points, -1, axis=0)
    ab, bc, ca = np.hypot(*(b - a).T), np.hypot(*(c - b).T), np.hypot(*(a - c).T)
    area2 = np.abs(C.cross2(b - a, c - a))
    with np.errstate(divide="ignore", invalid="ignore"):
        r = ab * bc * ca / (2 * area2)
    return np.nanmin(r)


def validate(loops, cfg):
    tangle = C.Tangle.empty(cfg)
    for q in loops:
        if min_radius(q) < cfg.min_curvature_radius:
            return None, "curvature"
        tangle, reason = C.try_add_loop(tangle, q, cfg)
        if reason is not None:
            return None, reason
    return tangle, None


def site_mid(loops, site):
    i, a, j, b, _ = site
    return 0.5 * (loops[i][a] + loops[j][b])


def bump(loops, site, rng, spacing):
    """Both strands of a near pass pushed into each other: a shallow overlap, two crossings, no count change."""
    i, a, j, b, gap = site
    half = rng.uniform(*BUMP_HALF)
    total = gap + rng.uniform(*LENS_DEPTH)
    share = rng.uniform(0.35, 0.65)
    u = loops[j][b] - loops[i][a]
    u /= np.hypot(*u)
    out = {}
    k = int(np.ceil(half / spacing))
    for r, x, h, sign in ((i, a, share * total, 1.0), (j, b, (1 - share) * total, -1.0)):
        p = loops[r].copy()
        idx = np.arange(x - k, x + k + 1) % len(p)
        s_px = np.arange(-k, k + 1) * spacing
        p[idx] += sign * u * (h * np.cos(np.pi * s_px / (2 * half)) ** 2)[:, None]
        out[r] = (p, idx, k)
    return out


def conflict_pairs(crossings, cfg):
    """Pairs of crossings (ring ids a, b, a', b', and whether the eye limit applies) that break the same-pair
    rule if joins give them the same pair of loops: the eye limit between two loops, the plain one within one."""
    if len(crossings) < 2:
        return np.zeros((0, 4), dtype=int), np.zeros(0, dtype=bool)
    pts = crossings.point
    dist = np.hypot(*(pts[:, None] - pts[None]).transpose(2, 0, 1))
    ang = np.minimum(crossings.angle_deg[:, None], crossings.angle_deg[None])
    eye_limit = C.same_pair_separation_px(ang, cfg, True)
    plain_limit = C.same_pair_separation_px(ang, cfg, False)
    a, b = crossings.loop_a.astype(int), crossings.loop_b.astype(int)
    same = (a[:, None] == a[None]) & (b[:, None] == b[None])
    c, d = np.nonzero(np.triu(dist < np.maximum(eye_limit, plain_limit), 1) & ~same)
    rows = np.column_stack([a[c], b[c], a[d], b[d]])
    return rows, dist[c, d] < eye_limit[c, d], dist[c, d] < plain_limit[c, d]


def conflicts(pairs, comp):
    rows, under_eye, under_plain = pairs
    if len(rows) == 0:
        return False
    l = comp[rows]  # (K, 4)
    p1 = np.sort(l[:, :2], axis=1)
    p2 = np.sort(l[:, 2:], axis=1)
    same = (p1 == p2).all(axis=1)
    own = p1[:, 0] == p1[:, 1]
    return bool(np.any(same & np.where(own, under_plain, under_eye)))


def choose_swaps(loops, sites, rings, joins, decoys, rng, cpairs=None):
    """Joins (X swaps between different components) then decoys (bumps); returns (swaps, bumped loops)."""
    spacing = np.median(np.hypot(*(np.roll(loops[0], -1, axis=0) - loops[0]).T))
    occupied = [np.zeros(len(p), dtype=bool) for p in loops]
    parent = list(range(rings))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def span(r, x, w):
        k = max(2, int(round(w / spacing))) + 4
        return np.arange(x - k, x + k + 1) % len(loops[r])

    chosen, mids = [], []
    order = rng.permutation(len(sites))
    for s in order:
        if len(chosen) == joins:
            break
        i, a, j, b, gap = sites[s]
        if find(i) == find(j):
            continue
        mid = site_mid(loops, sites[s])
        if mids and np.hypot(*(np.array(mids) - mid).T).min() < SITE_SPACING:
            continue
        if cpairs is not None:
            comp = np.array([find(x) for x in range(rings)])
            comp[comp == find(i)] = find(j)
            if conflicts(cpairs, comp):
                continue
        w = 0.75 * gap / np.tan(np.radians(rng.uniform(*JOIN_ANGLE)) / 2)
        spans = [(i, span(i, a, w)), (j, span(j, b, w))]
        if any(occupied[r][sp].any() for r, sp in spans):
            continue
        for r, sp in spans:
            occupied[r][sp] = True
        chosen.append((i, a, j, b, gap, w))
        mids.append(mid)
        parent[find(i)] = find(j)
    if len(chosen) < joins:
        return None
    loops = list(loops)
    made = 0
    for s in order:
        if made == decoys:
            break
        i, a, j, b, gap = sites[s]
        mid = site_mid(loops, sites[s])
        if mids and np.hypot(*(np.array(mids) - mid).T).min() < SITE_SPACING:
            continue
        bumped = bump(loops, sites[s], rng, spacing)
        spans = [(r, np.arange(x - k - 4, x + k + 5) % len(loops[r])) for r, (_, idx, k), x in
                 ((i, bumped[i], a), (j, bumped[j], b))]
        if any(occupied[r][sp].any() for r, sp in spans):
            continue
        for r, sp in spans:
            occupied[r][sp] = True
        for r, (p, _, _) in bumped.items():
            loops[r] = p
        mids.append(mid)
        made += 1
    return (chosen, loops) if made == decoys else None


def make_sample(cfg, index):
    rng = C.sample_rng(cfg, index)
    n = C.loop_count(cfg, index, rng)
    stats = Counter()
    for attempt in range(300):
        rings = int(rng.integers(max(RINGS[0], n), RINGS[1] + 1))
        joins = rings - n
        shapes = ring_shapes(cfg, rng, rings, joins)
        tangle, redraws = place(cfg, rng, shapes)
        stats.update(redraws)
        if tangle is None:
            stats["place_fail"] += 1
            continue
        loops = list(tangle.loops)
        sites = near_passes(loops, tangle.crossings.point)
        final = None
        cpairs = conflict_pairs(tangle.crossings, cfg)
        # Accept a ring tangle only if it admits the most joins any N asks for, so which tangles are kept
        # does not depend on N.
        if choose_swaps(loops, sites, rings, rings - cfg.min_loops, 0, rng, cpairs) is None:
            stats["no_sites"] += 1
            continue
        for _ in range(JOIN_TRIES):
            picked = choose_swaps(loops, sites, rings, joins, (DECOYS - joins + 1) // 2, rng, cpairs)
            if picked is None:
                stats["no_sites"] += 1
                break
            chosen, bumped = picked
            joined = apply_joins(bumped, chosen, rng)
            if joined is None or len(joined) != n:
                stats["bad_count"] += 1
                continue
            final, reason = validate(joined, cfg)
            if final is not None:
                break
            stats["join_" + reason] += 1
        if final is not None:
            break
    else:
        raise RuntimeError(f"sample {index}: {stats}")
    image = C.render_loops(final.loops, cfg, rng)
    record = {**C.fixed_fields(cfg, index, len(final.loops)),
              "num_crossings": int(np.sum(~final.crossings.is_self)),
              "num_self_crossings": int(np.sum(final.crossings.is_self)),
              "rings": rings, "joins": joins, "attempts": attempt + 1,
              "redraws": int(sum(v for k, v in stats.items()))}
    return image, record, final, stats


def job(args):
    cfg, index, out = args
    t = time.process_time()
    image, record, final, stats = make_sample(cfg, index)
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
    jobs = [(cfg, k, str(out)) for k in range(n)]
    with multiprocessing.Pool(workers) as pool:
        records = list(tqdm(pool.imap(job, jobs), total=n))
    with open(out / "annotations.jsonl", "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
