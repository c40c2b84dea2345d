"""Speed, size and memory of the generator at default settings (not a test: run it by hand).

    python tests/bench.py                  # about four minutes on 2 cores
    python tests/bench.py --images 40 --repeats 3

Prints medians: seconds per image for each stage (sampling the loops, split
into drawing candidate loops and validating them against the placed ones;
rendering, PNG encoding, hashing the pixels, writing the file), the encode
floor (encoding the final image, nothing else) and the whole pipeline's
ratio to it (and, for context, to saving the same image with Pillow's
default PNG settings), the ratio a pipeline would reach if drawing the
loops cost nothing (encode + canvas noise + pixel hash, over the encode), bytes per image, end-to-end images/s with 1 and 2 workers for
the generator and for the plain prototype in tests/reference.py (and for
the generator alone once more over a longer run, for scaling), all
measured in the same run, in interleaved rounds, with every ratio the
median of the ratios within a round, and the peak resident memory of one worker
process for two dataset sizes (it should not grow with --n).
"""

import argparse
import io
import multiprocessing
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
import creation  # noqa: E402
import reference  # noqa: E402


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


def stage_times(cfg, indices):
    """Per-image seconds of each stage, and the encoded sizes.

    Sampling draws a candidate loop and validation checks it against the
    loops placed so far, alternately, so the two are told apart by timing the
    functions that do each (sample = draw + validate + a little bookkeeping).
    """
    stages = {name: [] for name in ("sample", "draw", "validate", "render", "encode", "hash", "write", "total",
                                    "canvas_noise", "strokes", "png_default", "rgb_zlib6")}
    sizes = []
    with tempfile.TemporaryDirectory() as tmp:
        for index in indices:
            draw, validate = Stopwatch("draw_loop"), Stopwatch("try_add_loop")
            creation.draw_loop, creation.try_add_loop = draw, validate
            clock = time.perf_counter()
            rng = creation.sample_rng(cfg, index)
            try:
                tangle, _ = creation.sample_tangle(cfg, rng, creation.loop_count(cfg, index, rng), index)
            finally:
                creation.draw_loop, creation.try_add_loop = draw.original, validate.original
            after_sample = time.perf_counter()
            stages["draw"].append(draw.seconds)
            stages["validate"].append(validate.seconds)
            image = creation.render_loops(tangle.loops, cfg, rng)
            after_render = time.perf_counter()
            buffer = io.BytesIO()
            creation.save_png(image, buffer)
            after_encode = time.perf_counter()
            creation.pixel_sha256(image)
            after_hash = time.perf_counter()
            (Path(tmp) / f"{index}.png").write_bytes(buffer.getvalue())
            done = time.perf_counter()
            for name, seconds in (("sample", after_sample - clock), ("render", after_render - after_sample),
                                  ("encode", after_encode - after_render), ("hash", after_hash - after_encode),
                                  ("write", done - after_hash), ("total", done - clock)):
                stages[name].append(seconds)
            sizes.append(len(buffer.getvalue()))
            # Context only, outside the total: two parts of rendering alone (the noisy bare
            # canvas, which any image of this task needs, and the antialiased strokes), the
            # same final image saved by Pillow with its default PNG settings, and the same
            # picture as the prototype encodes it.
            clock = time.perf_counter()
            creation.bare_canvas(cfg, creation.sample_rng(cfg, index))
            stages["canvas_noise"].append(time.perf_counter() - clock)
            clock = time.perf_counter()
            creation.stroke_coverage(tangle.loops, cfg)
            stages["strokes"].append(time.perf_counter() - clock)
            clock = time.perf_counter()
            image.save(io.BytesIO(), format="PNG")
            stages["png_default"].append(time.perf_counter() - clock)
            clock = time.perf_counter()
            image.convert("RGB").save(io.BytesIO(), format="PNG")
            stages["rgb_zlib6"].append(time.perf_counter() - clock)
    return stages, sizes


def generator_rate(n, workers):
    """Images per second of one whole generation run."""
    with tempfile.TemporaryDirectory() as tmp:
        clock = time.perf_counter()
        creation.generate_dataset(creation.Config(n=n, seed=0), Path(tmp), workers, quiet=True)
        return n / (time.perf_counter() - clock)


def prototype_rate(n, workers):
    """The same measure for the prototype, its images spread over a pool as creation.py spreads its own."""
    with tempfile.TemporaryDirectory() as tmp:
        jobs = [(0, index, Path(tmp) / f"{index}.png") for index in range(n)]
        clock = time.perf_counter()
        if workers == 1:
            for job in jobs:
                reference.make_reference_image(*job)
        else:
            with multiprocessing.Pool(workers) as pool:
                pool.starmap(reference.make_reference_image, jobs, chunksize=1)
        return n / (time.perf_counter() - clock)


def interleaved_rates(runs, repeats):
    """Each named run once per round, round after round, so that drift in the machine's speed
    falls on all of them alike and ratios can be taken within a round."""
    rates = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            rates[name].append(run())
    return rates


def paired_ratio(rates, top, bottom):
    """Median over rounds of the ratio of two runs measured in the same round."""
    return statistics.median(a / b for a, b in zip(rates[top], rates[bottom]))


def worker_peak_rss_mb(n):
    """Peak RSS of a one-worker run in a fresh process, in MiB (Linux reports KiB)."""
    with tempfile.TemporaryDirectory() as tmp:
        code = (f"import resource, sys; sys.path.insert(0, {str(ROOT)!r}); import creation; "
                f"creation.main(['--n', '{n}', '--seed', '0', '--out', {tmp!r}, '--workers', '1', '--quiet']); "
                "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return int(out.split()[-1]) / 1024


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=40, help="images per measurement (default 40)")
    parser.add_argument("--repeats", type=int, default=3, help="end-to-end runs per worker count (default 3)")
    parser.add_argument("--long-run", type=int, default=140,
                        help="images in the longer end-to-end run that measures scaling (default 140)")
    args = parser.parse_args()
    cfg = creation.Config()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    stages, sizes = stage_times(cfg, range(args.images))
    medians = {name: statistics.median(times) for name, times in stages.items()}
    print("per image, median seconds:")
    for name, seconds in medians.items():
        label = {"draw": "(of sample: drawing candidate loops)", "validate": "(of sample: validating them)",
                 "canvas_noise": "(of render: the noisy bare canvas alone, timed apart, not part of total)",
                 "strokes": "(of render: the antialiased strokes alone, timed apart, not part of total)",
                 "png_default": "(the same image saved with Pillow's default PNG settings, not part of total)",
                 "rgb_zlib6": "(the same image as RGB at zlib level 6, not part of total)"}.get(name, "")
        print(f"  {name:<12}{seconds:8.4f} {label}".rstrip())
    ratios = [t / e for t, e in zip(stages["total"], stages["encode"])]
    print(f"encode floor {medians['encode']:.4f} s; pipeline / encode: median {statistics.median(ratios):.2f}x "
          f"(ratio of medians {medians['total'] / medians['encode']:.2f}x)")
    # What no pipeline emitting these files can skip, with geometry and strokes free: the
    # encode itself, the canvas noise the task asks for, and the pixel hash each record carries.
    floors = [(e + c) / e for e, c in zip(stages["encode"], stages["canvas_noise"])]
    hashed = [(e + c + h) / e for e, c, h in zip(stages["encode"], stages["canvas_noise"], stages["hash"])]
    print(f"with no loops at all (geometry and strokes free): encode + canvas noise {statistics.median(floors):.2f}x "
          f"the encode, + pixel hash {statistics.median(hashed):.2f}x")
    default_ratios = [t / e for t, e in zip(stages["total"], stages["png_default"])]
    print(f"pipeline / the same image saved with Pillow's defaults: median {statistics.median(default_ratios):.2f}x")
    print(f"bytes per image: median {statistics.median(sizes) / 1e3:.0f} KB, max {max(sizes) / 1e3:.0f} KB")
    rates = interleaved_rates({
        "one": lambda: generator_rate(args.images, 1), "two": lambda: generator_rate(args.images, 2),
        "prototype one": lambda: prototype_rate(args.images, 1), "prototype two": lambda: prototype_rate(args.images, 2),
    }, args.repeats)
    one, two = statistics.median(rates["one"]), statistics.median(rates["two"])
    print(f"end to end: {one:.2f} images/s with 1 worker, {two:.2f} with 2 ({paired_ratio(rates, 'two', 'one'):.2f}x); "
          f"--n 500 would take {500 / two:.0f} s on 2 workers")
    ref_one, ref_two = statistics.median(rates["prototype one"]), statistics.median(rates["prototype two"])
    print(f"prototype (tests/reference.py): {ref_one:.2f} images/s with 1 worker, {ref_two:.2f} with 2; "
          f"generator / prototype: {paired_ratio(rates, 'one', 'prototype one'):.2f}x on 1 worker, "
          f"{paired_ratio(rates, 'two', 'prototype two'):.2f}x on 2")
    # In a short run the last, slowest image leaves one worker idle; a longer run shows the steady state.
    long_rates = interleaved_rates({"one": lambda: generator_rate(args.long_run, 1),
                                    "two": lambda: generator_rate(args.long_run, 2)}, args.repeats)
    print(f"end to end, {args.long_run} images: {statistics.median(long_rates['one']):.2f} images/s with 1 worker, "
          f"{statistics.median(long_rates['two']):.2f} with 2 ({paired_ratio(long_rates, 'two', 'one'):.2f}x)")
    small, large = worker_peak_rss_mb(20), worker_peak_rss_mb(120)
    print(f"peak RSS of one worker: {small:.0f} MiB at --n 20, {large:.0f} MiB at --n 120")
    print(f"(self: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB)")


if __name__ == "__main__":
    main()
