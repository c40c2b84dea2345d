"""The whole-tangle check, a test-only oracle: every traceability rule a finished set of loops breaks,
found over all pairs at once rather than loop by loop as the sampler does. Each rule is the generator's
own statement of it (creation.crossing_faults and the rule functions beside it)."""

import numpy as np
from scipy.spatial import cKDTree

import creation


def find_all_events(loops: list[np.ndarray], cfg: creation.Config):
    """Segments, crossings and the pairs whose midpoints are near enough to break min_gap, over all pairs at once."""
    segs = creation.concat_segments([creation.loop_segments(p, i, cfg.bend_window) for i, p in enumerate(loops)])
    tree, longest = cKDTree(segs.mid), creation.longest_segment(segs)

    def pairs_within(radius: float) -> np.ndarray:
        found = tree.query_pairs(radius, output_type="ndarray").astype(np.int64)
        return creation.separate_strand_pairs(segs, found, cfg)

    return (segs, creation.crossings_between(segs, segs, *pairs_within(longest).T),
            pairs_within(cfg.min_gap + longest))


def longest_run_in_tangle_px(segs, crossings, cfg: creation.Config) -> float:
    """The longest stretch that runs beside another strand, over segments and crossings already found."""
    longest = creation.longest_segment(segs)
    found = cKDTree(segs.mid).query_pairs(cfg.parallel_gap + longest, output_type="ndarray").astype(np.int64)
    runs = creation.parallel_runs_px(creation.separate_strand_pairs(segs, found, cfg), segs, crossings, cfg, longest)
    return float(runs.max(initial=0.0))


def longest_parallel_run_px(loops: list[np.ndarray], cfg: creation.Config) -> float:
    """The longest stretch of a finished set of loops that runs beside another strand."""
    segs, crossings, _ = find_all_events(loops, cfg)
    return longest_run_in_tangle_px(segs, crossings, cfg)


def tangle_violations(loops: list[np.ndarray], cfg: creation.Config) -> list[str]:
    """Every rule a finished set of loops breaks, in creation.RULES order."""
    segs, crossings, candidates = find_all_events(loops, cfg)
    faults = [rule for rule, broken in creation.crossing_faults(crossings, creation.Crossings.empty(), cfg).items()
              if broken.any()]
    for loop_id, points in enumerate(loops):
        mine = creation.rows_where(np.arange(len(crossings)), crossings.is_self & (crossings.loop_a == loop_id))
        segments = creation.loop_segments(points, loop_id, cfg.bend_window)
        if len(mine) and creation.curl_too_small(creation.lobe_reach_px(segments, crossings.take(mine)), cfg):
            faults.append("curl_size")
            break
    if len(creation.clearance_faults(candidates, segs, crossings, cfg, creation.longest_segment(segs))):
        faults.append("min_gap")
    if creation.runs_too_long(np.array([longest_run_in_tangle_px(segs, crossings, cfg)]), cfg):
        faults.append("parallel")
    points = np.concatenate(loops)
    if np.any(points < cfg.interior_margin) or np.any(points > cfg.size - cfg.interior_margin):
        faults.append("interior_margin")
    return faults


def separation_faults(crossings, first_new: int, cfg: creation.Config) -> tuple[bool, bool]:
    """Whether crossings from first_new on break the crossing separation and same-pair separation rules."""
    rows = np.arange(len(crossings))
    faults = creation.crossing_faults(crossings.take(rows[first_new:]), crossings.take(rows[:first_new]), cfg)
    return bool(faults["crossing_separation"].any()), bool(faults["same_pair_separation"].any())
