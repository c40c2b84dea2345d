"""The audit scripts refuse a folder that is not a dataset with one line and exit status 2, before measuring
anything; until dataset_records.py they raised tracebacks, and an empty annotations.jsonl passed the recount's
--min-accuracy gate as 0/0."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import recount
import shortcuts
from dataset_records import read_records

BAD_FOLDERS = {
    "no folder": (None, "is not a folder"),
    "no annotations": ("", "holds no annotations.jsonl: not a finished dataset"),
    "empty annotations": ("\n\n", "holds no records"),
    "not JSON": ('{"image": "a.png", "answer": 3}\ngarbage\n', "line 2: not JSON"),
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
@pytest.mark.parametrize("script", [recount, shortcuts], ids=["recount", "shortcuts"])
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
