"""End to end: the CLI on a tiny dataset, determinism across workers, records, bad input."""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image
from scipy.ndimage import convolve
from scipy.spatial import cKDTree
from skimage.morphology import skeletonize

import creation

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--n", "6", "--seed", "11", "--quiet"]


def run_cli(*args):
    return subprocess.run([sys.executable, str(ROOT / "creation.py"), *args],
                          capture_output=True, text=True, timeout=300)


def decoded_hash(path):
    return hashlib.sha256(np.asarray(Image.open(path).convert("RGB")).tobytes()).hexdigest()


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny")
    assert creation.main([*TINY, "--out", str(out), "--workers", "1"]) == 0
    return out


def read_records(folder):
    return [json.loads(line) for line in (folder / "annotations.jsonl").read_text(encoding="utf-8").splitlines()]


def test_tiny_run_writes_images_and_records(tiny_dataset):
    records = read_records(tiny_dataset)
    assert [r["index"] for r in records] == list(range(6))
    assert sorted(p.name for p in (tiny_dataset / "images").iterdir()) == [
        f"tangled_loops_{i:05d}.png" for i in range(6)]
    for r in records:
        assert list(r)[:6] == ["image", "width", "height", "num_loops", "question", "answer"]
        assert r["question"] == creation.QUESTION
        assert r["answer"] == r["num_loops"]
        assert 5 <= r["answer"] <= 11
        image = Image.open(tiny_dataset / r["image"])
        assert image.size == (r["width"], r["height"]) == (1024, 1024)
        assert decoded_hash(tiny_dataset / r["image"]) == r["pixel_sha256"]
        assert r["num_crossings"] >= 0 and r["num_self_crossings"] >= 0
        assert r["min_crossing_angle_deg"] is None or r["min_crossing_angle_deg"] >= 30


def test_data_json_describes_the_run(tiny_dataset):
    data = json.loads((tiny_dataset / "data.json").read_text(encoding="utf-8"))
    assert data["samples"] == read_records(tiny_dataset)
    assert data["config"] == creation.dataclasses.asdict(creation.Config(n=6, seed=11))
    assert sum(data["answer_histogram"].values()) == 6
    assert data["command"].startswith("python creation.py --n 6 --seed 11 ")
    assert "--out" not in data["command"] and "--workers" not in data["command"]
    text = (tiny_dataset / "data.json").read_text(encoding="utf-8")
    assert str(tiny_dataset) not in text


def test_canonical_command_regenerates_the_config(tiny_dataset):
    data = json.loads((tiny_dataset / "data.json").read_text(encoding="utf-8"))
    argv = data["command"].split()[2:]
    assert creation.config_from_args(creation.build_parser().parse_args(argv)) == creation.Config(n=6, seed=11)


@given(st.floats(0.0, 0.44, allow_subnormal=False), st.floats(150.0, 180.0))
def test_canonical_command_keeps_every_digit(angle_jitter, min_radius):
    cfg = creation.Config(angle_jitter=angle_jitter, original_shapes=True, min_radius=min_radius)
    argv = creation.canonical_command(cfg).split()[2:]
    assert creation.config_from_args(creation.build_parser().parse_args(argv)) == cfg


def test_single_sample_regenerates_alone(tiny_dataset):
    record = read_records(tiny_dataset)[4]
    image, again, _ = creation.make_sample(creation.Config(n=6, seed=record["seed"]), record["index"])
    assert again == record


@pytest.mark.slow
def test_two_workers_give_identical_output(tiny_dataset, tmp_path):
    assert creation.main([*TINY, "--out", str(tmp_path), "--workers", "2"]) == 0
    for name in ("annotations.jsonl", "data.json"):
        assert (tmp_path / name).read_bytes() == (tiny_dataset / name).read_bytes()
    for record in read_records(tiny_dataset):
        assert decoded_hash(tmp_path / record["image"]) == decoded_hash(tiny_dataset / record["image"])


def test_seed_endpoint_attack_finds_no_endpoints(tiny_dataset):
    # The attack that broke the open-curve version: skeleton pixels with one neighbour.
    for record in read_records(tiny_dataset):
        gray = np.asarray(Image.open(tiny_dataset / record["image"]).convert("L"))
        skeleton = skeletonize(gray < 110)
        neighbours = convolve(skeleton.astype(int), np.ones((3, 3), int), mode="constant") - skeleton
        assert np.sum(skeleton & (neighbours == 1)) == 0


def test_image_names_widen_for_large_datasets():
    assert creation.image_name(7, 500) == "images/tangled_loops_00007.png"
    assert creation.image_name(7, 200_000) == "images/tangled_loops_000007.png"


@pytest.mark.parametrize("args, flag", [
    (["--n", "0"], "--n"),
    (["--n", "-4"], "--n"),
    (["--n", "2.5"], "--n"),
    (["--seed", "-1"], "--seed"),
    (["--min-loops", "9", "--max-loops", "5"], "--min-loops"),
    (["--interior-margin", "600"], "--interior-margin"),
    (["--max-radius", "900"], "--max-radius"),
    (["--min-gap", "-2"], "--min-gap"),
    (["--stroke-width", "nan"], "--stroke-width"),
    (["--workers", "0"], "--workers"),
    (["--size", "big"], "--size"),
    (["--n", "10000000000"], "--n"),
    # Past the loop and waypoint limits: arrays sized by these counts would not fit in memory.
    (["--max-loops", "99999999999999999999", "--original-shapes"], "--max-loops"),
    (["--min-waypoints", "99999999999999999999"], "--min-waypoints"),
    (["--original-shapes", "--max-waypoints", "1000000"], "--max-waypoints"),
    (["--n", "2", "--shard", "0/3"], "--shard"),  # a shard holding no image
    (["--json"], "--evaluate"),
    (["--dataset", "somewhere"], "--evaluate"),
    (["--balanced", "--min-loops", "1", "--max-loops", "2"], "--min-loops"),
    (["--evaluate", "predictions.jsonl", "--n", "500", "--merge", "--quiet"], "not --n, --merge, --out"),
    (["--out", ""], "--out"),  # an unset shell variable: not the current folder
    (["--evaluate", "predictions.jsonl", "--dataset", ""], "--dataset"),
])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, args, flag):
    (tmp_path / "keep.txt").write_text("untouched")
    before = sorted(p.name for p in tmp_path.iterdir())
    result = run_cli(*args, "--out", str(tmp_path))
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert flag in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_evaluate_mode_prints_the_report(tiny_dataset, tmp_path, capsys):
    records = read_records(tiny_dataset)
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text(
        json.dumps({"image": records[0]["image"], "response": f"Answer: {records[0]['answer']}"}) + "\n"
        + json.dumps({"index": 1, "response": "no idea"}) + "\n", encoding="utf-8")
    assert creation.main(["--evaluate", str(predictions), "--dataset", str(tiny_dataset), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["n_items"], report["n_correct"], report["n_unparsed"], report["n_missing"]) == (6, 1, 1, 4)


def test_evaluate_mode_refuses_a_bad_line_without_a_report(tiny_dataset, tmp_path, capsys):
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text('{"index": 0, "response": "7"}\n{"index": 0, "response": "8"}\n', encoding="utf-8")
    assert creation.main(["--evaluate", str(predictions), "--dataset", str(tiny_dataset)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "line 2" in err


def test_evaluate_mode_names_the_file_and_line_of_a_cut_annotation(tiny_dataset, tmp_path, capsys):
    lines = (tiny_dataset / "annotations.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (tmp_path / "annotations.jsonl").write_text(lines[0] + lines[1][:50], encoding="utf-8")
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text('{"index": 0, "response": "7"}\n', encoding="utf-8")
    assert creation.main(["--evaluate", str(predictions), "--dataset", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and f"{tmp_path / 'annotations.jsonl'}, line 2: not a JSON record" in err


def test_annotations_load_with_hugging_face_datasets(tiny_dataset, tmp_path, monkeypatch):
    import datasets
    monkeypatch.chdir(tiny_dataset)  # image paths are relative to the dataset folder
    ds = datasets.load_dataset("json", data_files="annotations.jsonl", split="train", cache_dir=str(tmp_path))
    assert ds.num_rows == 6 and ds[0]["answer"] == read_records(tiny_dataset)[0]["answer"]
    ds = ds.cast_column("image", datasets.Image())
    assert ds[0]["image"].size == (1024, 1024)
    samples = datasets.load_dataset("json", data_files="data.json", field="samples", split="train",
                                    cache_dir=str(tmp_path / "doc"))
    assert samples["index"] == list(range(6))


@pytest.mark.slow
def test_review_pictures_leave_the_dataset_alone(tiny_dataset, tmp_path):
    assert creation.main([*TINY, "--out", str(tmp_path), "--workers", "2", "--overlays", "--contact-sheet", "4"]) == 0
    for name in ("annotations.jsonl", "data.json"):
        assert (tmp_path / name).read_bytes() == (tiny_dataset / name).read_bytes()
    assert sorted(p.name for p in (tmp_path / "images").iterdir()) == sorted(
        p.name for p in (tiny_dataset / "images").iterdir())
    assert sorted(p.name for p in (tmp_path / "review" / "overlays").iterdir()) == sorted(
        p.name for p in (tiny_dataset / "images").iterdir())
    sheet = Image.open(tmp_path / "review" / "contact_sheet.png")
    assert sheet.size == (2 * creation.THUMBNAIL_PX, 2 * (creation.THUMBNAIL_PX + 28))


def test_overlay_changes_only_pixels_on_loops_and_crossing_rings():
    cfg = creation.Config(n=6, seed=11)
    image, record, tangle = creation.make_sample(cfg, 2)
    overlay = np.asarray(creation.render_overlay(image, tangle, cfg)).astype(int)
    original = np.asarray(image.convert("RGB")).astype(int)
    rows, cols = np.nonzero(np.any(overlay != original, axis=2))
    centres = np.column_stack([cols + 0.5, rows + 0.5])
    # Distance to the curve, from 20 points per segment (0.2 px apart at most; independent of the renderer).
    steps = np.linspace(0, 1, 20, endpoint=False)[None, :, None]
    dense = np.concatenate([(p[:, None] + steps * (np.roll(p, -1, axis=0) - p)[:, None]).reshape(-1, 2)
                            for p in tangle.loops])
    to_loop = cKDTree(dense).query(centres)[0]
    on_stroke = to_loop <= cfg.stroke_width / 2 + 0.75
    # A 2 px ring drawn inside radius R covers R-2..R, give or take rasterisation; a self-crossing
    # gets a square of that half-side, whose distance is the largest coordinate difference.
    on_ring = np.zeros(len(centres), dtype=bool)
    for is_self, metric in ((False, 2), (True, np.inf)):
        marks = tangle.crossings.point[tangle.crossings.is_self == is_self]
        if len(marks):
            to_mark = cKDTree(marks).query(centres, p=metric)[0]
            on_ring |= (to_mark >= creation.CROSSING_RING_PX - 3.5) & (to_mark <= creation.CROSSING_RING_PX + 1.5)
    assert tangle.crossings.is_self.any() and np.all(on_stroke | on_ring)
    # Every loop got its own colour: the painted stroke pixels show as many hues as loops.
    painted = overlay[np.isin(overlay.reshape(-1, 3) @ [65536, 256, 1],
                              np.array(creation.REVIEW_COLOURS) @ [65536, 256, 1]).reshape(overlay.shape[:2])]
    assert len(np.unique(painted @ [65536, 256, 1])) == record["num_loops"]


def test_palette_png_decodes_to_exactly_the_rendered_colours(tmp_path):
    cfg = creation.Config(n=3, seed=5)
    rng = creation.sample_rng(cfg, 1)
    tangle, _ = creation.sample_tangle(cfg, rng, 5, 1)
    image = creation.render_loops(tangle.loops, cfg, rng)
    tone = np.asarray(image)  # the palette indices: one tone per pixel
    ramp = np.array(creation.PALETTE, dtype=np.uint8).reshape(256, 3)
    creation.save_png(image, tmp_path / "x.png")
    decoded = np.asarray(Image.open(tmp_path / "x.png").convert("RGB"))
    assert np.array_equal(decoded, ramp[tone])
    # Every colour lies on the line from ink to paper, darker tone for darker colour.
    assert np.all(np.diff(ramp.astype(int), axis=0) >= 0)
    assert len(np.unique(tone)) > 100  # noise and antialiasing use the ramp, not two colours


def test_canvas_noise_is_rounded_gaussian_on_bare_and_inked_pixels():
    cfg = creation.Config(n=3, seed=5)
    rng = creation.sample_rng(cfg, 0)
    tangle, _ = creation.sample_tangle(cfg, rng, 6, 0)
    tone = np.asarray(creation.render_loops(tangle.loops, cfg, rng)).astype(float)
    coverage = creation.stroke_coverage(tangle.loops, cfg)
    bare = tone[coverage == 0]
    # Gaussian noise rounded to whole tones has variance sigma^2 + 1/12.
    assert abs(bare.mean() - creation.PAPER_TONE) < 0.02
    assert abs(bare.std() - np.sqrt(creation.NOISE_SIGMA_TONE ** 2 + 1 / 12)) < 0.02
    # Fully inked pixels carry the same noise around the ink tone.
    solid = tone[coverage == 1]
    assert len(solid) > 10_000
    assert abs(solid.mean() - creation.INK_TONE) < 0.1
    assert abs(solid.std() - creation.NOISE_SIGMA_TONE) < 0.1


def test_a_negative_zero_flag_is_zero(tmp_path):
    # -0 is 0: numpy's uniform draw refuses the bounds (0, -0.0), and data.json must not name a dataset of its own.
    out = tmp_path / "negzero"
    assert creation.main(["--n", "2", "--quiet", "--workers", "1", "--out", str(out),
                          "--angle-jitter", "-0", "--wide-lens-angle", "-0"]) == 0
    settings = json.loads((out / "data.json").read_text())["config"]
    assert repr(settings["angle_jitter"]) == repr(settings["wide_lens_angle"]) == "0.0"
    assert creation.main(["--n", "2", "--quiet", "--workers", "1", "--out", str(out),
                          "--angle-jitter", "0", "--wide-lens-angle", "0"]) == 0
