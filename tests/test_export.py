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
import scoring

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


def assert_images_decode_to_rgb(ds, records):
    """The committed PNGs are palette images: declared RGB, `datasets` must hand out RGB with the recorded hash."""
    assert all(row["image"].mode == "RGB" for row in ds)
    arrays = ds.with_format("numpy")["image"]
    for array, record in zip(arrays, records):
        assert array.shape == (record["height"], record["width"], 3) and array.dtype.name == "uint8"
        assert hashlib.sha256(array.tobytes()).hexdigest() == record["pixel_sha256"]


def test_hub_export_loads_offline_from_another_folder(hub, records, offline):
    datasets, cache = offline
    ds = datasets.load_dataset(str(hub), split="test", cache_dir=str(cache))
    assert_rows_match(ds, records)
    assert_images_decode_to_rgb(ds, records)
    assert ds.features["image"] == datasets.Image(mode="RGB")
    assert ds.features["min_crossing_angle_deg"] == datasets.Value("float64")
    with Image.open(io.BytesIO(ds.cast_column("image", datasets.Image(decode=False))[0]["image"]["bytes"])) as png:
        assert png.mode == "P"  # the stored bytes are still the generator's own PNG


def test_parquet_files_decode_images_without_the_card(hub, records, offline):
    datasets, cache = offline
    files = sorted(str(path) for path in (hub / "data").glob("*.parquet"))
    ds = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=str(cache))
    assert_rows_match(ds, records)
    assert_images_decode_to_rgb(ds, records)


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
    assert meta["dataset_info"]["features"][0] == {"name": "image", "dtype": {"image": {"mode": "RGB"}}}
    assert meta["dataset_info"]["splits"][0]["num_examples"] == len(records)
    assert meta["license"] == "cc-by-4.0"
    assert meta["size_categories"] == ["n<1K"]
    assert meta["annotations_creators"] == ["machine-generated"] and meta["source_datasets"] == ["original"]
    assert {"visual-question-answering", "image-text-to-text"} <= set(meta["task_categories"]) and meta["tags"]


def test_card_says_question_command_histogram_and_how_to_evaluate(hub, dataset):
    card = (hub / "README.md").read_text(encoding="utf-8")
    document = json.loads((dataset / "data.json").read_text(encoding="utf-8"))
    assert f"```text\n{scoring.evaluation_prompt(document['question'])}\n```" in card  # the prompt, verbatim
    assert document["command"] in card
    assert f"version {document['generator_version']}" in card and "run seed 3, `budgeted` mode" in card
    for count, images in document["answer_histogram"].items():
        assert f"| {count} | {images} |" in card
    assert "## Shortcut audit" in card
    assert "python creation.py --evaluate predictions.jsonl --dataset" in card


def test_card_cites_the_generator_and_states_both_licences(hub):
    import yaml

    card = (hub / "README.md").read_text(encoding="utf-8")
    citation = yaml.safe_load((REPO_ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert citation["cff-version"] == "1.2.0" and citation["license"] == "MIT"
    bibtex = card.split("```bibtex\n")[1].split("```")[0]  # the card's BibTeX says what CITATION.cff says
    assert f"title        = {{{citation['title']}}}," in bibtex
    assert f"author       = {{{{{citation['authors'][0]['name']}}}}}," in bibtex
    assert f"year         = {{{str(citation['date-released'])[:4]}}}," in bibtex
    assert bibtex.count("{") == bibtex.count("}")
    assert (REPO_ROOT / "LICENSE").read_text(encoding="utf-8").startswith("MIT License\n")
    assert "The data (images and annotations) is CC-BY-4.0; the generator's code is MIT" in card
    # No --repo-url: the link is a placeholder that says how to fill it.
    assert export.REPO_URL_PLACEHOLDER in card and "--repo-url URL" in export.REPO_URL_PLACEHOLDER


def test_repo_url_fills_the_cards_link_and_bad_ones_are_refused(dataset, tmp_path, capsys):
    url = "https://github.com/someone/tangled-loops"
    out = tmp_path / "hub"
    assert export.main(["--export-hub", str(out), "--dataset", str(dataset), "--quiet", "--repo-url", url]) == 0
    card = (out / "README.md").read_text(encoding="utf-8")
    assert export.REPO_URL_PLACEHOLDER not in card
    assert f"[the generator's repository]({url})" in card and f"howpublished = {{\\url{{{url}}}}}," in card
    for bad in ("github.com/x", "https://x.org/a b", "https://x.org/}{", "javascript:alert(1)"):
        err = run_refused(["--export-hub", str(tmp_path / "other"), "--dataset", str(dataset), "--repo-url", bad],
                          capsys)
        assert "--repo-url must be an http(s) address" in err
    err = run_refused(["--export-vlmevalkit", str(tmp_path / "x.tsv"), "--dataset", str(dataset),
                       "--repo-url", url], capsys)
    assert "--export-hub only" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hub"]


def test_without_repo_url_the_export_says_how_to_fill_the_link(dataset, tmp_path, capsys):
    assert export.main(["--export-hub", str(tmp_path / "hub"), "--dataset", str(dataset)]) == 0
    assert "export again with --repo-url URL" in capsys.readouterr().err


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
    assert f"**Gist floor**: {scoring.gist_floor_line()}" in card


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
    assert "Gist floor" not in card


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
    stale = b"stale shard of an earlier, larger export"
    (out / "data" / "test-00000-of-00009.parquet").write_bytes(stale)
    marker = json.loads((out / export.MARKER_FILE).read_text())
    marker["files"]["data/test-00000-of-00009.parquet"] = hashlib.sha256(stale).hexdigest()
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
        assert row[0] == str(record["index"]) and row[2] == scoring.evaluation_prompt(record["question"])
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
    assert table["question"].tolist() == [scoring.evaluation_prompt(r["question"]) for r in records]
    with Image.open(io.BytesIO(base64.b64decode(table["image"][0]))) as image:
        assert pixel_sha256(image) == records[0]["pixel_sha256"]


def test_tsv_replaces_an_earlier_tsv_but_not_another_file(dataset, records, tmp_path, capsys):
    out = tmp_path / "TangledLoops.tsv"
    assert export.main(["--export-vlmevalkit", str(out), "--dataset", str(dataset), "--quiet"]) == 0
    first = out.read_bytes()
    few = tmp_path / "few"  # an earlier export of another dataset: replaced
    shutil.copytree(dataset, few)
    keep = (few / "annotations.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)[:3]
    (few / "annotations.jsonl").write_text("".join(keep), encoding="utf-8")
    document = json.loads((few / "data.json").read_text(encoding="utf-8"))
    document.update(num_samples=3, samples=document["samples"][:3],
                    answer_histogram={str(a): [r["answer"] for r in records[:3]].count(a)
                                      for a in {r["answer"] for r in records[:3]}})
    (few / "data.json").write_text(json.dumps(document), encoding="utf-8")
    assert export.main(["--export-vlmevalkit", str(out), "--dataset", str(few), "--quiet"]) == 0
    assert out.read_bytes() != first and out.read_text(encoding="utf-8").startswith(export.TSV_HEADER + "\n")
    assert export.main(["--export-vlmevalkit", str(out), "--dataset", str(dataset), "--quiet"]) == 0
    assert out.read_bytes() == first


@pytest.mark.parametrize("content", [
    "my\tnotes\n",
    export.TSV_HEADER + "\n0\tstale\tq\t5\t5\n",  # the header alone used to pass for an earlier export
    export.TSV_HEADER + "\n",
    None,  # a real export with a line of the user's own after it
])
def test_tsv_never_replaces_a_file_it_did_not_write(content, dataset, tmp_path, capsys):
    other = tmp_path / "notes.tsv"
    if content is None:
        assert export.main(["--export-vlmevalkit", str(other), "--dataset", str(dataset), "--quiet"]) == 0
        content = other.read_text(encoding="utf-8") + "my own row\tkeep me\n"
    other.write_text(content, encoding="utf-8")
    err = run_refused(["--export-vlmevalkit", str(other), "--dataset", str(dataset)], capsys)
    assert "not an earlier export" in err
    assert other.read_text(encoding="utf-8") == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.tsv"]


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


def edit_the_card(out: Path) -> None:
    card = out / "README.md"
    card.write_text(card.read_text(encoding="utf-8").replace("USER/NAME", "me/loops"), encoding="utf-8")


def forge_a_marker(out: Path) -> None:
    """A folder of one's own with a marker listing its files by name: content, not names, decides."""
    shutil.rmtree(out)
    out.mkdir()
    (out / "thesis.tex").write_text("keep me")
    (out / export.MARKER_FILE).write_text(json.dumps({"export": "hub", "files": {"thesis.tex": "0" * 64}}))


def older_marker_listing_names(out: Path) -> None:
    marker = json.loads((out / export.MARKER_FILE).read_text())
    marker["files"] = sorted(marker["files"])
    (out / export.MARKER_FILE).write_text(json.dumps(marker))


def symlink_in_place_of_a_file(out: Path) -> None:
    target = out.parent / "elsewhere.jsonl"
    (out / "annotations.jsonl").rename(target)
    (out / "annotations.jsonl").symlink_to(target)


@pytest.mark.parametrize("change", [edit_the_card, forge_a_marker, older_marker_listing_names,
                                    symlink_in_place_of_a_file], ids=lambda f: f.__name__)
def test_a_reexport_replaces_nothing_it_did_not_write(change, hub, dataset, tmp_path, capsys):
    out = tmp_path / "hub_loops"
    shutil.copytree(hub, out)
    change(out)
    before = tree(out)
    err = run_refused(["--export-hub", str(out), "--dataset", str(dataset)], capsys)
    assert "not an earlier export" in err
    assert tree(out) == before


@pytest.mark.parametrize("command", ["--export-hub", "--export-vlmevalkit"])
def test_a_target_under_a_file_is_refused_in_one_line(command, dataset, tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    err = run_refused([command, str(tmp_path / "notes.txt" / "out"), "--dataset", str(dataset)], capsys)
    assert f"lies under {tmp_path / 'notes.txt'}, which is not a folder" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


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


# Hand edits that ended in tracebacks: the same edit in both files, so only the value itself is wrong.
def edit_both(d: Path, edit) -> None:
    lines = (d / "annotations.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    edit(records[1])
    (d / "annotations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    document = json.loads((d / "data.json").read_text(encoding="utf-8"))
    document["samples"] = records
    (d / "data.json").write_text(json.dumps(document), encoding="utf-8")


def deeply_nested_annotations(d: Path) -> str:
    path = d / "annotations.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[2] = "[" * 100_000 + "]" * 100_000 + "\n"  # past Python's recursion limit
    path.write_text("".join(lines), encoding="utf-8")
    return "annotations.jsonl, line 3: not JSON"


def deeply_nested_data_json(d: Path) -> str:
    path = d / "data.json"
    text = path.read_text(encoding="utf-8")  # within the recursion limit, past what json.dumps survives
    path.write_text(text.replace('"task":', '"deep": ' + "[" * 900 + "]" * 900 + ', "task":', 1), encoding="utf-8")
    return "data.json: nested more than 32 levels deep"


def samples_not_a_list(d: Path) -> str:
    document = json.loads((d / "data.json").read_text(encoding="utf-8"))
    document["samples"] = 5
    (d / "data.json").write_text(json.dumps(document), encoding="utf-8")
    return "data.json: its samples are not a list of the 7 records"


def nul_in_an_image_path(d: Path) -> str:
    edit_both(d, lambda record: record.update(image="images/tangled\0loops_00001.png"))
    return "is not a relative path inside the dataset folder"


def histogram_key_not_a_number(d: Path) -> str:
    document = json.loads((d / "data.json").read_text(encoding="utf-8"))
    document["answer_histogram"]["x"] = 1
    (d / "data.json").write_text(json.dumps(document), encoding="utf-8")
    return "data.json: its answer_histogram does not count the records' answers"


def histogram_of_another_run(d: Path) -> str:
    document = json.loads((d / "data.json").read_text(encoding="utf-8"))
    key = next(iter(document["answer_histogram"]))
    document["answer_histogram"][key] += 1
    (d / "data.json").write_text(json.dumps(document), encoding="utf-8")
    return "data.json: its answer_histogram does not count the records' answers"


def lone_surrogate_in_a_question(d: Path) -> str:
    edit_both(d, lambda record: record.update(question="How many loops? \ud800"))
    return "annotations.jsonl, line 2: holds text that is not valid Unicode"


DAMAGES += [deeply_nested_annotations, deeply_nested_data_json, samples_not_a_list, nul_in_an_image_path,
            histogram_key_not_a_number, histogram_of_another_run, lone_surrogate_in_a_question]


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


@pytest.mark.parametrize("field, value", [("index", 1 << 70), ("min_crossing_angle_deg", 10 ** 400),
                                          ("num_crossings", -(1 << 64))])
def test_a_number_no_parquet_column_holds_is_one_line(field, value, dataset, tmp_path, capsys):
    """2**70 as an index ended in pyarrow's OverflowError, 10**400 as an angle in float()'s."""
    broken = broken_copy(dataset, tmp_path)
    edit_both(broken, lambda record: record.update({field: value}))
    target = tmp_path / "exports" / "hub"
    target.parent.mkdir()
    err = run_refused(["--export-hub", str(target), "--dataset", str(broken)], capsys)
    assert f"record 2: {field} is" in err
    assert list(target.parent.iterdir()) == []


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
    url = "https://example.org/loops"
    assert creation.main(["--export-hub", str(tmp_path / "h"), "--dataset", str(dataset), "--repo-url", url,
                          "--quiet"]) == 0
    assert f"]({url})" in (tmp_path / "h" / "README.md").read_text(encoding="utf-8")


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
