"""Speed, size and memory of the generator against a plain baseline (not a test: run it by hand).

    python tests/bench.py            # about thirteen minutes on 2 idle cores
    python tests/bench.py --quick    # a smoke run of every row, under a minute

The baseline is tests/plain.py, a careful plain implementation of the task
description. Every comparison is measured in one run, in interleaved rounds
(each program once per round, round after round, so drift in the machine's
speed falls on all of them alike); a figure is the median over rounds and a
ratio is the ratio of those medians, with the range of the per-round ratios
beside it as a sign of the noise. Round r runs seed r, so the whole-process
rows' ranges also hold how much seeds differ. Rows:

  whole processes: images/s of `creation.py --n 70 --workers 1 --quiet` and
      `tests/plain.py --n 70`, start-up and file writes included;
  in process: seconds per image of make_sample (sampling, rendering, pixel
      hash) and of encoding its PNG, for the default mode, --original-shapes,
      the plain baseline and, for context, the old prototype tests/reference.py;
      the default mode over --original-shapes is issue 14's cost ratio (<= 1.3);
  start-up: `python -c "import creation"` and `python creation.py --help`;
  per-stage medians of the default mode (sampling, split into drawing
      candidate loops, screening their positions and validating them; rendering; encoding; hashing; writing), with
      context timed apart (the noisy canvas, the strokes, the same image saved
      with Pillow's PNG defaults and as RGB at zlib 6), the pipeline over
      the encode, and mean sampling time by loop count with the slowest sample;
  bytes per image of each program's PNGs;
  2 workers against 1 over --long-run images (whole processes);
  peak resident memory of a one-worker run at two --n values (flat in n).
"""

import argparse
import io
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
import creation  # noqa: E402
import plain  # noqa: E402
import reference  # noqa: E402

# Whole processes get more rounds than in-process rows: round r runs seed r, and the seeds differ
# by more than the machine does (a seed whose 70 images hold a few slow five-loop ones runs slower).
FULL = {"images": 40, "repeats": 3, "process_rounds": 5, "process_n": 70, "long_run": 140, "startup_runs": 7,
        "rss_n": (20, 120)}
QUICK = {"images": 3, "repeats": 2, "process_rounds": 2, "process_n": 4, "long_run": 6, "startup_runs": 3,
         "rss_n": (2, 6)}


# ---------------------------------------------------------------------------
# Measuring


def interleaved(runs: dict, repeats: int) -> dict:
    """Each named run once per round (called with the round number), round after round."""
    results = {name: [] for name in runs}
    for round_number in range(repeats):
        for name, run in runs.items():
            results[name].append(run(round_number))
    return results


def median_ratio(results: dict, top: str, bottom: str) -> str:
    """Ratio of the two medians, and the range of the ratios within each round."""
    ratio = statistics.median(results[top]) / statistics.median(results[bottom])
    per_round = [a / b for a, b in zip(results[top], results[bottom])]
    return f"{ratio:.2f}x (rounds {min(per_round):.2f}-{max(per_round):.2f})"


def wall_seconds(argv: list[str]) -> float:
    """Wall time of one whole process, start-up included, run from the repository root."""
    clock = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - clock


def process_rate(program: str, n: int, seed: int, workers: int = 1) -> float:
    """Images per second of one whole run of creation.py or tests/plain.py into a fresh folder."""
    with tempfile.TemporaryDirectory() as out:
        if program == "creation":
            argv = [sys.executable, "creation.py", "--n", str(n), "--seed", str(seed), "--out", out,
                    "--workers", str(workers), "--quiet"]
        else:
            argv = [sys.executable, "tests/plain.py", "--n", str(n), "--seed", str(seed), "--out", out, "--quiet"]
        return n / wall_seconds(argv)


def creation_image(cfg: creation.Config):
    def make(index: int):
        image, _, _ = creation.make_sample(cfg, index)
        return image, lambda target: creation.save_png(image, target)
    return make


def plain_image(seed: int):
    def make(index: int):
        image, _ = plain.make_image(seed, index)
        return image, lambda target: image.save(target, format="PNG")
    return make


def reference_image(seed: int):
    def make(index: int):  # the prototype samples, renders and saves to a file in one call: all of it counts as making
        with tempfile.TemporaryDirectory() as tmp:
            reference.make_reference_image(seed, index, Path(tmp) / "image.png")
            data = (Path(tmp) / "image.png").read_bytes()
        return None, lambda target: target.write(data)
    return make


def per_image_seconds(make, count: int) -> dict:
    """Mean seconds per image of making (sample, render, hash) and of encoding the PNG in memory, and PNG sizes."""
    made = encoded = 0.0
    sizes = []
    for index in range(count):
        clock = time.perf_counter()
        _, save = make(index)
        after_make = time.perf_counter()
        buffer = io.BytesIO()
        save(buffer)
        encoded += time.perf_counter() - after_make
        made += after_make - clock
        sizes.append(buffer.tell())
    return {"make": made / count, "encode": encoded / count, "total": (made + encoded) / count, "sizes": sizes}


class Stopwatch:
    """Wraps a function of creation.py and adds up the time spent in it."""

    def __init__(self, name):
        self.seconds, self.original = 0.0, getattr(creation, name)

    def __call__(self, *args, **kwargs):
        clock = time.perf_counter()
        try:
            return self.original(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - clock


def stage_times(cfg, indices) -> dict:
    """Per-image seconds of each stage of the default pipeline.

    Sampling draws a candidate shape, screens positions for it and validates
    the one that passes against the loops placed so far, in turn, so the
    three are told apart by timing the functions that do each (sample = draw
    + screen + validate + a little bookkeeping).
    """
    stages = {name: [] for name in ("sample", "draw", "screen", "validate", "render", "encode", "hash", "write",
                                    "total", "canvas_noise", "strokes", "png_default", "rgb_zlib6", "loops",
                                    "redraws")}
    with tempfile.TemporaryDirectory() as tmp:
        for index in indices:
            draw, screen, validate = Stopwatch("draw_loop"), Stopwatch("screen_placements"), Stopwatch("try_add_loop")
            creation.draw_loop, creation.screen_placements, creation.try_add_loop = draw, screen, validate
            clock = time.perf_counter()
            rng = creation.sample_rng(cfg, index)
            try:
                tangle, redraws = creation.sample_tangle(cfg, rng, creation.loop_count(cfg, index, rng), index)
            finally:
                creation.draw_loop, creation.screen_placements, creation.try_add_loop = (
                    draw.original, screen.original, validate.original)
            after_sample = time.perf_counter()
            image = creation.render_loops(tangle.loops, cfg, rng)
            after_render = time.perf_counter()
            buffer = io.BytesIO()
            creation.save_png(image, buffer)
            after_encode = time.perf_counter()
            creation.pixel_sha256(image)
            after_hash = time.perf_counter()
            (Path(tmp) / f"{index}.png").write_bytes(buffer.getvalue())
            done = time.perf_counter()
            for name, seconds in (("sample", after_sample - clock), ("draw", draw.seconds),
                                  ("screen", screen.seconds), ("validate", validate.seconds),
                                  ("render", after_render - after_sample),
                                  ("encode", after_encode - after_render), ("hash", after_hash - after_encode),
                                  ("write", done - after_hash), ("total", done - clock),
                                  ("loops", len(tangle.loops)), ("redraws", redraws.total() - redraws["restart"])):
                stages[name].append(seconds)
            # Context only, outside the total: two parts of rendering alone (the noisy bare
            # canvas, which any image of this task needs, and the antialiased strokes), and the
            # same final image saved by Pillow with its default PNG settings and as RGB at zlib 6.
            for name, step in (("canvas_noise", lambda: creation.bare_canvas(cfg, creation.sample_rng(cfg, index))),
                               ("strokes", lambda: creation.stroke_coverage(tangle.loops, cfg)),
                               ("png_default", lambda: image.save(io.BytesIO(), format="PNG")),
                               ("rgb_zlib6", lambda: image.convert("RGB").save(io.BytesIO(), format="PNG"))):
                clock = time.perf_counter()
                step()
                stages[name].append(time.perf_counter() - clock)
    return stages


def startup_seconds(argv: list[str], runs: int) -> float:
    return statistics.median(wall_seconds(argv) for _ in range(runs))


def worker_peak_rss_mb(n: int) -> float:
    """Peak RSS of a one-worker run (no pool: the run is the worker) in a fresh process, in MiB (Linux: KiB)."""
    with tempfile.TemporaryDirectory() as tmp:
        code = (f"import resource, sys; sys.path.insert(0, {str(ROOT)!r}); import creation; "
                f"creation.main(['--n', '{n}', '--seed', '0', '--out', {tmp!r}, '--workers', '1', '--quiet']); "
                "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return int(out.split()[-1]) / 1024


# ---------------------------------------------------------------------------
# The report


def print_whole_processes(n: int, repeats: int) -> None:
    rates = interleaved({"creation": lambda seed: process_rate("creation", n, seed),
                         "plain": lambda seed: process_rate("plain", n, seed)}, repeats)
    print(f"whole processes, --n {n} --workers 1, images/s (median of {repeats} rounds):")
    for name, label in (("creation", "creation.py (default mode)"), ("plain", "tests/plain.py")):
        print(f"  {label:<30}{statistics.median(rates[name]):7.2f}")
    print(f"  creation's lead (creation images/s / plain images/s): {median_ratio(rates, 'creation', 'plain')}")
    print("  by round (round r runs --seed r): " + ", ".join(
        f"seed {seed} {a / b:.2f}x" for seed, (a, b) in enumerate(zip(rates["creation"], rates["plain"]))))


def print_in_process(count: int, repeats: int) -> None:
    default, original = creation.Config(), creation.Config(original_shapes=True)
    programs = {
        "default": ("creation make_sample (default)", lambda seed: creation_image(dataclass_with_seed(default, seed))),
        "original": ("creation --original-shapes", lambda seed: creation_image(dataclass_with_seed(original, seed))),
        "plain": ("tests/plain.py make_image", plain_image),
        "reference": ("tests/reference.py (old prototype)", reference_image),
    }
    # The prototype is slow and only context: it makes a quarter as many images.
    counts = {name: max(2, count // 4) if name == "reference" else count for name in programs}
    results = interleaved({name: (lambda seed, make=make, name=name: per_image_seconds(make(seed), counts[name]))
                           for name, (_, make) in programs.items()}, repeats)
    print(f"in process, mean seconds per image (median of {repeats} rounds of {count} images; make = sample, "
          f"render, pixel hash):")
    print(f"  {'':<36}{'make':>8}{'encode':>8}{'total':>8}{'images/s':>10}{'KB/image':>10}")
    column = {}
    for name, (label, _) in programs.items():
        column[name] = {part: [r[part] for r in results[name]] for part in ("make", "encode", "total")}
        make, encode, total = (statistics.median(column[name][part]) for part in ("make", "encode", "total"))
        size = statistics.median(size for r in results[name] for size in r["sizes"]) / 1e3
        if name == "reference":  # encodes inside its one call
            print(f"  {label:<36}{'':>8}{'':>8}{total:8.3f}{1 / total:10.2f}{size:10.0f}  ({counts[name]} images)")
        else:
            print(f"  {label:<36}{make:8.3f}{encode:8.3f}{total:8.3f}{1 / total:10.2f}{size:10.0f}")
    for part in ("total", "make"):
        flat = {name: column[name][part] for name in programs}
        print(f"  creation's lead on {part} (plain seconds / creation seconds): default {median_ratio(flat, 'plain', 'default')}, "
              f"--original-shapes {median_ratio(flat, 'plain', 'original')}")
    flat = {name: column[name]["total"] for name in programs}
    print(f"  old prototype seconds / plain seconds, total: {median_ratio(flat, 'reference', 'plain')}")
    print(f"  issue 14, default / --original-shapes per image (must be <= 1.3): "
          f"total {median_ratio(flat, 'default', 'original')}, "
          f"make {median_ratio({n: column[n]['make'] for n in programs}, 'default', 'original')}")


def dataclass_with_seed(cfg: creation.Config, seed: int) -> creation.Config:
    return creation.Config(**{**cfg.__dict__, "seed": seed})


def print_startup(runs: int) -> None:
    print(f"start-up, wall seconds (median of {runs}):")
    for label, argv in (("python -c pass", ["-c", "pass"]), ("python -c 'import numpy'", ["-c", "import numpy"]),
                        ("python -c 'import creation'", ["-c", "import creation"]),
                        ("python creation.py --help", ["creation.py", "--help"]),
                        ("python tests/plain.py --help", ["tests/plain.py", "--help"])):
        print(f"  {label:<36}{startup_seconds([sys.executable, *argv], runs):7.3f}")


def print_stages(cfg: creation.Config, count: int) -> None:
    stages = stage_times(cfg, range(count))
    labels = {"draw": "(of sample: drawing candidate loops)",
              "screen": "(of sample: trying positions for them against the crossing rules)",
              "validate": "(of sample: validating them)",
              "write": "(writing the file, not in make_sample)",
              "canvas_noise": "(of render: the noisy bare canvas alone, timed apart, not part of total)",
              "strokes": "(of render: the antialiased strokes alone, timed apart, not part of total)",
              "png_default": "(the same image saved with Pillow's default PNG settings, not part of total)",
              "rgb_zlib6": "(the same image as RGB at zlib level 6, not part of total)"}
    loops, redraws = stages.pop("loops"), stages.pop("redraws")
    medians = {name: statistics.median(seconds) for name, seconds in stages.items()}
    print(f"per stage, default mode, median seconds per image over {count} images:")
    for name, seconds in medians.items():
        print(f"  {name:<12}{seconds:8.4f} {labels.get(name, '')}".rstrip())
    ratios = [t / e for t, e in zip(stages["total"], stages["encode"])]
    # What no pipeline emitting these files can skip, with geometry and strokes free: the
    # encode itself, the canvas noise the task asks for, and the pixel hash each record carries.
    floor = [(e + c + h) / e for e, c, h in zip(stages["encode"], stages["canvas_noise"], stages["hash"])]
    print(f"  pipeline / encode: median {statistics.median(ratios):.2f}x; with no loops at all, encode + canvas "
          f"noise + pixel hash: {statistics.median(floor):.2f}x the encode")
    # A run's time is set by its slowest samples, mostly five-loop ones: the mean by N and the worst show them.
    by_count = {n: [t for t, m in zip(stages["sample"], loops) if m == n] for n in sorted(set(loops))}
    print("  sampling by loop count, mean ms: " + ", ".join(
        f"N = {n}: {1000 * statistics.mean(times):.0f}" for n, times in by_count.items()))
    slowest = max(range(count), key=lambda i: stages["sample"][i])
    print(f"  slowest sample: index {slowest} (N = {loops[slowest]}), {stages['sample'][slowest]:.2f} s, "
          f"{redraws[slowest]} loop redraws; mean sampling {statistics.mean(stages['sample']):.4f} s per image")


def print_scaling(n: int, repeats: int) -> None:
    rates = interleaved({"one": lambda seed: process_rate("creation", n, seed, workers=1),
                         "two": lambda seed: process_rate("creation", n, seed, workers=2)}, repeats)
    print(f"creation.py --n {n}, whole processes: {statistics.median(rates['one']):.2f} images/s with 1 worker, "
          f"{statistics.median(rates['two']):.2f} with 2: {median_ratio(rates, 'two', 'one')}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny runs of every row, to check the bench works")
    parser.add_argument("--images", type=int, help=f"images per in-process measurement (default {FULL['images']})")
    parser.add_argument("--repeats", type=int, help=f"rounds of each in-process comparison (default {FULL['repeats']})")
    parser.add_argument("--process-rounds", type=int,
                        help=f"rounds of each whole-process comparison (default {FULL['process_rounds']})")
    parser.add_argument("--process-n", type=int, help=f"--n of each whole-process run (default {FULL['process_n']})")
    parser.add_argument("--long-run", type=int,
                        help=f"--n of the 1 against 2 workers runs (default {FULL['long_run']})")
    args = parser.parse_args()
    settings = {**(QUICK if args.quick else FULL),
                **{key: value for key, value in vars(args).items() if key != "quick" and value is not None}}
    load = os.getloadavg()[0]
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"load average {load:.1f} at start{' (other work running: figures are noisy)' if load > 0.5 else ''}")
    print_whole_processes(settings["process_n"], settings["process_rounds"])
    print_in_process(settings["images"], settings["repeats"])
    print_startup(settings["startup_runs"])
    print_stages(creation.Config(), settings["images"])
    print_scaling(settings["long_run"], settings["process_rounds"])
    small, large = (worker_peak_rss_mb(n) for n in settings["rss_n"])
    print(f"peak RSS of one worker: {small:.0f} MiB at --n {settings['rss_n'][0]}, "
          f"{large:.0f} MiB at --n {settings['rss_n'][1]}")
    print(f"(bench process itself: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB; "
          f"load average {os.getloadavg()[0]:.1f} at the end)")


if __name__ == "__main__":
    main()
