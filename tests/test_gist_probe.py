"""The gist probe can see what a thumbnail shows, stays at chance when there is nothing to see, and gates.

The fixtures are small synthetic datasets of 1-3 separate rings, whose count a thumbnail shows plainly,
so the probe must learn it; with the images' labels drawn at random it must not.
"""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gist_probe  # noqa: E402

PROBE = Path(__file__).resolve().parent / "gist_probe.py"
SIDE_PX = 128


def draw_rings(count: int, rng: np.random.Generator) -> Image.Image:
    """`count` rings of random size in separate columns of a white square, so none overlap."""
    image = Image.new("L", (SIDE_PX, SIDE_PX), 255)
    draw = ImageDraw.Draw(image)
    column_px = SIDE_PX // 3
    for column in rng.choice(3, count, replace=False):
        radius = rng.uniform(8, column_px / 2 - 3)
        x = column * column_px + column_px / 2
        y = rng.uniform(radius + 2, SIDE_PX - radius - 2)
        draw.ellipse([x - radius, y - radius, x + radius, y + radius], outline=0, width=3)
    return image


def write_dataset(folder: Path, images: int, seed: int, random_labels: bool = False) -> Path:
    rng = np.random.default_rng(seed)
    (folder / "images").mkdir(parents=True)
    with open(folder / "annotations.jsonl", "w") as lines:
        for index in range(images):
            count = index % 3 + 1
            name = f"images/{index:04d}.png"
            draw_rings(count, rng).save(folder / name)
            answer = int(rng.integers(1, 4)) if random_labels else count
            lines.write(json.dumps({"image": name, "answer": answer}) + "\n")
    return folder


@pytest.fixture(scope="module")
def rings(tmp_path_factory):
    root = tmp_path_factory.mktemp("rings")
    return write_dataset(root / "train", 360, seed=1), write_dataset(root / "test", 120, seed=2)


def run_probe(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(PROBE), *args], capture_output=True, text=True)


@pytest.mark.slow
def test_the_probe_reads_a_count_a_thumbnail_shows_its_control_does_not_and_the_gate_fails_it(rings, tmp_path):
    train, test = rings
    report_path = tmp_path / "probe.json"
    result = run_probe(str(train), str(test), "--sizes", "32", "--runs", "1", "--max-epochs", "25",
                       "--workers", "2", "--json", str(report_path), "--max-exact", "0.4")
    assert result.returncode == 1, result.stderr
    assert "gate: 32 px:" in result.stderr and "exact > 40.0%" in result.stderr
    entry = json.loads(report_path.read_text())["sizes"]["32"]
    cnn, control = entry["cnn"]["summary"]["exact"]["mean"], entry["control"]["summary"]["exact"]["mean"]
    assert cnn >= 0.6
    # With three classes and 360 images a shuffled-label network still finds some chance structure,
    # so the control is checked against the CNN rather than against 1/3.
    assert control <= cnn - 0.3
    assert np.sum(entry["cnn"]["runs"][0]["confusion"]) == 120


@pytest.mark.slow
def test_the_probe_stays_near_chance_when_labels_say_nothing_about_the_image(tmp_path):
    train = write_dataset(tmp_path / "train", 360, seed=3, random_labels=True)
    test = write_dataset(tmp_path / "test", 120, seed=4, random_labels=True)
    report_path = tmp_path / "probe.json"
    result = run_probe(str(train), str(test), "--sizes", "32", "--runs", "1", "--max-epochs", "25",
                       "--control-runs", "0", "--workers", "2", "--json", str(report_path))
    assert result.returncode == 0, result.stderr
    assert json.loads(report_path.read_text())["sizes"]["32"]["cnn"]["summary"]["exact"]["mean"] <= 0.5


def test_thumbnails_are_ink_box_filtered_to_the_size(tmp_path):
    image = Image.new("L", (128, 128), 255)
    image.paste(0, (0, 0, 64, 128))  # left half black
    image.save(tmp_path / "half.png")
    (thumb,) = gist_probe.load_thumbnails(tmp_path / "half.png", (32,))
    assert thumb.shape == (32, 32) and thumb.dtype == np.float32
    assert np.allclose(thumb[:, :16], 1.0) and np.allclose(thumb[:, 16:], 0.0)


def test_the_eight_symmetries_are_distinct_and_keep_the_pixels():
    torch = pytest.importorskip("torch")
    batch = torch.arange(16.0).reshape(1, 1, 4, 4)
    images = [gist_probe.dihedral(batch, k) for k in range(8)]
    assert len({tuple(image.flatten().tolist()) for image in images}) == 8
    assert all(sorted(image.flatten().tolist()) == list(range(16)) for image in images)


def test_predictions_in_batches_match_one_image_at_a_time(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(gist_probe, "EVAL_BATCH", 4)
    torch.manual_seed(0)
    network = gist_probe.build_network(7)
    network(torch.zeros(4, 1, 32, 32))  # one training-mode pass moves the batch-norm statistics off their start
    x = np.random.default_rng(0).random((gist_probe.EVAL_BATCH + 3, 32, 32), dtype=np.float32)
    alone = np.concatenate([gist_probe.predict(network, x[i:i + 1]) for i in range(len(x))])
    assert np.array_equal(gist_probe.predict(network, x), alone)


def test_the_holdout_takes_a_share_of_every_count():
    labels = np.repeat([5, 6, 7], [50, 30, 2])
    held = gist_probe.stratified_holdout(labels, 0.1, np.random.default_rng(0))
    assert [int(held[labels == n].sum()) for n in (5, 6, 7)] == [5, 3, 1]


def test_scores_and_confusion_count_each_test_image_once():
    truth = np.array([5, 5, 6, 7])
    scored = gist_probe.score_predictions(np.array([5, 6, 6, 5]), truth, np.array([5, 6, 7]))
    assert scored["exact"] == 0.5 and scored["within_one"] == 0.75 and scored["mae"] == 0.75
    assert scored["per_n"] == {"5": 0.5, "6": 1.0, "7": 0.0}
    assert scored["confusion"] == [[1, 1, 0], [0, 1, 0], [1, 0, 0]]


@pytest.mark.parametrize("flags", [["--sizes", "16"], ["--runs", "0"], ["--train-limit", "5"], ["--seed", "-1"], ["--control-runs", "-1"]])
def test_bad_flags_are_refused_in_one_line(rings, flags):
    train, test = rings
    result = run_probe(str(train), str(test), *flags)
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and "error:" in result.stderr


def test_a_folder_without_annotations_is_refused_in_one_line(rings, tmp_path):
    train, _ = rings
    result = run_probe(str(train), str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"gist_probe.py: error: {tmp_path} holds no annotations.jsonl: "
                                                  "not a finished dataset (a sharded one has it once merged with "
                                                  "`creation.py --merge`)"]
