"""Sampler statistics for creation.md: what each rule costs, and incremental vs whole-sample rejection.

    python tests/sampler_stats.py --per-n 40            # redraws per rule for N = 5..11
    python tests/sampler_stats.py --compare 60 --max-n 6

The first table counts, per loop count N, how many loop redraws each rule
caused per accepted image. The comparison draws tangles with N fixed both
ways (loops placed one at a time with local redraws, as creation.py does, and
the seed's literal rule: draw all N loops, keep the set only if it breaks
nothing) and prints summary statistics of the accepted tangles side by side.
"""

import argparse
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import creation  # noqa: E402
from tangle_check import find_all_events, tangle_violations  # noqa: E402

RULES = [*creation.RULES, "restart"]  # every rule a redraw can be blamed on, the merges' included


def rule_costs(cfg, per_n, seed):
    print("| N | " + " | ".join(RULES) + " | all redraws |")
    print("|---|" + "---|" * (len(RULES) + 1))
    for num_loops in range(cfg.min_loops, cfg.max_loops + 1):
        ncfg = replace(cfg, seed=seed)
        total = Counter()
        for index in range(per_n):
            _, redraws = creation.sample_tangle(ncfg, creation.sample_rng(ncfg, index), num_loops, index)
            total += redraws
        cells = [f"{total[r] / per_n:.1f}" for r in RULES]
        redraw_sum = sum(total[r] for r in RULES if r != "restart") / per_n
        print(f"| {num_loops} | " + " | ".join(cells) + f" | {redraw_sum:.1f} |")


def whole_sample(cfg, rng, num_loops, budget):
    """The seed's literal procedure: redraw every loop until the whole set passes."""
    for attempt in range(1, budget + 1):
        loops = []
        while len(loops) < num_loops:
            loop, _ = creation.draw_loop(cfg, rng)
            if loop is not None:
                loops.append(loop)
        if not tangle_violations(loops, cfg):
            return loops, attempt
    return None, budget


def summarise(loops, cfg):
    _, crossings, _ = find_all_events(loops, cfg)
    centres = np.array([p.mean(axis=0) for p in loops])
    spread = np.linalg.norm(centres - centres.mean(axis=0), axis=1).mean()
    perimeter = sum(np.linalg.norm(np.roll(p, -1, axis=0) - p, axis=1).sum() for p in loops)
    return {"crossings": len(crossings), "min angle": crossings.angle_deg.min() if len(crossings) else 90.0,
            "centre spread px": spread, "ink length px": perimeter}


def compare(cfg, count, max_n, seed, budget):
    print("| N | sampler | accepted | attempts/image | crossings | min angle | centre spread px | ink length px |")
    print("|---|---|---|---|---|---|---|---|")
    for num_loops in range(cfg.min_loops, max_n + 1):
        rows = {"incremental": [], "whole-sample": []}
        attempts = {"incremental": [], "whole-sample": []}
        for index in range(count):
            rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(num_loops, index)))
            tangle, redraws = creation.sample_tangle(cfg, rng, num_loops, index)
            rows["incremental"].append(summarise(list(tangle.loops), cfg))
            attempts["incremental"].append(sum(redraws.values()) + num_loops)
            loops, tries = whole_sample(cfg, rng, num_loops, budget)
            attempts["whole-sample"].append(tries)
            if loops is not None:
                rows["whole-sample"].append(summarise(loops, cfg))
        for name, summaries in rows.items():
            if not summaries:
                print(f"| {num_loops} | {name} | 0/{count} | >{budget} | | | | |")
                continue
            stats = {k: np.array([s[k] for s in summaries]) for k in summaries[0]}
            cells = " | ".join(f"{v.mean():.1f} ± {v.std():.1f}" for v in stats.values())
            unit = "loop draws" if name == "incremental" else "whole sets"
            print(f"| {num_loops} | {name} | {len(summaries)}/{count} | "
                  f"{np.median(attempts[name]):.0f} {unit} | {cells} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-n", type=int, default=0, help="images per N for the rule-cost table")
    parser.add_argument("--compare", type=int, default=0, help="images per N for the sampler comparison")
    parser.add_argument("--max-n", type=int, default=6, help="largest N in the comparison")
    parser.add_argument("--budget", type=int, default=3000, help="whole-sample attempts before giving up")
    parser.add_argument("--seed", type=int, default=123)
    parser.add_argument("--original-shapes", action="store_true", help="the original description's loop shapes")
    args = parser.parse_args()
    cfg = creation.Config(original_shapes=args.original_shapes)
    if args.per_n:
        rule_costs(cfg, args.per_n, args.seed)
    if args.compare:
        compare(cfg, args.compare, args.max_n, args.seed, args.budget)


if __name__ == "__main__":
    main()
