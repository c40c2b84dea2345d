"""The whole-tangle check, a test-only oracle: every traceability rule a finished set of loops breaks,
found over all pairs at once rather than loop by loop as the sampler does. Each rule is the generator's
own statement of it (creation.RULES, creation.CROSSING_RULES and the rule functions beside them)."""

import numpy as np

import creation


def tangle_violations(loops: list[np.ndarray], cfg: creation.Config) -> list[str]:
    """Every rule a finished set of loops breaks, in creation.RULES order."""
    segs, crossings, near = creation.find_all_events(loops, cfg)
    faults = [rule for rule, broken in creation.CROSSING_RULES.items()
              if broken(crossings, creation.Crossings.empty(), cfg)]
    for loop_id, points in enumerate(loops):
        mine = creation.rows_where(np.arange(len(crossings)), crossings.is_self & (crossings.loop_a == loop_id))
        segments = creation.loop_segments(points, loop_id, cfg.bend_window)
        if len(mine) and creation.curl_too_small(creation.lobe_reach_px(segments, crossings.take(mine)), cfg):
            faults.append("curl_size")
            break
    if len(creation.clearance_faults(near, segs, crossings, cfg, creation.longest_segment(segs))):
        faults.append("min_gap")
    if creation.runs_too_long(np.array([creation.longest_run_in_tangle_px(segs, crossings, cfg)]), cfg):
        faults.append("parallel")
    if creation.outside_margin(np.concatenate(loops), cfg):
        faults.append("interior_margin")
    return faults
