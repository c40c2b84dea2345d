"""Tests for export.py: the Hub folder loads with `datasets` offline from anywhere, the TSV reads back, and
bad input is refused in one line without leaving anything half-written.

datasets and PyYAML come from tests/requirements.txt and are imported without importorskip, so a CI
without them fails here instead of skipping the only check that the Hub folder really loads.
"""

import base64
import csv
import hashlib
import io
import json
import os
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from PIL import Image

import creation
import export

REPO_ROOT = Path(__file__).resolve().parents[1]


def pixel_sha256(image: Image.Image) -> str:
    return hashlib.sha256(image.convert("RGB").tobytes()).hexdigest()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    # --size 384 cannot fit the default radii, so the default canvas: 7 images take about a second.
    d = tmp_path_factory.mktemp("dataset") / "loops"
    assert creation.main(["--n", "7", "--seed", "3", "--out", str(d), "--quiet", "--workers", "1"]) == 0
    return d


@pytest.fixture(scope="module")
def records(dataset) -> list[dict]:
    return [json.loads(line) for line in (dataset / "annotations.jsonl").read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def hub(dataset, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("hub") / "hub_loops"
    assert export.main(["--export-hub", str(out), "--dataset", str(dataset), "--quiet"]) == 0
    return out


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """No network: the offline switch `datasets` reads at import (and after), a private cache, no sockets."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    import datasets

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)

    def refuse(*args, **kwargs):
        raise OSError("the test tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return datasets, tmp_path / "hf_cache"


def card_metadata(card_path: Path) -> dict:
    import yaml

    text = card_path.read_text(encoding="utf-8")
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n")[1])


def assert_rows_match(ds, records):
    from datasets import Image as ImageFeature

    assert list(ds.features) == list(records[0])
    assert ds.num_rows == len(records)
    for row, record in zip(ds, records):
        assert pixel_sha256(row["image"]) == record["pixel_sha256"]
        assert {name: row[name] for name in record if name != "image"} == {
            name: value for name, value in record.items() if name != "image"}
    paths = ds.cast_column("image", ImageFeature(decode=False))["image"]
    assert [path["path"] for path in paths] == [record["image"] for record in records]


# ---------------------------------------------------------------------------
# The Hub folder


def test_hub_export_loads_offline_from_another_folder(hub, records, offline):
    datasets, cache = offline
    ds = datasets.load_dataset(str(hub), split="test", cache_dir=str(cache))
    assert_rows_match(ds, records)
    assert ds.features["image"] == datasets.Image()
    assert ds.features["min_crossing_angle_deg"] == datasets.Value("float64")


def test_parquet_files_decode_images_without_the_card(hub, records, offline):
    datasets, cache = offline
    files = sorted(str(path) for path in (hub / "data").glob("*.parquet"))
    ds = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=str(cache))
    assert_rows_match(ds, records)


def test_many_shards_load_in_record_order(dataset, records, tmp_path, monkeypatch, offline):
    datasets, cache = offline
    import pyarrow.parquet as pq

    monkeypatch.setattr(export, "SHARD_BYTES", 1_200_000)  # two images per file
    monkeypatch.setattr(export, "ROW_GROUP_ROWS", 2)  # so each full file also ends a row group
    out = tmp_path / "sharded"
    assert export.main(["--export-hub", str(out), "--dataset", str(dataset), "--quiet"]) == 0
    names = sorted(path.name for path in (out / "data").iterdir())
    assert names == [f"test-{k:05d}-of-{len(names):05d}.parquet" for k in range(len(names))] and len(names) > 2
    for name in names:
        metadata = pq.ParquetFile(out / "data" / name).metadata
        assert all(metadata.row_group(g).num_rows > 0 for g in range(metadata.num_row_groups)), name
    assert_rows_match(datasets.load_dataset(str(out), split="test", cache_dir=str(cache)), records)


def test_card_yaml_names_the_config_and_every_field(hub, records, dataset):
    meta = card_metadata(hub / "README.md")
    assert meta["configs"] == [{"config_name": "default",
                                "data_files": [{"split": "test", "path": "data/test-*.parquet"}]}]
    assert [f["name"] for f in meta["dataset_info"]["features"]] == list(records[0])
    assert meta["dataset_info"]["features"][0] == {"name": "image", "dtype": "image"}
    assert meta["dataset_info"]["splits"][0]["num_examples"] == len(records)
    assert meta["license"] == "cc-by-4.0"
    assert meta["size_categories"] == ["n<1K"]
    assert meta["task_categories"] and meta["tags"]


def test_card_says_question_command_histogram_and_how_to_evaluate(hub, dataset):
    card = (hub / "README.md").read_text(encoding="utf-8")
    document = json.loads((dataset / "data.json").read_text(encoding="utf-8"))
    assert document["question"] in card
    assert document["command"] in card
    assert f"version {document['generator_version']}" in card and "run seed 3, `budgeted` mode" in card
    for count, images in document["answer_histogram"].items():
        assert f"| {count} | {images} |" in card
    assert "## Shortcut audit" in card
    assert "python creation.py --evaluate predictions.jsonl --dataset" in card


def test_card_shows_the_audit_figures_of_its_mode(dataset, tmp_path, monkeypatch):
    figures = dict(export.AUDIT_FIGURES["budgeted"], images=300, measured_on=None, chance_exact=0.143,
                   chance_within_one=None, combined_exact=0.85)  # measured on the same settings as before
    monkeypatch.setitem(export.AUDIT_FIGURES, "budgeted", figures)
    out = tmp_path / "hub"
    assert export.main(["--export-hub", str(out), "--dataset", str(dataset), "--quiet"]) == 0
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "| chance | 14 % | not measured yet |" in card
    assert "| model over all statistics | 85 % |" in card and "Measured on 300 images." in card


def test_a_card_of_the_default_settings_quotes_the_measured_figures(hub):
    """The fixture's seed and n differ from the audited run's, its settings do not: the figures describe it."""
    figures = export.AUDIT_FIGURES["budgeted"]
    card = (hub / "README.md").read_text(encoding="utf-8")
    assert (f"| chance | {export.percent(figures['chance_exact'])} | "
            f"{export.percent(figures['chance_within_one'])} |") in card
    assert f"Measured on {figures['images']} images" in card


def few_loops_dataset(dataset: Path, tmp_path: Path) -> Path:
    d = tmp_path / "few_loops"
    assert creation.main(["--n", "4", "--min-loops", "3", "--max-loops", "6", "--out", str(d), "--quiet",
                          "--workers", "1"]) == 0
    return d


def older_generator_copy(dataset: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "older"
    shutil.copytree(dataset, copy)
    document = json.loads((copy / "data.json").read_text(encoding="utf-8"))
    document["generator_version"] = "2.2.0"  # the same flags, another generator's pixels
    (copy / "data.json").write_text(json.dumps(document), encoding="utf-8")
    return copy


@pytest.mark.parametrize("make", [few_loops_dataset, older_generator_copy], ids=lambda f: f.__name__)
def test_a_card_of_other_settings_says_the_audit_does_not_describe_it(make, dataset, tmp_path):
    """A reviewer's --min-loops 3 --max-loops 6 export said "chance 14 %"; its chance is 25 %."""
    source = make(dataset, tmp_path)
    out = tmp_path / "hub"
    assert export.main(["--export-hub", str(out), "--dataset", str(source), "--quiet"]) == 0
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "## Shortcut audit" in card and "| chance |" not in card and "Measured on" not in card
    assert "do not describe this dataset" in card and "`python tests/shortcuts.py DIR`" in card


def test_the_hub_folder_can_be_graded_with_evaluate(hub, dataset, records, tmp_path, capsys):
    """annotations.jsonl travels with the export, so --evaluate --dataset works on a Hub download."""
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text("".join(json.dumps({"index": r["index"], "response": f"Answer: {r['answer']}"}) + "\n"
                                   for r in records), encoding="utf-8")
    assert (hub / "annotations.jsonl").read_bytes() == (dataset / "annotations.jsonl").read_bytes()
    assert creation.main(["--evaluate", str(predictions), "--dataset", str(hub), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] == 1.0


@pytest.mark.parametrize("swap", ["exchange", "two renames"])
def test_reexport_replaces_an_earlier_export_with_identical_bytes(dataset, hub, tmp_path, monkeypatch, swap):
    if swap == "two renames":  # where renameat2 is missing (macOS, old C libraries)
        monkeypatch.setattr(export, "exchange_paths", lambda first, second: False)
    out = tmp_path / "again"
    shutil.copytree(hub, out)
    (out / "data" / "test-00000-of-00009.parquet").write_bytes(b"stale shard of an earlier, larger export")
    marker = json.loads((out / export.MARKER_FILE).read_text())
    marker["files"].append("data/test-00000-of-00009.parquet")
    (out / export.MARKER_FILE).write_text(json.dumps(marker))
    assert export.main(["--export-hub", str(out), "--dataset", str(dataset), "--quiet"]) == 0
    assert tree(out) == tree(hub)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again"]  # no staging folder left behind


def tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------------------
# The VLMEvalKit TSV


def test_tsv_reads_back_with_the_original_png_bytes(dataset, records, tmp_path):
    out = tmp_path / "TangledLoops.tsv"
    assert creation.main(["--export-vlmevalkit", str(out), "--dataset", str(dataset), "--quiet"]) == 0
    csv.field_size_limit(sys.maxsize)  # a base64 PNG is far above csv's 128 KiB default; pandas has no limit
    with open(out, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t"))
    assert rows[0] == ["index", "image", "question", "answer", "num_loops"]
    assert len(rows) == len(records) + 1
    for row, record in zip(rows[1:], records):
        png = base64.b64decode(row[1], validate=True)
        assert png == (dataset / record["image"]).read_bytes()
        with Image.open(io.BytesIO(png)) as image:
            assert pixel_sha256(image) == record["pixel_sha256"]
        assert row[0] == str(record["index"]) and row[2] == record["question"]
        assert row[3] == str(record["answer"]) and row[4] == str(record["num_loops"])


def test_tsv_reads_as_vlmevalkit_reads_it(dataset, records, tmp_path):
    """VLMEvalKit loads a benchmark with pandas.read_csv(sep="\\t") and decodes `image` with b64decode."""
    import pandas as pd

    out = tmp_path / "TangledLoops.tsv"
    assert export.main(["--export-vlmevalkit", str(out), "--dataset", str(dataset), "--quiet"]) == 0
    table = pd.read_csv(out, sep="\t")
    assert list(table.columns) == list(export.TSV_COLUMNS)
    assert table["index"].tolist() == [r["index"] for r in records]
    assert table["answer"].tolist() == [r["answer"] for r in records]
    assert table["question"].tolist() == [r["question"] for r in records]
    with Image.open(io.BytesIO(base64.b64decode(table["image"][0]))) as image:
        assert pixel_sha256(image) == records[0]["pixel_sha256"]


def test_tsv_replaces_an_earlier_tsv_but_not_another_file(dataset, tmp_path, capsys):
    out = tmp_path / "TangledLoops.tsv"
    out.write_text(export.TSV_HEADER + "\n0\tstale\tq\t5\t5\n", encoding="utf-8")
    assert export.main(["--export-vlmevalkit", str(out), "--dataset", str(dataset), "--quiet"]) == 0
    assert out.read_text(encoding="utf-8").count("\n") == 8
    other = tmp_path / "notes.tsv"
    other.write_text("my\tnotes\n", encoding="utf-8")
    err = run_refused(["--export-vlmevalkit", str(other), "--dataset", str(dataset)], capsys)
    assert "not an earlier export" in err
    assert other.read_text(encoding="utf-8") == "my\tnotes\n"


# ---------------------------------------------------------------------------
# Bad input: one line, exit status 2, nothing written


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def run_refused(argv, capsys) -> str:
    assert export.main(argv + ["--quiet"]) == 2
    return one_line_error(capsys)


def test_a_foreign_folder_is_refused_and_left_as_it_was(dataset, tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("keep me")
    err = run_refused(["--export-hub", str(out), "--dataset", str(dataset)], capsys)
    assert "not an earlier export" in err
    assert tree(out) == {"thesis.tex": b"keep me"}


def test_an_earlier_export_with_a_file_of_its_own_is_refused(hub, dataset, tmp_path, capsys):
    out = tmp_path / "cloned"
    shutil.copytree(hub, out)
    (out / ".git").mkdir()
    (out / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    before = tree(out)
    run_refused(["--export-hub", str(out), "--dataset", str(dataset)], capsys)
    assert tree(out) == before


def broken_copy(dataset: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "broken"
    shutil.copytree(dataset, copy)
    return copy


def bomb_png(side: int) -> bytes:
    """A PNG header claiming side x side pixels over a few bytes of data."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    header = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 1000)) + chunk(b"IEND", b"")


def remove_annotations(d: Path) -> str:
    (d / "annotations.jsonl").unlink()
    return "annotations.jsonl"


def remove_data_json(d: Path) -> str:
    (d / "data.json").unlink()
    return "data.json"


def remove_an_image(d: Path) -> str:
    (d / "images" / "tangled_loops_00004.png").unlink()
    return "tangled_loops_00004.png is missing"


def swap_two_images(d: Path) -> str:
    first, second = d / "images" / "tangled_loops_00002.png", d / "images" / "tangled_loops_00003.png"
    a, b = first.read_bytes(), second.read_bytes()
    first.write_bytes(b)
    second.write_bytes(a)
    return "tangled_loops_00002.png is not the image its record describes"


def cut_annotations(d: Path) -> str:
    path = d / "annotations.jsonl"
    path.write_bytes(path.read_bytes()[:-40])
    return "line 7"


def annotations_of_another_run(d: Path) -> str:
    path = d / "annotations.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    record = json.loads(lines[1])
    record["answer"] = record["num_loops"] = 9
    lines[1] = json.dumps(record) + "\n"
    path.write_text("".join(lines), encoding="utf-8")
    return "record 2 differs from"


def fifo_at_an_image(d: Path) -> str:
    path = d / "images" / "tangled_loops_00001.png"
    path.unlink()
    os.mkfifo(path)
    return "tangled_loops_00001.png is not a regular file"


def fifo_at_annotations(d: Path) -> str:
    path = d / "annotations.jsonl"
    path.unlink()
    os.mkfifo(path)
    return "annotations.jsonl is not a regular file"


def decompression_bomb(d: Path) -> str:
    (d / "images" / "tangled_loops_00000.png").write_bytes(bomb_png(100_000))  # Pillow's hard limit
    return "tangled_loops_00000.png claims far more pixels than its record's 1024 x 1024"


def decompression_bomb_below_pillows_limit(d: Path) -> str:
    (d / "images" / "tangled_loops_00000.png").write_bytes(bomb_png(10_000))  # only Pillow's warning
    return "tangled_loops_00000.png claims far more pixels than its record's 1024 x 1024"


def png_of_another_size(d: Path) -> str:
    (d / "images" / "tangled_loops_00000.png").write_bytes(bomb_png(5_000))  # no Pillow warning at all
    return "tangled_loops_00000.png is 5000 x 5000 px, its record says 1024 x 1024"


def not_a_png(d: Path) -> str:
    (d / "images" / "tangled_loops_00000.png").write_bytes(b"GIF89a" + bytes(100))
    return "images/tangled_loops_00000.png is not a readable image of this dataset"


def symlink_out_of_the_folder(d: Path) -> str:
    image = d / "images" / "tangled_loops_00005.png"
    outside = d.parent / "outside.png"
    shutil.copy(image, outside)  # the same pixels: only where it lives is wrong
    image.unlink()
    image.symlink_to(outside)
    return "points outside the dataset folder"


def image_path_climbing_out(d: Path) -> str:
    for name in ("annotations.jsonl", "data.json"):
        path = d / name
        path.write_text(path.read_text(encoding="utf-8").replace(
            "images/tangled_loops_00006.png", "../loops/images/tangled_loops_00006.png"), encoding="utf-8")
    return "is not a relative path inside the dataset folder"


DAMAGES = [remove_annotations, remove_data_json, remove_an_image, swap_two_images, cut_annotations,
           annotations_of_another_run, decompression_bomb, decompression_bomb_below_pillows_limit,
           png_of_another_size, not_a_png, symlink_out_of_the_folder,
           image_path_climbing_out]
if hasattr(os, "mkfifo"):
    DAMAGES += [fifo_at_an_image, fifo_at_annotations]


def folder_at_an_image(d: Path) -> str:
    path = d / "images" / "tangled_loops_00002.png"
    path.unlink()
    path.mkdir()
    return "tangled_loops_00002.png is not a regular file"


def folder_at_data_json(d: Path) -> str:
    (d / "data.json").unlink()
    (d / "data.json").mkdir()
    return "data.json is not a regular file"


DAMAGES += [folder_at_an_image, folder_at_data_json]  # a folder opens read-only, unlike a FIFO it needs no flag


@pytest.fixture
def alarm():
    """Fail instead of hanging if reading a FIFO ever blocks."""
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def timeout(signum, frame):
        raise TimeoutError("export blocked")

    previous = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("damage", DAMAGES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("command", ["--export-hub", "--export-vlmevalkit"])
def test_a_damaged_dataset_is_refused_naming_the_bad_file(damage, command, dataset, tmp_path, capsys, alarm):
    broken = broken_copy(dataset, tmp_path)
    expected = damage(broken)
    target = tmp_path / "exports" / ("hub" if command == "--export-hub" else "loops.tsv")
    target.parent.mkdir()
    err = run_refused([command, str(target), "--dataset", str(broken)], capsys)
    assert expected in err
    assert list(target.parent.iterdir()) == []  # neither the export nor a staging leftover


@pytest.mark.parametrize("command", ["--export-hub", "--export-vlmevalkit"])
def test_a_junk_image_gets_one_line_naming_it_and_the_rerun_that_redraws_it(command, dataset, tmp_path, capsys):
    """Junk bytes at an image printed a half-drawn bar, then Pillow's `cannot identify image file <_io.BytesIO ...>`."""
    broken = broken_copy(dataset, tmp_path)
    (broken / "images" / "tangled_loops_00003.png").write_bytes(bytes(range(256)) * 12)
    target = tmp_path / "exports" / ("hub" if command == "--export-hub" else "loops.tsv")
    target.parent.mkdir()
    assert export.main([command, str(target), "--dataset", str(broken)]) == 2  # with the progress bar
    err = capsys.readouterr().err
    line = err.split("\r")[-1]  # what the terminal shows once the bar has been erased
    assert err.count("\n") == 1 and line.startswith(
        "export.py: error: images/tangled_loops_00003.png is not a readable image of this dataset"), err
    assert "BytesIO" not in line
    assert list(target.parent.iterdir()) == []  # neither the export nor a staging leftover
    rerun = shlex.split(line.split(" to redraw it: ")[1])
    assert rerun[:2] == ["python", "creation.py"]
    assert creation.main(rerun[2:] + ["--quiet", "--workers", "1"]) == 0  # the advice works
    assert export.main([command, str(target), "--dataset", str(broken), "--quiet"]) == 0


def test_a_failure_while_replacing_keeps_the_earlier_export(hub, dataset, tmp_path, monkeypatch):
    out = tmp_path / "kept"
    shutil.copytree(hub, out)
    before = tree(out)

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(export, "render_card", interrupted)
    assert export.main(["--export-hub", str(out), "--dataset", str(dataset), "--quiet"]) == 130
    assert tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"]


# ---------------------------------------------------------------------------
# The command line


def test_creation_forwards_both_flags_and_names_itself(dataset, tmp_path, capsys):
    assert creation.main(["--export-hub", str(tmp_path / "h"), "--dataset", str(dataset), "--n", "5"]) == 2
    err = one_line_error(capsys)
    assert err.startswith("creation.py: error:") and "--n" in err
    assert creation.main([f"--export-vlmevalkit={tmp_path / 'x.tsv'}", "--dataset", str(dataset), "--quiet"]) == 0
    assert (tmp_path / "x.tsv").is_file()
    # Abbreviated, as export.py itself and creation.py's --eval accept.
    assert creation.main(["--export-vlm", str(tmp_path / "y.tsv"), "--dataset", str(dataset), "--quiet"]) == 0
    assert (tmp_path / "y.tsv").read_bytes() == (tmp_path / "x.tsv").read_bytes()


def test_export_needs_exactly_one_target(dataset, capsys):
    assert export.main(["--dataset", str(dataset)]) == 2
    one_line_error(capsys)


def test_importing_export_loads_no_heavy_dependency():
    code = ("import sys, export; "
            "heavy = {'pyarrow', 'datasets', 'scipy', 'tqdm', 'creation'} & set(sys.modules); "
            "sys.exit(sorted(heavy) or 0)")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


KILLED_EXPORT = """
import os, signal, sys
sys.path.insert(0, {root!r})
import export
export.write_marker = lambda *args: os.kill(os.getpid(), signal.SIGKILL)  # dies with the folder staged
export.main(["--export-{kind}", {out!r}, "--dataset", {dataset!r}, "--quiet"])
"""


@pytest.mark.parametrize("kind, name", [("hub", "hub_loops"), ("vlmevalkit", "loops.tsv")])
def test_an_export_killed_outright_leaves_nothing_once_run_again(dataset, tmp_path, kind, name):
    out = tmp_path / name
    if kind == "vlmevalkit":  # the TSV has no marker: die as its rows are written
        script = KILLED_EXPORT.replace("export.write_marker =", "export.tsv_rows =")
    else:
        script = KILLED_EXPORT
    killed = subprocess.run([sys.executable, "-c", script.format(root=str(REPO_ROOT), kind=kind, out=str(out),
                                                                  dataset=str(dataset))], timeout=120)
    assert killed.returncode == -signal.SIGKILL
    assert [p.name for p in tmp_path.iterdir()], "the killed export left its staging behind"
    assert export.main([f"--export-{kind}", str(out), "--dataset", str(dataset), "--quiet"]) == 0
    assert [p.name for p in tmp_path.iterdir()] == [name]


@pytest.mark.parametrize("kind, name", [("hub", "hub_loops"), ("vlmevalkit", "loops.tsv")])
def test_an_export_stopped_by_sigterm_says_so_and_leaves_nothing(dataset, tmp_path, kind, name):
    script = KILLED_EXPORT.replace("signal.SIGKILL", "signal.SIGTERM").replace(
        "export.main(", "sys.exit(export.main(").rstrip() + ")\n"
    if kind == "vlmevalkit":
        script = script.replace("export.write_marker =", "export.tsv_rows =")
    out = tmp_path / "exports" / name
    out.parent.mkdir()
    stopped = subprocess.run([sys.executable, "-c", script.format(root=str(REPO_ROOT), kind=kind, out=str(out),
                                                                   dataset=str(dataset))],
                             capture_output=True, text=True, timeout=120)
    assert stopped.returncode == 143, stopped.stderr
    assert stopped.stderr == f"export.py: terminated; {out} is as it was\n"
    assert list(out.parent.iterdir()) == []


def test_an_export_leaves_a_live_exports_staging_alone(dataset, tmp_path):
    import fcntl
    out = tmp_path / "hub_loops"
    staged = tmp_path / ".hub_loops.export-live"
    staged.mkdir()
    lock = tmp_path / ".hub_loops.export-live.lock"
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as the other export holds it while it runs
        assert export.main(["--export-hub", str(out), "--dataset", str(dataset), "--quiet"]) == 0
        assert staged.is_dir() and lock.exists()


def test_an_export_leaves_lookalike_files_that_are_not_its_staging(dataset, tmp_path):
    out = tmp_path / "hub_loops"
    notes, notes_lock = tmp_path / ".hub_loops.notes", tmp_path / ".hub_loops.notes.lock"
    wrong_type, wrong_type_lock = tmp_path / ".hub_loops.export-x", tmp_path / ".hub_loops.export-x.lock"
    for path in (notes, notes_lock, wrong_type, wrong_type_lock):
        path.write_text("mine")  # an export's staging is a folder, so this file is not one
    os.mkfifo(tmp_path / ".hub_loops.export-y.lock")
    assert export.main(["--export-hub", str(out), "--dataset", str(dataset), "--quiet"]) == 0
    assert all(path.read_text() == "mine" for path in (notes, notes_lock, wrong_type, wrong_type_lock))


@pytest.mark.parametrize("command, shown", [
    ("python creation.py --n 7 --seed 3", "python creation.py --n 7 --seed 3 --out "),
    ("python creation.py --n 7; rm -rf ~", None),  # a hand-edited data.json: its command is not offered
    ("make dataset", None),
])
def test_the_redraw_advice_offers_only_a_plain_generator_command_and_names_the_version(command, shown, dataset,
                                                                                        tmp_path, capsys):
    broken = broken_copy(dataset, tmp_path)
    document = json.loads((broken / "data.json").read_text(encoding="utf-8"))
    document.update(command=command, generator_version="2.2.0")  # made by another generator: say which
    (broken / "data.json").write_text(json.dumps(document), encoding="utf-8")
    (broken / "images" / "tangled_loops_00002.png").unlink()  # a missing image is redrawn by a rerun too
    err = run_refused(["--export-vlmevalkit", str(tmp_path / "loops.tsv"), "--dataset", str(broken)], capsys)
    assert "tangled_loops_00002.png is missing; rerun the command that made the dataset (generator 2.2.0)" in err
    assert (shown in err) if shown else (" to redraw it\n" in err and "rm -rf" not in err)
