"""Scene files (--scenes): each image's loops and crossings, checked against its record and its pixels."""

import json
import os
import shutil
import time

import numpy as np
import pytest
from PIL import Image
from scipy.spatial import cKDTree

import creation

N, SEED = 4, 5
FLAGS = ["--n", str(N), "--seed", str(SEED), "--quiet", "--workers", "1"]


def run(out, *extra):
    return creation.main([*FLAGS, "--out", str(out), *extra])


def files_under(folder, name):
    return {p.name: p.read_bytes() for p in sorted((folder / name).iterdir())}


def dataset_bytes(folder):
    return {**{name: (folder / name).read_bytes() for name in ("annotations.jsonl", "data.json")},
            **files_under(folder, "images")}


def records(folder):
    return [json.loads(line) for line in (folder / "annotations.jsonl").read_text(encoding="utf-8").splitlines()]


def scene(folder, index):
    return json.loads((folder / creation.scene_name(index, N)).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def with_scenes(tmp_path_factory):
    out = tmp_path_factory.mktemp("with_scenes")
    assert run(out, "--scenes") == 0
    return out


def ink_mask(path):
    """Pixels darker than halfway between paper and ink: a stroke covers more than about half of each."""
    rgb = np.asarray(Image.open(path).convert("RGB")).astype(float).mean(axis=2)
    return rgb < (np.mean(creation.PAPER_RGB) + np.mean(creation.INK_RGB)) / 2


def distance_to_polylines(loops, xy, spacing_px=0.1):
    """Distance from each point of xy (K, 2) to the nearest of the scene's closed polylines, sampled
    every spacing_px or closer along each straight segment, the one back to the first point included."""
    samples = []
    for loop in loops:
        start = np.array(loop["points"])  # (P, 2)
        step = np.roll(start, -1, axis=0) - start
        for t in np.arange(0.0, 1.0, spacing_px / creation.SCENE_MAX_ARC_PX):
            samples.append(start + t * step)
    return cKDTree(np.concatenate(samples)).query(xy)[0]


def test_every_scene_matches_its_record_and_its_ink(with_scenes):
    cfg = creation.Config(n=N, seed=SEED)
    for record in records(with_scenes):
        found = scene(with_scenes, record["index"])
        assert [found[key] for key in ("image", "index", "pixel_sha256")] == \
            [record[key] for key in ("image", "index", "pixel_sha256")]
        assert len(found["loops"]) == record["answer"]
        pairs = [crossing["loops"] for crossing in found["crossings"]]
        assert all(a <= b for a, b in pairs) and all(0 <= a and b < record["answer"] for a, b in pairs)
        assert sum(a != b for a, b in pairs) == record["num_crossings"]
        assert sum(a == b for a, b in pairs) == record["num_self_crossings"]
        for loop in found["loops"]:
            points = np.array(loop["points"])  # (P, 2)
            assert np.array_equal(points, np.round(points, 1))
            assert not np.array_equal(points[0], points[-1])  # closed, the first point not repeated
            steps = np.hypot(*(np.roll(points, -1, axis=0) - points).T)
            assert steps.max() <= creation.SCENE_MAX_ARC_PX
            assert loop["bbox"] == [*points.min(axis=0).tolist(), *points.max(axis=0).tolist()]
        ink = ink_mask(with_scenes / record["image"])
        # The polylines account for all the ink: a pixel more than half covered has its centre within
        # half the stroke width of a centre line (pixel (column c, row r) has its centre at (c + 0.5, r + 0.5));
        # half a pixel more allows for canvas noise and the 0.1 px rounding.
        centres = np.argwhere(ink)[:, ::-1] + 0.5  # (K, 2) x, y
        assert len(centres) > 1000
        assert distance_to_polylines(found["loops"], centres).max() <= cfg.stroke_width / 2 + 0.5
        # ... and lie on it: every point, and every crossing, sits in an inked pixel.
        on = np.array([xy for loop in found["loops"] for xy in loop["points"]] +
                      [crossing["xy"] for crossing in found["crossings"]])
        assert np.all(ink[np.floor(on[:, 1]).astype(int), np.floor(on[:, 0]).astype(int)])


def test_a_long_segment_is_split_and_its_points_kept():
    points = np.array([[0.0, 0.0], [10.0, 0.0], [10.0, 1.0]])
    split = creation.subdivide_closed(points, 3.0)
    steps = np.hypot(*(np.roll(split, -1, axis=0) - split).T)
    assert steps.max() <= 3.0 and len(split) == 4 + 1 + 4
    assert all(any(np.allclose(p, q) for q in split) for p in points)


def test_scenes_change_no_dataset_file(with_scenes, tmp_path):
    assert run(tmp_path) == 0
    assert dataset_bytes(tmp_path) == dataset_bytes(with_scenes)
    assert not (tmp_path / "scenes").exists()


def test_a_rerun_keeps_matching_scenes_and_redraws_the_rest(with_scenes, tmp_path, monkeypatch):
    shutil.copytree(with_scenes, tmp_path, dirs_exist_ok=True)
    scenes = tmp_path / "scenes"
    before = files_under(tmp_path, "scenes")
    kept_inode = os.stat(scenes / "tangled_loops_00000.json").st_ino
    (scenes / "tangled_loops_00001.json").unlink()
    other = scene(tmp_path, 2) | {"pixel_sha256": "0" * 64}  # another image's scene
    (scenes / "tangled_loops_00002.json").write_text(json.dumps(other), encoding="utf-8")
    (scenes / "tangled_loops_00003.json").rename(tmp_path / "elsewhere.json")
    (scenes / "tangled_loops_00003.json").symlink_to(tmp_path / "elsewhere.json")  # never kept, never written through
    drawn, make_sample = [], creation.make_sample
    monkeypatch.setattr(creation, "make_sample", lambda cfg, index: drawn.append(index) or make_sample(cfg, index))
    assert run(tmp_path, "--scenes") == 0
    assert drawn == [1, 2, 3]  # the geometry is drawn again; every image is kept
    assert files_under(tmp_path, "scenes") == before and dataset_bytes(tmp_path) == dataset_bytes(with_scenes)
    assert os.stat(scenes / "tangled_loops_00000.json").st_ino == kept_inode
    assert not (scenes / "tangled_loops_00003.json").is_symlink()
    assert json.loads((tmp_path / "elsewhere.json").read_text(encoding="utf-8"))["index"] == 3


def test_shards_merge_with_scenes_to_one_run(with_scenes, tmp_path, capsys):
    for k in range(2):
        assert run(tmp_path, "--scenes", "--shard", f"{k}/2") == 0
    scene_file = tmp_path / "scenes" / "tangled_loops_00003.json"
    kept = scene_file.read_bytes()
    scene_file.unlink()
    capsys.readouterr()
    assert run(tmp_path, "--merge", "--scenes") == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and error.endswith("first scenes/tangled_loops_00003.json; a generation run with "
                                                "--scenes writes them")
    assert not (tmp_path / "annotations.jsonl").exists()
    scene_file.write_bytes(kept)
    assert run(tmp_path, "--merge", "--scenes") == 0
    assert dataset_bytes(tmp_path) == dataset_bytes(with_scenes)
    assert files_under(tmp_path, "scenes") == files_under(with_scenes, "scenes")
    scene_file.unlink()  # a second merge with --scenes checks them too
    assert run(tmp_path, "--merge", "--scenes") == 2
    assert "first scenes/tangled_loops_00003.json" in capsys.readouterr().err


@pytest.mark.parametrize("scenes_elsewhere", [False, True])
def test_overwrite_removes_only_the_replaced_datasets_scenes(with_scenes, tmp_path, scenes_elsewhere):
    out = tmp_path / "out"
    shutil.copytree(with_scenes, out)
    if scenes_elsewhere:  # a symlinked scenes/: nothing is deleted out of the folder
        shutil.move(out / "scenes", tmp_path / "elsewhere")
        (out / "scenes").symlink_to(tmp_path / "elsewhere")
    scenes = out / "scenes"
    look_alike = scene(out, 0) | {"image": "images/tangled_loops_00099.png", "index": 99}
    (scenes / "tangled_loops_00099.json").write_text(json.dumps(look_alike), encoding="utf-8")
    edited = scene(out, 3) | {"pixel_sha256": "0" * 64}  # names no record's pixels any more
    (scenes / "tangled_loops_00003.json").write_text(json.dumps(edited), encoding="utf-8")
    assert creation.main(["--n", "2", "--seed", str(SEED + 1), "--quiet", "--workers", "1", "--out", str(out),
                          "--overwrite"]) == 0
    left = sorted(p.name for p in scenes.iterdir())
    replaced = ["tangled_loops_00000.json", "tangled_loops_00001.json", "tangled_loops_00002.json"]
    kept = ["tangled_loops_00003.json", "tangled_loops_00099.json"]
    assert left == sorted(kept + (replaced if scenes_elsewhere else []))


def write_forever(tmp):
    tmp.write_bytes(b'{"image": ')
    time.sleep(60)


def test_a_stopped_run_leaves_no_scene_temporary(tmp_path, monkeypatch):
    """The pool kills a worker mid-write when the run stops; the parent then removes its half-written scene."""
    cfg = creation.Config(n=N, seed=SEED)
    scenes = tmp_path / "scenes"
    make_sample, write_atomic = creation.make_sample, creation.write_atomic

    def stopping_sample(cfg, index):  # forked workers inherit these patches
        if index == 0:
            while not any((tmp_path / creation.STATE_DIR / "tmp").rglob("*.json")):  # sample 1's scene mid-write
                time.sleep(0.01)
            raise RuntimeError("stop")
        return make_sample(cfg, index)

    def scene_forever(path, write, out_dir, *rest):
        write_atomic(path, write_forever if path.parent.name == "scenes" else write, out_dir, *rest)

    monkeypatch.setattr(creation, "make_sample", stopping_sample)
    monkeypatch.setattr(creation, "write_atomic", scene_forever)
    with pytest.raises(RuntimeError, match="stop"):
        creation.generate_dataset(cfg, tmp_path, workers=2, quiet=True, scenes=True)
    assert list(scenes.iterdir()) == [] and not (tmp_path / creation.STATE_DIR / "tmp").exists()


def test_help_names_scenes_among_the_extra_outputs(capsys):
    with pytest.raises(SystemExit):
        creation.main(["--help"])
    text = capsys.readouterr().out
    group = text[text.index("extra outputs (outside images/, never part of the dataset files):"):]
    assert "--scenes" in group[:group.index("sharding")]
