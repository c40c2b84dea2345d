"""tests/parallel_stretch.py, the scene-file measure of parallel stretches: hand-made oracles, then a dataset."""

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

import creation

sys.path.insert(0, str(Path(__file__).resolve().parent))
import parallel_stretch  # noqa: E402  (a script beside the tests, not a package)


def circle(cx, cy, r, points=720):
    t = np.linspace(0, 2 * np.pi, points, endpoint=False)
    return np.column_stack([cx + r * np.cos(t), cy + r * np.sin(t)])


def scene(*loops, crossings=()):
    return {"loops": [{"points": loop.tolist()} for loop in loops], "crossings": list(crossings)}


def polygon_length(points):
    return float(np.hypot(*(np.roll(points, -1, axis=0) - points).T).sum())


def test_concentric_rings_closer_than_the_gap_run_side_by_side_all_round():
    inner, outer = circle(500, 500, 200), circle(500, 500, 212)
    figures = parallel_stretch.stretches(scene(inner, outer), 15.0, (10.0,))
    # Both rings are marked all round; the longer one's whole length is the figure.
    assert figures[parallel_stretch.WINDOWS] == pytest.approx(polygon_length(outer))
    assert figures["discs of 10 px"] == figures[parallel_stretch.WINDOWS]


def test_the_figure_is_the_longest_loop_s_whatever_the_loop_order():
    # A small ring marked all round by the ring just outside it, and a thin 300 x 8 px rectangle whose
    # long sides run beside each other: the rectangle's run is the longest, listed first or last.
    small, around = circle(100, 100, 5, points=40), circle(100, 100, 12, points=80)
    side = np.linspace(0, 300, 301)
    rectangle = np.vstack([np.column_stack([400 + side, np.full_like(side, 500)]),
                           np.column_stack([700 - side, np.full_like(side, 508)])])
    first = parallel_stretch.stretches(scene(small, around, rectangle), 15.0, ())
    last = parallel_stretch.stretches(scene(rectangle, small, around), 15.0, ())
    assert first == last
    assert polygon_length(around) < first[parallel_stretch.WINDOWS] <= polygon_length(rectangle)


def test_concentric_rings_farther_apart_than_the_gap_have_no_stretch():
    figures = parallel_stretch.stretches(scene(circle(500, 500, 200), circle(500, 500, 216)), 15.0, (10.0,))
    assert figures == {parallel_stretch.WINDOWS: 0.0, "discs of 10 px": 0.0}


@pytest.mark.parametrize("gap", [12.0, 14.0])
def test_a_near_tangent_pass_runs_as_far_as_the_curvature_predicts(gap):
    # Two r = 200 rings whose closest points are `gap` apart separate by about s^2 / r at s px of arc
    # either side, so they stay within 15 px over 2 sqrt((15 - gap) r): 49 px at 12 px, 28 px at 14 px.
    # Both rings start at their closest point, so both runs wrap past a loop's first sample.
    r = 200.0
    right = np.roll(circle(300 + 2 * r + gap, 500, r), -360, axis=0)  # from its leftmost point
    figures = parallel_stretch.stretches(scene(circle(300, 500, r), right), 15.0, ())
    assert figures[parallel_stretch.WINDOWS] == pytest.approx(2 * math.sqrt((15 - gap) * r), abs=2.0)


def test_a_strand_that_crosses_and_then_runs_alongside_is_counted_from_the_crossing_window_on():
    # A's top edge is y = 500. B comes down at 30 degrees, crosses it at (300, 500), levels out 12 px
    # below it after 24 px of arc, runs level for 100 px and turns straight down. A is within 15 px of
    # B from x = 270 to about 430; its window (15 / sin 30 = 30 px) takes x = 270 to 330, leaving
    # about 100 px. B's own run is about as long (from 30 px past the crossing to 3 px down the turn).
    a = np.array([[0, 500], [1000, 500], [1000, 900], [0, 900]], dtype=float)
    level = (300 + 24 * math.cos(math.radians(30)), 512.0)
    b = np.array([[300 - 200 * math.cos(math.radians(30)), 400], [300, 500], level, [level[0] + 100, 512],
                  [level[0] + 100, 700], [100, 700]], dtype=float)
    steep = (100 + (b[0, 0] - 100) * 2 / 3, 500.0)  # where B's closing side crosses A again
    crossings = [{"xy": [300.0, 500.0], "loops": [0, 1], "angle_deg": 30.0},
                 {"xy": list(steep), "loops": [0, 1], "angle_deg": math.degrees(math.atan2(300, b[0, 0] - 100))}]
    figures = parallel_stretch.stretches(scene(a, b, crossings=crossings), 15.0, ())
    assert figures[parallel_stretch.WINDOWS] == pytest.approx(100, abs=4)


def test_the_gate_reads_the_crossing_windows_row_s_90th_percentile_and_share_over_60_px():
    # Ten images: the windows row has its 90th percentile at 50.5 px and one image in ten over 60 px;
    # the disc row would break neither limit, nor would the windows row's median.
    windows = [10.0] * 8 + [50.0, 70.0]
    figures = [{parallel_stretch.WINDOWS: w, "discs of 10 px": 1.0} for w in windows]
    assert parallel_stretch.gate_failures(figures, 45.0, None) == ["90th percentile 52.0 px > 45 px"]
    assert parallel_stretch.gate_failures(figures, 52.0, None) == []
    assert parallel_stretch.gate_failures(figures, None, 0.05) == ["10.0% of images over 60 px > 5.0%"]
    assert parallel_stretch.gate_failures(figures, None, 0.1) == []


def crossing_of(a_centre, b_centre, r):
    """The upper crossing point of two r-circles and their crossing angle, degrees."""
    (ax, ay), (bx, by) = a_centre, b_centre
    d = math.dist(a_centre, b_centre)
    h = math.sqrt(r * r - (d / 2) ** 2)
    mid = ((ax + bx) / 2, (ay + by) / 2)
    point = (mid[0] - h * (by - ay) / d, mid[1] + h * (bx - ax) / d)
    return point, math.degrees(2 * math.asin(d / (2 * r)))


def test_a_shallow_crossing_is_a_stretch_only_where_a_small_disc_leaves_its_window():
    # Two r = 300 rings 90 px apart cross at about 17 deg: near each crossing the strands stay within
    # 15 px for about 50 px of arc either side, far beyond a 10 px disc but inside the crossing's window.
    r, a, b = 300.0, (400.0, 500.0), (490.0, 500.0)
    upper, angle = crossing_of(a, b, r)
    lower = (upper[0], 2 * 500 - upper[1])
    crossings = [{"xy": list(p), "loops": [0, 1], "angle_deg": angle} for p in (upper, lower)]
    figures = parallel_stretch.stretches(scene(circle(*a, r), circle(*b, r), crossings=crossings), 15.0, (10.0,))
    window = 15 / math.sin(math.radians(angle))
    assert figures["discs of 10 px"] > window - 10 - 2  # the part of the window a small disc does not cover
    assert figures[parallel_stretch.WINDOWS] < figures["discs of 10 px"]


def limacon_with_inner_loop():
    """r = 150 (0.5 + cos t) round (500, 500): it passes through the centre twice, crossing itself at 60 deg."""
    t = np.linspace(0, 2 * np.pi, 2000, endpoint=False)
    radius = 150 * (0.5 + np.cos(t))
    return np.column_stack([500 + radius * np.cos(t), 500 + radius * np.sin(t)])


def test_a_loop_crossing_itself_has_both_passes_set_aside():
    # A limacon with an inner loop: its self-crossing sets aside arc on both passes through the point.
    limacon = limacon_with_inner_loop()
    crossing = {"xy": [500.0, 500.0], "loops": [0, 0], "angle_deg": 60.0}  # its passes cross at 60 deg
    open_figures = parallel_stretch.stretches(scene(limacon), 15.0, ())
    figures = parallel_stretch.stretches(scene(limacon, crossings=[crossing]), 15.0, ())
    assert open_figures[parallel_stretch.WINDOWS] > 0  # the two passes are within 15 px near the point
    assert figures[parallel_stretch.WINDOWS] < open_figures[parallel_stretch.WINDOWS]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("parallel")
    assert creation.main(["--n", "14", "--seed", "3", "--scenes", "--quiet", "--workers", "1", "--out", str(out)]) == 0
    return out


def test_a_generated_dataset_keeps_its_stretches_short_by_the_crossing_windows(dataset, capsys):
    assert parallel_stretch.main([str(dataset), "--discs", "10"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "longest parallel stretch per image, px of arc along one loop, where strands are within 15 px (14 images):"
    windows = lines[2].split()
    assert windows[:2] == ["crossing", "windows"]
    # The generator's rule allows 40 px with wider windows; by these it stays within the 60 px.
    assert float(windows[4]) <= 60.0


def records_and_images(dataset, folder):
    """folder, made to hold dataset's records and (linked) images but no scene files."""
    folder.mkdir()
    (folder / "annotations.jsonl").write_bytes((dataset / "annotations.jsonl").read_bytes())
    (folder / "images").symlink_to(dataset / "images")
    return folder


def test_a_dataset_without_scene_files_is_refused_in_one_line(dataset, tmp_path, capsys):
    bare = records_and_images(dataset, tmp_path / "bare")
    assert parallel_stretch.main([str(bare)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "make the dataset with --scenes" in err[0]


def test_a_self_crossing_whose_window_spans_its_whole_loop_sets_the_loop_aside():
    # At 1 degree the window (15 / sin 1 deg, about 860 px) reaches round the whole 1,000 px loop from
    # either pass: nothing is left.
    limacon = limacon_with_inner_loop()
    crossing = {"xy": [500.0, 500.0], "loops": [0, 0], "angle_deg": 1.0}
    assert parallel_stretch.stretches(scene(limacon, crossings=[crossing]), 15.0, ()) == {parallel_stretch.WINDOWS: 0.0}


@pytest.mark.parametrize("flags, message", [
    (["--gap", "0"], "--gap is a distance over 0"),
    (["--gap", "nan"], "--gap is a distance over 0"),
    (["--gap", "1e9"], "at most 100 px"),
    (["--discs", "-5"], "every --discs radius"),
    (["--discs", "inf"], "every --discs radius"),
    (["--workers", "0"], "need --workers >= 1"),
    (["--limit", "0"], "need --workers >= 1 and --limit >= 1"),
])
def test_bad_flags_are_refused_in_one_line(dataset, flags, message, capsys):
    with pytest.raises(SystemExit) as stop:
        parallel_stretch.main([str(dataset), *flags])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and message in err[0]


@pytest.mark.parametrize("damage, message", [
    (lambda s: {"loops": "nope", "crossings": []}, 'no list of "loops"'),
    (lambda s: {**s, "crossings": {}}, 'no list of "loops" and list of "crossings"'),
    (lambda s: {**s, "loops": [{"points": [[1, 2]]}] + s["loops"][1:]}, "loop 0 is not a list of at least three"),
    (lambda s: {**s, "loops": [{"points": [[1e9, 0], [0, 1], [1, 1]]}] + s["loops"][1:]}, "far outside"),
    (lambda s: {**s, "crossings": [{**s["crossings"][0], "angle_deg": 91}]}, "crossing 0 is not"),
    (lambda s: {**s, "loops": [{"points": [[5, 5], [5, 5], [5, 5]]}] + s["loops"][1:]}, "too short to be a loop"),
    (lambda s: {**s, "loops": [{"points": [[0, 0], [2000, 0]] * 200}] + s["loops"][1:]}, "image sides"),
    (lambda s: {**s, "loops": [{"points": [[10 ** 400, 0], [0, 1], [1, 1]]}]}, "OverflowError"),
    (lambda s: {**s, "loops": [{"points": [{"x": 1}, [0, 1], [1, 1]]}]}, "not a scene file"),
    (lambda s: {**s, "crossings": [{**s["crossings"][0], "loops": [0, 99]}]}, "crossing 0 is not"),
    (lambda s: {**s, "crossings": [{"xy": [1, 2]}]}, "crossing 0 is not"),
])
def test_a_scene_file_of_the_wrong_shape_is_refused_in_one_line(dataset, tmp_path, damage, message, capsys):
    copy = records_and_images(dataset, tmp_path / "copy")
    (copy / "scenes").mkdir()
    for path in (dataset / "scenes").iterdir():
        damaged = damage(json.loads(path.read_text(encoding="utf-8")))
        (copy / "scenes" / path.name).write_text(json.dumps(damaged), encoding="utf-8")
    assert parallel_stretch.main([str(copy), "--limit", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a scene file" in err[0] and message in err[0]


def test_the_gate_passes_a_generated_dataset_and_fails_on_a_limit_it_breaks(dataset, capsys):
    assert parallel_stretch.main([str(dataset), "--discs", "--max-p90", "45", "--max-over-60", "0.01"]) == 0
    capsys.readouterr()
    assert parallel_stretch.main([str(dataset), "--discs", "--max-p90", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "90th percentile" in err[0] and "> 1 px" in err[0]


@pytest.mark.parametrize("flags", [["--max-p90", "nan"], ["--max-p90", "-1"], ["--max-over-60", "1.5"],
                                   ["--max-over-60", "nan"]])
def test_a_gate_that_would_pass_anything_or_nothing_is_refused(dataset, flags, capsys):
    with pytest.raises(SystemExit) as stop:
        parallel_stretch.main([str(dataset), *flags])
    assert stop.value.code == 2 and len(capsys.readouterr().err.strip().splitlines()) == 1
