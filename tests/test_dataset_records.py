"""The audit scripts refuse a folder that is not a dataset with one line and exit status 2, before measuring
anything; until dataset_records.py they raised tracebacks, and an empty annotations.jsonl passed the recount's
--min-accuracy gate as 0/0."""

from __future__ import annotations

import json
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import parallel_stretch
import recount
import shortcuts
from dataset_records import read_records

BAD_FOLDERS = {
    "no folder": (None, "is not a folder"),
    "no annotations": ("", "holds no annotations.jsonl: not a finished dataset"),
    "empty annotations": ("\n\n", "holds no records"),
    "not JSON": ('{"image": "a.png", "answer": 3}\ngarbage\n', "line 2: not JSON"),
    "deeply nested": ('{"image": "a.png", "answer": 3}\n' + "[" * 100_000 + "]" * 100_000 + "\n",
                      "line 2: not JSON (nested too deeply)"),
    "a list": ("[1, 2, 3]\n", 'line 1: not a record with a string "image" and an integer "answer"'),
    "answer as text": ('{"image": "a.png", "answer": "3"}\n', 'line 1: not a record with'),
    "missing image": ('{"image": "images/b.png", "answer": 3}\n', "line 1: its image images/b.png is not found from"),
}


def bad_folder(tmp_path: Path, annotations: str | None) -> Path:
    if annotations is None:
        return tmp_path / "absent"
    Image.fromarray(np.full((64, 64), 240, dtype=np.uint8)).save(tmp_path / "a.png")
    if annotations:
        (tmp_path / "annotations.jsonl").write_text(annotations, encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize("case", sorted(BAD_FOLDERS))
@pytest.mark.parametrize("script", [recount, shortcuts, parallel_stretch], ids=["recount", "shortcuts", "parallel_stretch"])
def test_a_folder_that_is_no_dataset_is_refused_in_one_line(tmp_path, capsys, script, case):
    annotations, message = BAD_FOLDERS[case]
    folder = bad_folder(tmp_path, annotations)
    assert script.main([str(folder), "--workers", "1"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{Path(script.__file__).name}: error: "), lines
    assert message in lines[0]


def test_the_shortcut_audit_refuses_fewer_images_than_its_splits_need(tmp_path, capsys):
    folder = bad_folder(tmp_path, "".join(json.dumps({"image": "a.png", "answer": k}) + "\n" for k in (5, 6, 7)))
    assert shortcuts.main([str(folder), "--workers", "1"]) == 2
    assert capsys.readouterr().err.strip().endswith("holds 3 images; the audit needs at least 4")


def test_limit_reads_only_the_first_records(tmp_path):
    folder = bad_folder(tmp_path, '{"image": "a.png", "answer": 3}\ngarbage\n')
    assert read_records(folder, limit=1) == [{"image": "a.png", "answer": 3}]


def damaged_png(path: Path, damage: str) -> None:
    """An image file that cannot be decoded, in one of the ways a file is found damaged."""
    if damage == "not an image":
        path.write_bytes(np.random.default_rng(0).bytes(5000))
    elif damage == "truncated":  # opens, fails in the decode
        Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64), dtype=np.uint8)).save(path)
        path.write_bytes(path.read_bytes()[:2000])
    else:  # a header claiming 40000 x 40000 pixels: Pillow refuses it as a decompression bomb
        Image.fromarray(np.zeros((64, 64), dtype=np.uint8)).save(path)
        data = bytearray(path.read_bytes())
        data[16:24] = (40000).to_bytes(4, "big") * 2  # IHDR width and height
        data[29:33] = zlib.crc32(bytes(data[12:29])).to_bytes(4, "big")
        path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["not an image", "truncated", "huge header"])
@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("script", [recount, shortcuts], ids=["recount", "shortcuts"])
def test_a_damaged_image_is_refused_in_one_line(tmp_path, capsys, script, workers, damage):
    # A worker's decode error must reach the parent as one line naming the file, not as a traceback.
    folder = bad_folder(tmp_path, "".join(json.dumps({"image": name, "answer": k}) + "\n"
                                          for name, k in [("a.png", 5), ("a.png", 5), ("b.png", 6), ("b.png", 6)]))
    damaged_png(folder / "b.png", damage)
    assert script.main([str(folder), "--workers", workers]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("note: ")]
    assert len(lines) == 1 and "b.png: not a readable image" in lines[0], lines


def test_the_shortcut_audit_refuses_images_with_no_count_twice(tmp_path, capsys):
    # Even two stratified folds need some count on both sides.
    folder = bad_folder(tmp_path, "".join(json.dumps({"image": "a.png", "answer": k}) + "\n" for k in range(5, 12)))
    assert shortcuts.main([str(folder), "--workers", "1"]) == 2
    assert "need 2 images of some count; these 7 images hold one of each" in capsys.readouterr().err


class Measured(Exception):
    """Raised in place of measuring the images: the checks before it have passed."""


def test_the_shortcut_audit_measures_images_when_only_some_counts_are_single(tmp_path, monkeypatch):
    monkeypatch.setattr(shortcuts, "compute_all_features", lambda *a: (_ for _ in ()).throw(Measured()))
    answers = [5, 5, 6, 6, 7, 8, 9, 10, 11]  # five counts once: the folds shrink, the audit runs
    folder = bad_folder(tmp_path, "".join(json.dumps({"image": "a.png", "answer": k}) + "\n" for k in answers))
    with pytest.raises(Measured):
        shortcuts.main([str(folder), "--workers", "1"])


@pytest.mark.parametrize("args", [["--seed", "-1"], ["--json", "."], ["--json", "no/such/folder/audit.json"]])
def test_the_shortcut_audit_refuses_bad_flags_before_measuring(tmp_path, args, monkeypatch):
    monkeypatch.setattr(shortcuts, "compute_all_features", lambda *a: pytest.fail("measured before refusing"))
    folder = bad_folder(tmp_path, "".join(json.dumps({"image": "a.png", "answer": k}) + "\n" for k in (5, 5, 6, 6)))
    with pytest.raises(SystemExit) as stop:
        shortcuts.main([str(folder), *args])
    assert stop.value.code == 2


@pytest.mark.parametrize("args", [["--min-accuracy", "nan"], ["--min-accuracy", "2"], ["--overlay-dir", "a.png"],
                                  ["--overlay-dir", "a.png/under"]])
def test_the_recount_refuses_bad_flags(tmp_path, args, monkeypatch):
    monkeypatch.chdir(bad_folder(tmp_path, '{"image": "a.png", "answer": 3}\n'))
    with pytest.raises(SystemExit) as stop:
        recount.main([".", *args])
    assert stop.value.code == 2


def test_the_recount_starts_no_more_workers_than_images(tmp_path, monkeypatch):
    sizes = []

    class CountingPool:
        def __init__(self, size):
            sizes.append(size)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def map(self, function, jobs, chunksize=1):
            return [function(job) for job in jobs]

    monkeypatch.setattr(recount, "Pool", CountingPool)
    folder = bad_folder(tmp_path, '{"image": "a.png", "answer": 3}\n' * 2)
    recount.main([str(folder), "--workers", "99999"])
    assert sizes == [2]


@pytest.mark.parametrize("main, flags, message", [
    (recount.main, ["--workers", "0"], "need --workers >= 1"),
    (recount.main, ["--min-accuracy", "nan"], "--min-accuracy is a fraction"),
    (recount.main, ["--limit", "many"], "argument --limit: invalid int value"),
    (shortcuts.main, ["--seed", "-1"], "--seed must be non-negative"),
    (shortcuts.main, ["--splits", "x"], "argument --splits: invalid int value"),
])
def test_a_bad_flag_is_refused_in_one_line(tmp_path, main, flags, message, capsys):
    with pytest.raises(SystemExit) as stop:
        main([str(tmp_path), *flags])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and message in err[0], err


@pytest.mark.parametrize("script", ["recount.py", "shortcuts.py"])
def test_a_script_run_without_the_test_packages_says_how_to_get_them_in_one_line(tmp_path, script):
    tests = Path(__file__).parent
    code = (f"import runpy, sys; sys.modules['skimage'] = None; sys.path.insert(0, {str(tests)!r}); "
            f"sys.argv = [{script!r}, {str(tmp_path)!r}]; runpy.run_path({str(tests / script)!r}, run_name='__main__')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    err = result.stderr.strip().splitlines()
    assert result.returncode == 1 and len(err) == 1, result.stderr
    assert err[0].startswith(f"{script}: error: needs the module skimage")
    assert err[0].endswith("pip install -r tests/requirements.txt")


def test_the_audit_without_scikit_learn_says_so_before_measuring_anything(tmp_path, monkeypatch, capsys):
    find_spec = shortcuts.importlib.util.find_spec
    monkeypatch.setattr(shortcuts.importlib.util, "find_spec",
                        lambda name: None if name == "sklearn" else find_spec(name))
    monkeypatch.setattr(shortcuts, "read_annotations", lambda *args: pytest.fail("measured before refusing"))
    with pytest.raises(SystemExit) as stop:
        shortcuts.main([str(tmp_path)])
    assert "needs the module sklearn" in str(stop.value.code)
