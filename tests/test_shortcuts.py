"""Fast checks of the shortcut audit: its predictors on tables whose answer is
known, and its pixel statistics on hand-drawn images whose true values follow
from the drawing (two circles crossing twice: 2 crossings, 3 bounded faces)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image, ImageDraw

import shortcuts

SUPERSAMPLE = 4  # draw big, box-downsample: area-weighted antialiasing like a real renderer
STROKE_PX = 3
CLASSES = np.arange(5, 12)  # the generator's default loop counts


def render(draw_shapes, size_px: int = 384, seed: int = 0) -> np.ndarray:
    """(size, size) uint8: dark antialiased strokes on a noisy off-white canvas."""
    canvas = Image.new("L", (size_px * SUPERSAMPLE,) * 2, 255)
    draw_shapes(ImageDraw.Draw(canvas), SUPERSAMPLE)
    coverage = 1.0 - np.asarray(canvas.resize((size_px,) * 2, Image.Resampling.BOX), np.float64) / 255
    paper = 244.0 + np.random.default_rng(seed).normal(0.0, 2.5, coverage.shape)
    return np.clip(np.rint(paper * (1 - coverage) + 35.0 * coverage), 0, 255).astype(np.uint8)


def circles(*centre_radius_px):
    def draw(pen, scale):
        for (x, y), radius in centre_radius_px:
            box = [(x - radius) * scale, (y - radius) * scale, (x + radius) * scale, (y + radius) * scale]
            pen.ellipse(box, outline=0, width=STROKE_PX * scale)

    return draw


def open_arc(pen, scale):
    """A gentle S-curve from (60, 190) to (320, 190): one open stroke, two ends."""
    x_px = np.linspace(60, 320, 400)
    y_px = 190 + 70 * np.sin((x_px - 60) / 260 * 2 * np.pi)
    pen.line([(x * scale, y * scale) for x, y in zip(x_px, y_px)], fill=0, width=STROKE_PX * scale, joint="curve")


def save(pixels: np.ndarray, path, mode: str = "L"):
    image = Image.fromarray(pixels)
    if mode == "P":
        image = image.convert("P", palette=Image.Palette.ADAPTIVE, colors=256)
    image.save(path)
    return path


# ---------------------------------------------------------------------------
# Predictors and audit on synthetic feature tables


def test_pool_adjacent_violators_averages_violating_runs():
    fitted = shortcuts.pool_adjacent_violators(np.array([1.0, 3.0, 2.0, 4.0, 0.0]), np.ones(5))
    np.testing.assert_allclose(fitted, [1.0, 2.25, 2.25, 2.25, 2.25])


def test_chance_rates_for_uniform_labels():
    exact, within_one = shortcuts.chance_rates(CLASSES.astype(float), CLASSES.astype(float))
    assert exact == pytest.approx(1 / 7)
    # The two end classes have 2 neighbours-or-self, the five inner ones 3.
    assert within_one == pytest.approx((2 * 2 + 5 * 3) / 49)


def synthetic_table(image_count: int = 140, seed: int = 1):
    rng = np.random.default_rng(seed)
    answers = rng.choice(CLASSES, size=image_count)
    features = [
        {"decisive": float(-(n**2)), "noise": float(value)}  # decreasing and non-linear on purpose
        for n, value in zip(answers, rng.normal(size=image_count))
    ]
    return features, answers.tolist()


def rows_by_name(report):
    return {row["name"]: row for row in report["rows"]}


def test_audit_finds_the_decisive_feature_and_not_the_noise():
    features, answers = synthetic_table()
    report = shortcuts.audit(features, answers, splits=40, seed=0)
    rows = rows_by_name(report)
    chance = rows["chance"]
    assert rows["decisive"]["exact"] >= 0.98
    assert rows["decisive"]["within_one"] == 1.0
    assert rows["noise"]["exact"] <= chance["exact"] + 0.1
    assert rows["noise"]["within_one"] <= chance["within_one"] + 0.15
    # Separating seven classes on one squared axis needs large weights, which the ridge damps.
    assert rows["logistic regression (all)"]["exact"] >= 0.85
    # The noise axis counts as much as the decisive one in the distance, so neighbours blur.
    assert rows[f"{shortcuts.K_NEIGHBOURS}-NN vote (all)"]["exact"] >= 0.6
    assert report["strongest"]["exact"] >= 0.98
    assert "endpoint attack (raw)" not in rows  # only scored when the features carry it


def test_audit_is_reproducible_and_formats_a_strongest_line():
    features, answers = synthetic_table(image_count=60)
    first = shortcuts.audit(features, answers, splits=5, seed=7)
    assert first == shortcuts.audit(features, answers, splits=5, seed=7)
    last_line = shortcuts.format_table(first).splitlines()[-1]
    assert last_line.startswith(f"strongest: {first['strongest']['name']} ")
    assert last_line.endswith("(chance 14.3%; one standard error at chance on a half split's 30 test images: 6.4%)")


def test_the_majority_row_is_below_chance_on_balanced_answers():
    # Each count equally often: the training half's most frequent count is the test half's rarest.
    answers = [int(n) for n in np.repeat(CLASSES, 10)]
    features = [{"noise": float(value)} for value in np.random.default_rng(2).normal(size=len(answers))]
    report = shortcuts.audit(features, answers, splits=40, seed=3)
    rows = rows_by_name(report)
    assert rows["majority class"]["exact"] < rows["chance"]["exact"]
    # The table says why, so that a reader does not take it for a broken baseline.
    assert "below chance by construction" in shortcuts.format_table(report)


def test_audit_rejects_mismatched_inputs():
    with pytest.raises(ValueError, match="3 answers"):
        shortcuts.audit([{"a": 1.0}] * 4, [5, 6, 7], splits=2, seed=0)


# ---------------------------------------------------------------------------
# Pixel statistics on hand-drawn images


def test_endpoint_attack_counts_ends_of_an_open_curve_and_none_on_a_circle():
    assert shortcuts.count_endpoint_pairs(render(open_arc).astype(np.float64)) == 1.0
    circle = render(circles(((192, 192), 120))).astype(np.float64)
    assert shortcuts.count_endpoint_pairs(circle) == 0.0


def test_single_circle_statistics(tmp_path):
    radius_px = 120
    features = shortcuts.compute_features(save(render(circles(((192, 192), radius_px))), tmp_path / "c.png"))
    assert features["holes"] == 1
    assert features["ink_components"] == 1
    assert features["junctions"] == 0
    # Half-coverage threshold: ink area is stroke width times length.
    assert features["ink_px"] == pytest.approx(2 * np.pi * radius_px * STROKE_PX, rel=0.06)
    # An 8-connected digital circle has r * 8 sin(pi/4) pixels (one per max(|dx|, |dy|) step).
    assert features["skeleton_px"] == pytest.approx(radius_px * 8 * np.sin(np.pi / 4), rel=0.03)
    assert features["total_abs_turning_rad"] == pytest.approx(2 * np.pi, rel=0.03)
    assert features["net_turning_rad"] == pytest.approx(2 * np.pi, rel=0.01)
    assert features["median_radius_px"] == pytest.approx(radius_px, rel=0.06)
    assert features["mean_abs_curvature_per_px"] == pytest.approx(1 / radius_px, rel=0.06)


def test_two_crossing_circles(tmp_path):
    # Centres 110 px apart, radius 90: two X crossings, faces = left lune, lens, right lune.
    drawing = render(circles(((137, 192), 90), ((247, 192), 90)))
    features = shortcuts.compute_features(save(drawing, tmp_path / "two.png", mode="P"))
    assert features["holes"] == 3
    assert features["ink_components"] == 1
    assert features["junctions"] == 2
    assert features[shortcuts.ENDPOINT_KEY] == 0
    assert features["skeleton_px"] == pytest.approx(2 * 90 * 8 * np.sin(np.pi / 4), rel=0.05)
    # Turning near the crossings is trimmed away with the junctions: a bit under 2 * 2 pi.
    assert 0.8 * 4 * np.pi < features["net_turning_rad"] <= 4 * np.pi * 1.01


def loop_with_curl(pen, scale):
    """A limacon (a loop with one small inner loop: a curl) and a circle crossing its outer part twice."""
    theta = np.linspace(0, 2 * np.pi, 2000)
    radius_px = 60 + 100 * np.cos(theta)
    points = [((150 + r * np.cos(t)) * scale, (192 + r * np.sin(t)) * scale) for r, t in zip(radius_px, theta)]
    pen.line(points + points[:1], fill=0, width=STROKE_PX * scale, joint="curve")
    circles(((300, 192), 70))(pen, scale)


def test_curls_count_branches_that_return_to_their_own_crossing(tmp_path):
    curl = shortcuts.compute_features(save(render(loop_with_curl), tmp_path / "curl.png"))
    assert (curl["curls"], curl["junctions"]) == (1, 3)
    # Two circles crossing twice: each branch runs from one crossing to the other.
    lens = shortcuts.compute_features(save(render(circles(((137, 192), 90), ((247, 192), 90))), tmp_path / "lens.png"))
    assert lens["curls"] == 0


def test_separate_circles_are_separate_components(tmp_path):
    drawing = render(circles(((100, 192), 70), ((284, 192), 70)))
    features = shortcuts.compute_features(save(drawing, tmp_path / "apart.png"))
    assert (features["ink_components"], features["holes"], features["junctions"]) == (2, 2, 0)
    assert features["net_turning_rad"] == pytest.approx(4 * np.pi, rel=0.01)


def test_cli_end_to_end(tmp_path, capsys):
    answers = [1, 2, 1, 2, 1, 2, 1, 2]
    (tmp_path / "images").mkdir()
    with open(tmp_path / "annotations.jsonl", "w", encoding="utf-8") as handle:
        for index, count in enumerate(answers):
            shapes = [((100, 192), 70), ((284, 192), 70)][:count]
            save(render(circles(*shapes), seed=index), tmp_path / f"images/{index}.png")
            handle.write(json.dumps({"image": f"images/{index}.png", "answer": count}) + "\n")
    out_path = tmp_path / "audit.json"
    argv = [str(tmp_path), "--workers", "1", "--splits", "3", "--limit", "6", "--json", str(out_path)]
    assert shortcuts.main(argv) == 0
    report = json.loads(out_path.read_text(encoding="utf-8"))
    assert report["images"] == 6
    assert rows_by_name(report)["ink_components"]["exact"] == 1.0
    assert capsys.readouterr().out.splitlines()[-1].startswith("strongest: ")


def test_the_ci_gate_names_a_statistic_that_leaks():
    report = {"rows": [
        {"name": "chance", "kind": "chance", "exact": 0.14, "within_one": 0.39},
        {"name": "ink_px", "kind": "statistic", "exact": 0.70, "within_one": 0.99},
        {"name": "holes", "kind": "statistic", "exact": 0.15, "within_one": 0.40},
        {"name": "logistic regression (all)", "kind": "combined", "exact": 0.50, "within_one": 0.90},
    ]}
    assert shortcuts.gate_failures(report, [0.29, 0.59], 0.45) == [
        "ink_px 70.0% exact, 99.0% within one", "logistic regression (all) 50.0% exact"]
    assert shortcuts.gate_failures(report, [0.75, 0.995], 0.6) == []
    assert shortcuts.gate_failures(report, None, None) == []


# ---------------------------------------------------------------------------
# Generic features and the learned attack


def test_generic_features_on_a_horizontal_stroke():
    gray = np.full((128, 128), 240.0)
    gray[60:64, 8:120] = 30.0  # a 4 px horizontal bar
    ink = gray < shortcuts.estimate_ink_threshold(gray)
    groups = shortcuts.compute_generic_features(gray, ink)
    # Its edges are horizontal: the gradient points along y, orientation pi/2, the middle bin.
    orientation = groups["gradient orientation"]
    assert orientation.sum() == pytest.approx(1.0)
    assert orientation[shortcuts.ORIENTATION_BINS // 2] > 0.9
    assert 10.0 ** groups["power spectrum"] == pytest.approx(
        10.0 ** groups["power spectrum"] / (10.0 ** groups["power spectrum"]).sum(), abs=1e-9)
    assert groups["ink fraction"][0] == pytest.approx(4 * 112 / 128**2)
    # The bar lies in the 8x8 grid's fourth row of cells (rows 48-63) and nowhere else.
    grid = groups["ink grid 8x8"].reshape(8, 8)
    assert grid[3].sum() > 0 and np.delete(grid, 3, axis=0).sum() == 0
    assert np.all(np.diff(groups["ink grid 8x8, sorted"]) >= 0)
    # Background: one 4-connected region around the bar, of 128^2 - 448 px (log2 bin 13).
    regions = groups["background regions"]
    assert regions[-1] == 1 and regions[13] == 1


def discs(count: int, rng: np.random.Generator, size_px: int = 160):
    """count filled dark discs in distinct cells of a 4x4 layout: N is plainly the ink amount."""
    cell_px = size_px // 4
    cells = rng.choice(16, size=count, replace=False)
    jitter = rng.uniform(-4, 4, size=(count, 2))

    def draw(pen, scale):
        for cell, (dx, dy) in zip(cells, jitter):
            x, y = (cell % 4 + 0.5) * cell_px + dx, (cell // 4 + 0.5) * cell_px + dy
            pen.ellipse([(x - 12) * scale, (y - 12) * scale, (x + 12) * scale, (y + 12) * scale], fill=0)

    return draw


def write_disc_dataset(folder, per_class: int, seed: int = 3) -> list[int]:
    """annotations.jsonl and PNGs of disc images, per_class of each count 5..11; returns the answers."""
    rng = np.random.default_rng(seed)
    answers = [int(n) for n in np.repeat(CLASSES, per_class)]
    (folder / "images").mkdir()
    with open(folder / "annotations.jsonl", "w", encoding="utf-8") as handle:
        for index, count in enumerate(answers):
            save(render(discs(count, rng), size_px=160, seed=index), folder / f"images/{index}.png")
            handle.write(json.dumps({"image": f"images/{index}.png", "answer": count}) + "\n")
    return answers


@pytest.fixture(scope="module")
def disc_measurements(tmp_path_factory):
    folder = tmp_path_factory.mktemp("discs")
    answers = write_disc_dataset(folder, per_class=10)
    paths, _ = shortcuts.read_annotations(folder, None)
    return shortcuts.compute_all_features(paths, workers=1), answers


def learned_report(measured, answers):
    return shortcuts.audit([s for s, _ in measured], answers, splits=5, seed=0,
                           generic=[g for _, g in measured], folds=5, repeats=2)


def test_learned_attack_reads_n_off_the_ink_amount(disc_measurements):
    report = learned_report(*disc_measurements)
    learned = {row["name"]: row for row in report["rows"] if row["kind"] == "learned"}
    chance = rows_by_name(report)["chance"]["exact"]
    # Boosting and ridge find the total ink; the weakly regularised logistic spreads it over 500+ columns.
    for model in ("gradient boosting", "ridge (rounded)"):
        assert learned[f"generic features, {model}"]["exact"] > 0.8, model
    assert learned["generic features, logistic"]["exact"] > chance + 0.25
    assert learned["generic features, logistic"]["within_one"] > 0.8
    assert learned["generic: ink grids, logistic"]["exact"] > chance + 0.25
    failures = shortcuts.gate_failures(report, None, None, max_learned=0.4)
    assert "generic features, gradient boosting " in " ".join(failures)
    assert all(failure.startswith("generic") for failure in failures)
    assert (report["folds"], report["repeats"]) == (5, 2)


def test_learned_attack_stays_near_chance_when_labels_are_shuffled(disc_measurements):
    measured, answers = disc_measurements
    shuffled = np.random.default_rng(0).permutation(answers).tolist()
    report = learned_report(measured, shuffled)
    chance = rows_by_name(report)["chance"]["exact"]
    for row in report["rows"]:
        if row["kind"] == "learned":
            assert row["exact"] < chance + 0.15, row


def test_cli_learned_gate_and_worker_count_agree(tmp_path, capsys):
    write_disc_dataset(tmp_path, per_class=5)
    reports = []
    for workers in ("1", "2"):
        out_path = tmp_path / f"audit{workers}.json"
        argv = [str(tmp_path), "--workers", workers, "--splits", "3", "--repeats", "1", "--json", str(out_path),
                "--max-learned", "0.35"]
        assert shortcuts.main(argv) == 1
        failures = [line for line in capsys.readouterr().err.splitlines() if line.startswith("above the allowed")]
        assert "above the allowed accuracy: generic features, logistic " in "\n".join(failures)
        reports.append(json.loads(out_path.read_text(encoding="utf-8")))
    assert reports[0]["rows"] == reports[1]["rows"]
