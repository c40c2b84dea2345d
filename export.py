"""Publish a generated dataset: a Hugging Face Hub folder, or a VLMEvalKit TSV.

creation.py makes the dataset, scoring grades replies, this file repackages a
finished dataset folder for other tools, checking every image against its
record on the way. creation.py forwards both commands here:

    python creation.py --export-hub hub_loops --dataset . --repo-url https://github.com/USER/REPO
    python creation.py --export-vlmevalkit TangledLoops.tsv --dataset .

The Hub folder uploads as it is (`hf upload --repo-type dataset
USER/NAME hub_loops .`) and loads with `datasets.load_dataset("/abs/path/hub_loops",
split="test")` from any working directory (a relative name that is not there is looked
up on the Hub), its images decoded to RGB:

    README.md                          dataset card: YAML configs and features (image: RGB), then the prose
    data/test-00000-of-00001.parquet   one row per record, the image embedded as its original PNG bytes
    annotations.jsonl                  the dataset's records, byte for byte, so --evaluate --dataset works here
    tangled_loops_export.json          marks the folder as an export, with each file's SHA-256 (a re-export
                                       replaces the folder only while every file is as the export wrote it)

The TSV is VLMEvalKit's single-file benchmark format: a header, then one
tab-separated row per image with index, image (the PNG file's bytes in
base64), question (scoring.evaluation_prompt: the record's question and the
answer-format line), answer and num_loops. A re-export replaces only a file
that reads as such a TSV throughout.

Writing the Parquet files needs pyarrow (requirements-export.txt; datasets
brings it); the TSV needs nothing beyond requirements.txt.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import csv
import ctypes
import glob
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import signal
import stat
import sys
import tempfile
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Iterator

from PIL import Image

import scoring  # the evaluation prompt, defined once there (standard library only)

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

# The dataset folder as creation.py writes it (kept here so exporting never imports the generator).
TASK_NAME = "tangled_loops"
ANNOTATIONS_FILE = "annotations.jsonl"
DATA_FILE = "data.json"
REQUIRED_FIELDS = ("image", "width", "height", "num_loops", "question", "answer", "index", "pixel_sha256")

EXPORT_VERSION = 2  # bump when the layout of an export changes (2: RGB image feature, marker with file hashes)
MARKER_FILE = "tangled_loops_export.json"  # its presence and content say "an earlier export: safe to replace"
CARD_FILE = "README.md"
PARQUET_DIR = "data"
SPLIT = "test"  # a benchmark: everything is test data
SHARD_BYTES = 500_000_000  # image bytes per Parquet file, as push_to_hub's default max_shard_size
ROW_GROUP_ROWS = 100  # rows per Parquet row group: the Hub's viewer reads one group at a time
LICENSE = "cc-by-4.0"  # the generated data's licence; the code is MIT (LICENSE in the repository)
CODE_LICENSE = "MIT"
# The citation, as CITATION.cff in the repository states it (tests/test_export.py checks they agree).
CITATION_TITLE = "Tangled closed loops: a counting benchmark"
CITATION_AUTHOR = "The tangled-loops authors"
CITATION_YEAR = 2026
REPO_URL_PLACEHOLDER = "<repository URL: export again with --repo-url URL>"
REPO_URL = re.compile(r"https?://[A-Za-z0-9.-]+(?::[0-9]+)?(?:/[A-Za-z0-9._~/%+-]*)?")  # nothing markdown or BibTeX reads
MAX_IMAGE_BYTES = 64 << 20  # a PNG file larger than this is refused unread (the default canvas is ~0.5 MB)
MAX_IMAGE_PIXELS = 1 << 25  # ~5800 x 5800 (128 MB as RGB): a larger width x height is refused before decoding

TSV_COLUMNS = ("index", "image", "question", "answer", "num_loops")
TSV_HEADER = "\t".join(TSV_COLUMNS)  # also the TSV's mark: a file starting with this line is an earlier export

# The config (data.json's) the budgeted figures were measured on: creation.py's defaults, n and seed aside.
DEFAULT_SETTINGS = {
    "min_loops": 5, "max_loops": 11, "answers": "equal", "original_shapes": False,
    "min_radius": 150.0, "max_radius": 275.0, "min_waypoints": 6, "max_waypoints": 10,
    "angle_jitter": 0.42, "radius_jitter": 0.32, "points_per_loop": 900, "size": 1024,
    "interior_margin": 55.0, "stroke_width": 3.0, "min_gap": 9.0, "parallel_gap": 15.0,
    "max_parallel_run": 40.0, "min_crossing_angle": 30.0, "min_crossing_separation": 12.0,
    "min_same_pair_separation": 30.0, "wide_lens_angle": 50.0, "crossing_cluster_px": 25.0,
    "min_curvature_radius": 8.0, "max_crossing_bend": 0.5, "bend_window": 10.0, "min_curl_px": 60.0,
    "loop_attempts": 400, "sample_restarts": 25,
}
AUDIT_FREE_FIELDS = ("n", "seed")  # another seed or n only draws more images of the distribution the figures describe

# The shortcut audit (tests/shortcuts.py) for each mode, as shown in the card: accuracy of predicting N
# from cheap image statistics on held-out images. None renders as "not measured yet"; fill the numbers in
# from the latest audit (each a fraction in [0, 1], images = the audited set's size, measured_on = the run audited,
# generator_version and settings = what they describe: a card quotes them only for a dataset made alike).
AUDIT_FIGURES = {
    "budgeted": {"images": 500, "measured_on": "generator 3.0.0, --n 500 --seed 0",
                 "generator_version": "3.0.0", "settings": DEFAULT_SETTINGS,
                 "chance_exact": 0.143, "chance_within_one": 0.388,
                 "best_single_exact": 0.148, "best_single_within_one": 0.472,
                 "combined_exact": 0.252, "combined_within_one": 0.6},
    # 3.0.0 draws the same --original-shapes images as 2.8.0 did: the figures carry over.
    "original shapes": {"images": 280, "measured_on": "generator 2.8.0, --original-shapes --n 280 --seed 1",
                        "generator_version": "3.0.0", "settings": {**DEFAULT_SETTINGS, "original_shapes": True},
                        "chance_exact": 0.143, "chance_within_one": 0.388,
                        "best_single_exact": 0.714, "best_single_within_one": 0.993,
                        "combined_exact": 0.807, "combined_within_one": 1.0},
}

# Hub feature type and meaning of each record field of schema 1; a field not listed gets its type from its values.
FIELDS = {
    "image": ("image", "the picture, decoded to an RGB PIL image; with `Image(decode=False)` its PNG bytes and "
                       "its path in the generator's folder"),
    "width": ("int64", "image width, px"),
    "height": ("int64", "image height, px"),
    "num_loops": ("int64", "number of closed loops drawn (the ground truth)"),
    "question": ("string", "the question, the same for every image; the prompt adds one answer-format line"),
    "answer": ("int64", "the correct reply, equal to num_loops"),
    "index": ("int64", "sample index within the run, 0 .. n-1"),
    "seed": ("int64", "the run seed; with index it fixes the sample"),
    "num_crossings": ("int64", "crossings between two different loops"),
    "num_self_crossings": ("int64", "crossings of a loop with itself"),
    "min_crossing_angle_deg": ("float64", "shallowest crossing angle, degrees (null when nothing crosses)"),
    "loop_redraws": ("int64", "candidate loop shapes the sampler threw away before this image was accepted"),
    "pixel_sha256": ("string", "SHA-256 of the decoded RGB pixel bytes (row-major, H x W x 3)"),
}


class ExportError(Exception):
    """Bad input: the message is shown as one line and the program exits with status 2."""


# ---------------------------------------------------------------------------
# Reading the dataset folder without trusting it


def inside(root: Path, relative: str) -> Path:
    """root/relative, refused unless it is a plain relative path that stays inside root once symlinks resolve."""
    parts = PurePosixPath(relative).parts
    if (not relative or PurePosixPath(relative).is_absolute() or ".." in parts or "\\" in relative
            or "\0" in relative):  # a NUL no file name holds, and os.path would raise ValueError on it
        raise ExportError(f"{relative!r} is not a relative path inside the dataset folder")
    path = root / relative
    real_root = os.path.realpath(root)
    if os.path.commonpath([real_root, os.path.realpath(path)]) != real_root:
        raise ExportError(f"{path} points outside the dataset folder {root} (a symlink?)")
    return path


@contextlib.contextmanager
def open_regular_file(path: Path) -> Iterator[BinaryIO]:
    """A regular file opened for reading. A FIFO, device or folder is refused without blocking on it."""
    try:
        # O_NONBLOCK: opening a FIFO for reading returns at once instead of waiting for a writer.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise ExportError(f"{path} is missing") from None
    except OSError as error:
        raise ExportError(f"{path}: {error.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # before fdopen, which refuses a folder naming only the fd
        os.close(fd)
        raise ExportError(f"{path} is not a regular file")
    with os.fdopen(fd, "rb") as f:
        yield f


def read_regular_file(path: Path, max_bytes: int | None = None) -> bytes:
    """The bytes of a regular file, refused when it is larger than max_bytes."""
    with open_regular_file(path) as f:
        size = os.fstat(f.fileno()).st_size
        if max_bytes is not None and size > max_bytes:
            raise ExportError(f"{path} has {size} bytes, more than it could have ({max_bytes})")
        data = f.read() if max_bytes is None else f.read(max_bytes + 1)
    if max_bytes is not None and len(data) > max_bytes:
        raise ExportError(f"{path} grew past {max_bytes} bytes while being read")
    return data


@dataclass(frozen=True)
class SourceDataset:
    root: Path
    header: dict  # data.json without its samples
    records: list[dict]  # annotations.jsonl, in file order
    annotations: bytes  # annotations.jsonl as it is on disk


MAX_NESTING = 32  # a record or data.json nests a few levels; deeper is a hand edit that json.dumps may not survive


def parse_json(data, where: str):
    """json.loads, refusing in one line what does not parse, nests deeper than MAX_NESTING, or holds a
    string that is not valid Unicode (a lone surrogate, which no UTF-8 file can hold)."""
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):  # RecursionError: nested past Python's limit
        raise ExportError(f"{where}: not JSON (a copy cut short, or edited by hand?)") from None
    stack = [(value, 1)]  # iterative: the walk must not itself recurse past the limit it checks
    while stack:
        item, depth = stack.pop()
        if depth > MAX_NESTING:
            raise ExportError(f"{where}: nested more than {MAX_NESTING} levels deep: not this generator's JSON")
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise ExportError(f"{where}: holds text that is not valid Unicode (a lone surrogate)") from None
        elif isinstance(item, dict):
            stack.extend((part, depth + 1) for pair in item.items() for part in pair)
        elif isinstance(item, list):
            stack.extend((part, depth + 1) for part in item)
    return value


def read_records(path: Path, raw: bytes) -> list[dict]:
    records = []
    # "\n" only: str.splitlines() would also split at a U+2028 inside a string.
    for number, line in enumerate(raw.decode("utf-8", errors="replace").split("\n"), 1):
        if not line.strip():
            continue
        record = parse_json(line, f"{path}, line {number}")
        missing = [name for name in REQUIRED_FIELDS if not isinstance(record, dict) or name not in record]
        if missing:
            raise ExportError(f"{path}, line {number}: no {', '.join(missing)}")
        records.append(record)
    if not records:
        raise ExportError(f"{path} holds no records")
    return records


def check_records(path: Path, records: list[dict]) -> None:
    """Same fields in every record, integer answers, one record per index and per image."""
    fields = list(records[0])
    seen_index, seen_image = set(), set()
    for number, record in enumerate(records, 1):
        where = f"{path}, record {number}"
        if list(record) != fields:
            raise ExportError(f"{where}: fields differ from the first record's")
        for name in ("index", "answer", "num_loops", "width", "height"):
            if isinstance(record[name], bool) or not isinstance(record[name], int):
                raise ExportError(f"{where}: {name} is {record[name]!r}, not an integer")
        for name in ("image", "question", "pixel_sha256"):
            if not isinstance(record[name], str):
                raise ExportError(f"{where}: {name} is {record[name]!r}, not a string")
        if record["index"] in seen_index or record["image"] in seen_image:
            raise ExportError(f"{where}: a second record for index {record['index']} or {record['image']}")
        seen_index.add(record["index"])
        seen_image.add(record["image"])


def read_source(root: Path) -> SourceDataset:
    """The dataset's two files, checked against each other; images are checked as they are exported."""
    if not root.is_dir():
        raise ExportError(f"--dataset {root} is not a folder")
    annotations_path = inside(root, ANNOTATIONS_FILE)
    annotations = read_regular_file(annotations_path)
    records = read_records(annotations_path, annotations)
    check_records(annotations_path, records)
    data_path = inside(root, DATA_FILE)
    document = parse_json(read_regular_file(data_path), str(data_path))
    keys = ("task", "generator_version", "command", "config", "question", "num_samples", "answer_histogram")
    missing = [key for key in keys if key not in document] if isinstance(document, dict) else ["keys"]
    if missing or not isinstance(document["config"], dict) or not isinstance(document["answer_histogram"], dict):
        raise ExportError(f"{data_path} has no {', '.join(missing) or 'usable config'}: "
                          "not this generator's data.json")
    if document["num_samples"] != len(records):
        raise ExportError(f"{annotations_path} has {len(records)} records but {data_path} says "
                          f"{document['num_samples']}: the two files come from different runs")
    samples = document.get("samples", records)
    if not isinstance(samples, list) or len(samples) != len(records):
        raise ExportError(f"{data_path}: its samples are not a list of the {len(records)} records: "
                          "not this generator's data.json")
    for number, (sample, record) in enumerate(zip(samples, records), 1):
        if sample != record:
            raise ExportError(f"{annotations_path}, record {number} differs from {data_path}'s sample {number}: "
                              "the two files come from different runs")
    check_histogram(data_path, document["answer_histogram"], records)
    header = {key: value for key, value in document.items() if key != "samples"}
    return SourceDataset(root, header, records, annotations)


def check_histogram(data_path: Path, histogram: dict, records: list[dict]) -> None:
    """data.json's answer_histogram ({"5": 71, ...}) must count the records' answers (zero counts aside):
    the card shows it."""
    counted = {}
    for record in records:
        counted[str(record["answer"])] = counted.get(str(record["answer"]), 0) + 1
    stated = {key: value for key, value in histogram.items() if value != 0}
    well_formed = all(re.fullmatch(r"-?[0-9]{1,18}", key) and type(value) is int and value >= 0
                      for key, value in histogram.items())
    if not well_formed or stated != counted:
        raise ExportError(f"{data_path}: its answer_histogram does not count the records' answers: "
                          "edited by hand, or from another run")


class BadImage(Exception):
    """An image file unlike its record, said in a few words after its name: the generator redraws it on a rerun."""


def decoded_pixels_sha256(png: bytes, path: Path, record: dict) -> str:
    """SHA-256 of the image's RGB pixels, decoding only a PNG of the size its record states."""
    width, height = record["width"], record["height"]
    if not (0 < width and 0 < height and width * height <= MAX_IMAGE_PIXELS):
        raise ExportError(f"{path}: its record says {width} x {height} px, outside what this exporter decodes")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(png), formats=["PNG"]) as image:
                if image.size != (width, height):
                    raise BadImage(f"is {image.size[0]} x {image.size[1]} px, its record says {width} x {height}")
                return hashlib.sha256(image.convert("RGB").tobytes()).hexdigest()
    except BadImage:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise BadImage(f"claims far more pixels than its record's {width} x {height} (a decompression bomb?)") from None
    except Exception:  # Pillow reports a damaged or hostile file by many exception types, none worth showing
        raise BadImage("is not a readable image of this dataset (damaged?)") from None


PLAIN_WORD = re.compile(r"^(--[a-z][a-z-]*|[\w.+-]+)$")  # a flag or a plain value: nothing a shell would act on


def redraw_advice(source: SourceDataset) -> str:
    """How to redraw an image unlike its record: data.json's command aimed at the dataset's folder, run by
    the generator version that made it, when that command is plain flags and values (it is only read)."""
    version = source.header.get("generator_version")
    try:
        words = shlex.split(str(source.header.get("command", "")))
    except ValueError:
        words = []
    plain = (words[:2] == ["python", "creation.py"] and all(PLAIN_WORD.match(word) for word in words[2:])
             and all(a.startswith("--") or b.startswith("--") for a, b in zip(words[2:], words[3:])))
    if not plain:
        return f"rerun the command that made the dataset (generator {version}) to redraw it"
    folder = shlex.quote(os.path.abspath(source.root))
    return f"rerun the command that made the dataset (generator {version}) to redraw it: {shlex.join(words)} --out {folder}"


def checked_images(source: SourceDataset, quiet: bool) -> Iterator[tuple[dict, bytes]]:
    """(record, PNG bytes) in record order, each image's pixels checked against its record's pixel_sha256."""
    from tqdm import tqdm  # only for the progress bar

    # Updated by hand: a tqdm iterator closes itself, drawing its line for good, before an error reaches except.
    with tqdm(total=len(source.records), desc="images", unit="img", disable=quiet, file=sys.stderr) as bar:
        try:
            for record in source.records:
                path = inside(source.root, record["image"])
                try:
                    png = read_regular_file(path, MAX_IMAGE_BYTES)
                    if decoded_pixels_sha256(png, path, record) != record["pixel_sha256"]:
                        raise BadImage("is not the image its record describes (pixel_sha256 differs)")
                except BadImage as problem:
                    raise ExportError(f"{record['image']} {problem}; {redraw_advice(source)}") from None
                except ExportError as problem:  # missing, or not a regular file: a rerun redraws it too
                    raise ExportError(f"{problem}; {redraw_advice(source)}") from None
                bar.update()
                yield record, png
        except BaseException:
            bar.leave = False  # erase the half-drawn bar, so the error is the only line left
            raise


# ---------------------------------------------------------------------------
# Where an export goes: refuse foreign folders, stage beside the target, swap in whole


def earlier_hub_export(out: Path) -> bool:
    """Whether `out` holds an earlier Hub export and nothing else: every file its marker lists, each with the
    content the marker hashes (a card edited by hand is the user's now), and no other file."""
    try:
        marker = parse_json(read_regular_file(inside(out, MARKER_FILE), 1 << 20), MARKER_FILE)
        hashes = marker["files"] if marker.get("export") == "hub" else None
    except (ExportError, KeyError, TypeError, AttributeError):
        return False
    if not isinstance(hashes, dict) or not all(isinstance(value, str) for value in hashes.values()):
        return False  # an older exporter's marker listed names only: its files' content cannot be told
    allowed = set(hashes) | {MARKER_FILE}
    allowed |= {parent.as_posix() for name in allowed for parent in PurePosixPath(name).parents}
    present = set()
    for folder_path, dirs, files in os.walk(out):  # symlinked folders are listed, not entered
        relative = PurePosixPath(Path(folder_path).relative_to(out).as_posix())
        present |= {(relative / name).as_posix() for name in dirs + files}
    if not present <= allowed:
        return False
    try:
        return all(not os.path.islink(inside(out, name)) and file_sha256(inside(out, name)) == digest
                   for name, digest in hashes.items())
    except ExportError:  # missing, not a regular file, or climbing out: not what the export wrote
        return False


def check_parent(out: Path, flag: str) -> None:
    """Refuse a target under a file (mkdir would fail there with a bare "File exists")."""
    for folder in out.parents:
        if os.path.lexists(folder):
            if not folder.is_dir():
                raise ExportError(f"{flag} {out} lies under {folder}, which is not a folder")
            return


def check_hub_target(out: Path) -> bool:
    """True when `out` is an earlier export to replace, False when it is absent or empty; refuses the rest."""
    check_parent(out, "--export-hub")
    if not out.exists() and not out.is_symlink():
        return False
    if out.is_symlink() or not out.is_dir():
        raise ExportError(f"--export-hub {out} exists and is not a folder")
    if not any(out.iterdir()):
        return False
    if not earlier_hub_export(out):
        raise ExportError(f"--export-hub {out} is a folder that holds files of its own, not an earlier export "
                          f"(no {MARKER_FILE} listing them all with their content): choose a new or empty folder")
    return True


PNG_BASE64 = re.compile(r"iVBORw0KGgo[A-Za-z0-9+/]*={0,2}")  # a PNG's signature in base64, then base64
WHOLE_NUMBER = re.compile(r"[0-9]{1,18}")


def earlier_tsv_export(path: Path) -> bool:
    """Whether the whole file reads as a TSV this exporter wrote: the header, then one or more rows of an
    index, a base64 PNG, the question, an answer and num_loops equal to it. A header alone proves nothing."""
    limit = csv.field_size_limit(max(csv.field_size_limit(), 2 * MAX_IMAGE_BYTES))  # a base64 PNG per cell
    try:
        with open_regular_file(path) as f:
            rows = csv.reader(io.TextIOWrapper(f, encoding="utf-8", newline=""), delimiter="\t", strict=True)
            if next(rows, None) != list(TSV_COLUMNS):
                return False
            count = 0
            for index, image, question, answer, num_loops in rows:  # another width: ValueError
                if not (WHOLE_NUMBER.fullmatch(index) and PNG_BASE64.fullmatch(image) and question
                        and WHOLE_NUMBER.fullmatch(answer) and answer == num_loops):
                    return False
                count += 1
            return count > 0
    except (ExportError, ValueError, csv.Error):  # UnicodeDecodeError is a ValueError
        return False
    finally:
        csv.field_size_limit(limit)


def check_tsv_target(out: Path) -> None:
    """An absent file, or an earlier TSV export (by its whole content); refuses the rest."""
    check_parent(out, "--export-vlmevalkit")
    if not out.exists() and not out.is_symlink():
        return
    if out.is_symlink() or not out.is_file():
        raise ExportError(f"--export-vlmevalkit {out} exists and is not a regular file")
    if not earlier_tsv_export(out):
        raise ExportError(f"--export-vlmevalkit {out} exists and is not an earlier export "
                          "(its content is not the export's rows): choose a new file name")


def exchange_paths(first: Path, second: Path) -> bool:
    """Swap two paths in one step (Linux renameat2 RENAME_EXCHANGE); False where that is not available."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError, TypeError):  # not Linux, or a C library without renameat2
        return False
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(first), at_fdcwd, os.fsencode(second), rename_exchange) == 0


def replace_folder_deleting_old(staged: Path, out: Path, replacing: bool) -> None:
    """Put the finished `staged` folder at `out`; an earlier export there is swapped out whole, then removed."""
    if not replacing:
        if out.is_dir():
            out.rmdir()  # empty, checked before staging
        os.rename(staged, out)
        return
    if exchange_paths(staged, out):
        shutil.rmtree(staged)  # now holds the earlier export
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    os.rename(out, old / out.name)  # out is missing between these two renames
    os.rename(staged, out)
    shutil.rmtree(old)


# ---------------------------------------------------------------------------
# The Hub folder: Parquet shards with the images embedded, then the card


def hub_types(records: list[dict]) -> dict[str, str]:
    """Feature type of each record field, in record order: FIELDS, or read off the values."""
    types = {}
    for name in records[0]:
        if name in FIELDS:
            types[name] = FIELDS[name][0]
            continue
        values = {type(record[name]) for record in records} - {type(None)}
        types[name] = ("bool" if values == {bool} else "int64" if values == {int}
                       else "float64" if values <= {int, float} and values else "string")
    return types


FITS = {  # which Python values each column type stores (bool is an int subclass: not a count)
    "int64": lambda v: isinstance(v, int) and not isinstance(v, bool) and -(1 << 63) <= v < (1 << 63),
    "float64": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) <= sys.float_info.max,
    "bool": lambda v: isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
}


def cell(value, dtype: str, name: str, index: int):
    """A record value as its column stores it; a value of another type stops the export."""
    if value is None and name not in REQUIRED_FIELDS:
        return None
    if dtype == "string" and not isinstance(value, str):
        return json.dumps(value)  # an unlisted field of mixed types is kept as JSON text
    if not FITS[dtype](value):
        raise ExportError(f"record {index}: {name} is {value!r}, not {dtype}")
    return float(value) if dtype == "float64" else value


def arrow_schema(types: dict[str, str]):
    """The Parquet schema, carrying the `datasets` features so the files decode images even without the card."""
    import pyarrow as pa

    arrow = {"int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_(), "string": pa.string(),
             "image": pa.struct([("bytes", pa.binary()), ("path", pa.string())])}
    features = {name: {"_type": "Image", "mode": "RGB"} if dtype == "image" else {"dtype": dtype, "_type": "Value"}
                for name, dtype in types.items()}
    metadata = {"huggingface": json.dumps({"info": {"features": features}}, sort_keys=True)}
    return pa.schema([(name, arrow[dtype]) for name, dtype in types.items()], metadata=metadata)


def shard_name(k: int, count: int) -> str:
    return f"{PARQUET_DIR}/{SPLIT}-{k:05d}-of-{count:05d}.parquet"


def write_parquet_shards(source: SourceDataset, staged: Path, quiet: bool) -> tuple[list[str], int]:
    """data/test-*.parquet in `staged`, a new file every SHARD_BYTES of images; (names, Arrow bytes)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ExportError("--export-hub writes Parquet and needs pyarrow: "
                          "pip install -r requirements-export.txt") from None
    types = hub_types(source.records)
    schema = arrow_schema(types)
    (staged / PARQUET_DIR).mkdir()
    parts, rows, writer, shard_bytes, arrow_bytes = [], [], None, 0, 0

    def flush():
        nonlocal arrow_bytes
        if not rows:
            return  # no empty row groups
        table = pa.Table.from_pylist(rows, schema=schema)
        writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
        arrow_bytes += table.nbytes
        rows.clear()

    try:
        for number, (record, png) in enumerate(checked_images(source, quiet), 1):
            if writer is None or shard_bytes + len(png) > SHARD_BYTES and shard_bytes:
                if writer is not None:
                    flush()
                    writer.close()
                parts.append(staged / PARQUET_DIR / f"part-{len(parts):05d}.parquet")
                writer, shard_bytes = pq.ParquetWriter(parts[-1], schema), 0
            row = {name: cell(record[name], dtype, name, number) for name, dtype in types.items() if name != "image"}
            rows.append({"image": {"bytes": png, "path": record["image"]}, **row})
            shard_bytes += len(png)
            if len(rows) == ROW_GROUP_ROWS:
                flush()
        flush()
    finally:
        if writer is not None:
            writer.close()
    names = [shard_name(k, len(parts)) for k in range(len(parts))]
    for part, name in zip(parts, names):
        part.rename(staged / name)
    return names, arrow_bytes


def size_category(n: int) -> str:
    """The Hub's size_categories bucket for n rows."""
    bounds = [(1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
              (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M")]
    return next((label for bound, label in bounds if n < bound), "n>1T")


def dataset_mode(header: dict) -> str:
    config = header["config"]
    if "original_shapes" in config:
        return "original shapes" if config["original_shapes"] else "budgeted"
    return "budgeted" if config.get("balanced") else "original shapes"  # generator versions before 2.0


def yaml_text(value) -> str:
    """A YAML scalar: JSON's double-quoted strings and numbers are valid YAML."""
    return json.dumps(value, ensure_ascii=False)


def card_front_matter(types: dict[str, str], n: int, arrow_bytes: int) -> str:
    lines = ["---", "pretty_name: Tangled closed loops", f"license: {LICENSE}", "language:", "- en",
             "annotations_creators:", "- machine-generated", "language_creators:", "- machine-generated",
             "source_datasets:", "- original",
             "task_categories:", "- visual-question-answering", "- image-text-to-text",
             "size_categories:", f"- {size_category(n)}",
             "tags:", "- counting", "- visual-reasoning", "- synthetic", "- procedurally-generated",
             f"- {TASK_NAME}",
             "configs:", "- config_name: default", "  data_files:", f"  - split: {SPLIT}",
             f"    path: {PARQUET_DIR}/{SPLIT}-*.parquet",
             "dataset_info:", "  features:"]
    for name, dtype in types.items():
        # The images are palette PNGs; declared RGB, `datasets` decodes them to RGB, the pixels pixel_sha256 hashes.
        feature = ["    dtype:", "      image:", "        mode: RGB"] if dtype == "image" else [f"    dtype: {dtype}"]
        lines += [f"  - name: {yaml_text(name)}", *feature]
    lines += ["  splits:", f"  - name: {SPLIT}", f"    num_bytes: {arrow_bytes}", f"    num_examples: {n}", "---"]
    return "\n".join(lines) + "\n"


def percent(value) -> str:
    return "not measured yet" if value is None else f"{100 * value:.0f} %"


def audit_describes(figures: dict, header: dict) -> bool:
    """Whether the figures were measured by this dataset's generator version on its settings (n and seed aside)."""
    settings = {name: value for name, value in header["config"].items() if name not in AUDIT_FREE_FIELDS}
    return figures.get("generator_version") == header.get("generator_version") and figures.get("settings") == settings


def audit_section(mode: str, header: dict) -> list[str]:
    figures = AUDIT_FIGURES.get(mode, {})
    at = f" ({figures['measured_on']})" if figures.get("measured_on") else ""
    if figures.get("images") and not audit_describes(figures, header):
        return ["## Shortcut audit", "",
                f"The generator's shortcut-audit figures for `{mode}` mode were measured on that mode's default "
                f"settings{at} and do not describe this dataset, which was made with other settings or another "
                "generator version. To audit it, run `python tests/shortcuts.py DIR` from the generator's "
                "repository, DIR being the folder creation.py wrote.", ""]
    lines = ["## Shortcut audit", "",
             f"How well cheap image statistics (ink, faces, skeleton, curvature, endpoints) predict the count "
             f"in `{mode}` mode, fitted on half of an audit set and scored on the other half "
             "(`tests/shortcuts.py` in the generator's repository). Low numbers mean the count has to be traced.",
             "", "| predictor | exact | within one |", "| --- | --- | --- |"]
    for label, key in (("chance", "chance"), ("best single statistic", "best_single"),
                       ("model over all statistics", "combined")):
        lines.append(f"| {label} | {percent(figures.get(f'{key}_exact'))} | "
                     f"{percent(figures.get(f'{key}_within_one'))} |")
    if figures.get("images"):
        lines += ["", f"Measured on {figures['images']} images{at}."]
    if mode == "budgeted" and scoring.GIST_FLOOR["generator_version"] == header.get("generator_version"):
        # The gist floor: shapes, not statistics, read off thumbnails where nothing can be traced.
        lines += ["", f"**Gist floor**: {scoring.gist_floor_line()} (`tests/gist_probe.py`, trained on "
                      "thumbnails of one seed and tested on another)."]
    return lines + [""]


def bibtex(repo_url: str, header: dict, n: int) -> list[str]:
    """The card's BibTeX entry: CITATION.cff's title, author and year, and what this export holds."""
    return ["```bibtex", "@misc{tangled_loops,",
            f"  title        = {{{CITATION_TITLE}}},",
            f"  author       = {{{{{CITATION_AUTHOR}}}}},",
            f"  year         = {{{CITATION_YEAR}}},",
            f"  howpublished = {{\\url{{{repo_url}}}}},",
            f"  note         = {{Generator version {header['generator_version']}, run seed "
            f"{header['config'].get('seed')}, {n} images}}",
            "}", "```"]


def render_card(source: SourceDataset, types: dict[str, str], shards: list[str], arrow_bytes: int,
                repo_url: str = REPO_URL_PLACEHOLDER) -> str:
    header, records = source.header, source.records
    n = len(records)
    mode = dataset_mode(header)
    seed = header["config"].get("seed")
    repository = f"[the generator's repository]({repo_url})" if repo_url != REPO_URL_PLACEHOLDER else (
        f"the generator's repository ({repo_url})")
    lines = [
        "# Tangled closed loops: a counting benchmark", "",
        "Each image is a tangle of smooth closed curves drawn in one dark colour on an off-white, faintly "
        "noisy canvas. The curves cross each other and themselves, but every crossing is a clear X and no two "
        "strands run close together elsewhere, so a careful reader can trace each loop all the way round. The "
        "task is to say how many distinct loops there are; the answer is a positive integer. "
        f"This release has {n} images, all in the `{SPLIT}` split, made by {repository}.", "",
        "## Prompt", "",
        "Every image is shown with the same prompt: the record's `question`, then one line fixing the form of "
        "the answer. The generator's lmms-eval task and VLMEvalKit TSV use exactly this text; its grader looks "
        "for the `Answer: N` that line asks for, and with `--strict` reads nothing else.", "",
        "```text", *scoring.assumed_prompt(records).split("\n"), "```", "",
        "## Loading", "",
        "```python", "from datasets import load_dataset", "",
        f'ds = load_dataset("USER/NAME", split="{SPLIT}")  # or this folder\'s absolute path',
        'ds[0]["image"]  # an RGB PIL image; ds[0]["answer"] is the loop count', "```", "",
        "Images decode to RGB (`ds.with_format(\"numpy\")` gives height x width x 3 arrays) whose bytes "
        "hash to the record's `pixel_sha256`; the stored files are the generator's 8-bit palette PNGs. "
        "A relative folder name that does not exist where Python runs is looked up on the Hub, so give "
        "a local copy by its absolute path.", "",
        "## Fields", "", "| field | type | meaning |", "| --- | --- | --- |",
    ]
    for name, dtype in types.items():
        meaning = FIELDS[name][1] if name in FIELDS else "see the generator's documentation"
        lines.append(f"| `{name}` | {dtype} | {meaning} |")
    lines += [
        "", "## How it was made", "",
        f"Generated by `creation.py` version {header['generator_version']} (schema "
        f"{header.get('schema_version', '?')}), run seed {seed}, `{mode}` mode"
        + (" (each image's ink length, turning and crossings drawn independently of the count)"
           if mode == "budgeted" else " (the original description's shapes, kept for comparison: the ink gives "
                                         "the count away)")
        + ". The same command, with `--out DIR` for a folder of your own, makes the same pixels again:", "",
        "```bash", str(header["command"]), "```", "",
        "## Answer histogram", "", "| loops | images |", "| --- | --- |",
        *[f"| {count} | {images} |" for count, images in
          sorted(header["answer_histogram"].items(), key=lambda item: int(item[0]))], "",
        *audit_section(mode, header),
        "## Evaluating", "",
        f"Keep each model's whole reply; the grader in {repository} reads the count out of free-form "
        "replies and grades them against `annotations.jsonl`, which this folder carries. Its lmms-eval task "
        "(`integrations/lmms_eval`) reads this dataset with its embedded images; run it with `--log_samples "
        "--output_path logs/` and grade the samples file it writes. For VLMEvalKit, make the TSV with the "
        "generator's `export.py --export-vlmevalkit`, run VLMEvalKit with `PRED_FORMAT=tsv` and grade its "
        "prediction table. For any other harness, write one JSON line per image, "
        '`{"index": 0, "response": "...reply text..."}`. Then:', "",
        "```bash", "hf download --repo-type dataset USER/NAME --local-dir loops",
        "python creation.py --evaluate predictions.jsonl --dataset loops   # add --strict for numbers across harnesses",
        "```", "",
        "## Format", "",
        f"One Parquet file per ~{SHARD_BYTES // 1_000_000} MB of images ({', '.join(f'`{s}`' for s in shards)}), "
        "each image stored as its original PNG bytes, so the decoded pixels match `pixel_sha256` exactly. "
        "Parquet rather than an image folder with `metadata.jsonl`: `datasets` takes the column types from "
        "this card for Parquet (an image folder's types are guessed from the JSON instead, and a `configs` "
        "entry that names only the images silently drops every other field), and the whole split downloads "
        "as one or a few files instead of one request per image.", "",
        "## Citation", "", *bibtex(repo_url, header, n), "",
        "## Licence", "",
        f"The data (images and annotations) is {LICENSE.upper()}; the generator's code is {CODE_LICENSE} "
        f"(`LICENSE` in {repository}).", "",
    ]
    return card_front_matter(types, n, arrow_bytes) + "\n" + "\n".join(lines)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open_regular_file(path) as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_marker(staged: Path, files: list[str], header: dict, n: int) -> None:
    """The marker: what made the export, and the SHA-256 of every file it wrote, so that a re-export replaces
    only files whose content is still the export's own."""
    marker = {"export": "hub", "export_version": EXPORT_VERSION, "task": header.get("task"),
              "generator_version": header.get("generator_version"), "config": header.get("config"),
              "num_samples": n, "files": {name: file_sha256(staged / name) for name in sorted(files)}}
    (staged / MARKER_FILE).write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8")


def export_hub(source: SourceDataset, out: Path, quiet: bool, repo_url: str = REPO_URL_PLACEHOLDER) -> None:
    replacing = check_hub_target(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_dead_staging(out)
    with staging(out, "export") as staged:
        staged.mkdir(mode=0o777 & ~current_umask())
        try:
            shards, arrow_bytes = write_parquet_shards(source, staged, quiet)
            (staged / ANNOTATIONS_FILE).write_bytes(source.annotations)
            card = render_card(source, hub_types(source.records), shards, arrow_bytes, repo_url)
            (staged / CARD_FILE).write_text(card, encoding="utf-8")
            write_marker(staged, shards + [ANNOTATIONS_FILE, CARD_FILE], source.header, len(source.records))
            replace_folder_deleting_old(staged, out, replacing)
        except BaseException:
            shutil.rmtree(staged, ignore_errors=True)
            raise


# A staging folder or file sits beside its lock file, which the export holds for as long as it runs; the
# kernel drops the lock when the process ends, however it ends, so a later export to the same target can
# tell a killed run's leftovers from a live run's. Without fcntl (Windows) nothing is locked or cleaned.
LOCK_SUFFIX = ".lock"
STAGING_KINDS = {"export": stat.S_ISDIR, "tmp": stat.S_ISREG}  # the Hub folder's staging, the TSV's


@contextlib.contextmanager
def staging(out: Path, kind: str) -> Iterator[Path]:
    """A fresh staging path beside out (not yet created), locked until the block ends."""
    fd, lock = tempfile.mkstemp(prefix=f".{out.name}.{kind}-", suffix=LOCK_SUFFIX, dir=out.parent)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)  # before the staging path exists, so no one sees it unlocked
        yield Path(lock[:-len(LOCK_SUFFIX)])
    finally:
        Path(lock).unlink(missing_ok=True)
        os.close(fd)


def remove_dead_staging(out: Path) -> None:
    """Remove what exports to out that were killed outright left beside it; a live export's staging stays,
    and so does anything not named and typed as the export's own staging."""
    if fcntl is None:
        return
    for kind, is_kind in STAGING_KINDS.items():
        for lock in out.parent.glob(f".{glob.escape(out.name)}.{kind}-*{LOCK_SUFFIX}"):
            with abandoned(lock) as dead:
                if dead and remove_staging(lock.with_name(lock.name[:-len(LOCK_SUFFIX)]), kind, is_kind):
                    lock.unlink(missing_ok=True)


@contextlib.contextmanager
def abandoned(lock: Path) -> Iterator[bool]:
    """Whether lock is a regular file that no running export holds; if so it stays locked for the block."""
    try:  # non-blocking: a FIFO put there must not hang the export
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:  # gone meanwhile, or a symlink
        yield False
        return
    try:
        yield stat.S_ISREG(os.fstat(fd).st_mode) and not_held(fd)
    finally:
        os.close(fd)


def not_held(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held: that export is running
        return False
    return True


def remove_staging(staged: Path, kind: str, is_kind) -> bool:
    """Remove a dead export's staging; False (keep its lock) if what stands there is not of the staging's type."""
    try:
        if not is_kind(os.lstat(staged).st_mode):
            return False
        shutil.rmtree(staged) if kind == "export" else staged.unlink()
    except FileNotFoundError:  # killed before its staging was made, or after it was renamed
        pass
    return True


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# ---------------------------------------------------------------------------
# The VLMEvalKit TSV


def tsv_rows(source: SourceDataset, quiet: bool) -> Iterator[list]:
    """One row per image: the original PNG bytes in base64, which VLMEvalKit decodes and saves as a PNG."""
    for record, png in checked_images(source, quiet):
        # The question column holds the whole prompt, as lmms-eval's task shows it: VLMEvalKit shows it as is.
        yield [record["index"], base64.b64encode(png).decode("ascii"), scoring.evaluation_prompt(record["question"]),
               record["answer"], record["num_loops"]]


def export_tsv(source: SourceDataset, out: Path, quiet: bool) -> None:
    check_tsv_target(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_dead_staging(out)
    with staging(out, "tmp") as staged:
        try:
            with open(staged, "x", encoding="utf-8", newline="") as f:
                # pandas.read_csv(sep="\t") reads this back: minimal quoting with '"', one row per line.
                writer = csv.writer(f, delimiter="\t", lineterminator="\n", quoting=csv.QUOTE_MINIMAL)
                writer.writerow(TSV_COLUMNS)
                writer.writerows(tsv_rows(source, quiet))
            os.replace(staged, out)
        except BaseException:
            staged.unlink(missing_ok=True)
            raise


# ---------------------------------------------------------------------------
# CLI


class OneLineParser(argparse.ArgumentParser):
    """Bad input gets one line and exit status 2, without the usage block."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def folder(text: str) -> Path:
    """A path argument; an empty one (an unset shell variable) would quietly mean the current folder."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty (an unset shell variable?)")
    return Path(text)


def build_parser(prog: str) -> OneLineParser:
    p = OneLineParser(prog=prog, description="Export a finished tangled-loops dataset for the Hugging Face Hub "
                                             "or VLMEvalKit, checking every image against its record.")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--export-hub", type=folder, metavar="OUT",
                        help="write a folder to upload to the Hub as a dataset repository: Parquet files with the "
                             "images embedded, a dataset card (README.md) and annotations.jsonl")
    target.add_argument("--export-vlmevalkit", type=folder, metavar="FILE.tsv",
                        help="write VLMEvalKit's benchmark TSV: index, image (base64 PNG), question (the "
                             "prompt: the record's question and the answer-format line), answer, num_loops")
    p.add_argument("--dataset", type=folder, default=Path(__file__).resolve().parent, metavar="DIR",
                   help="the dataset folder, as creation.py wrote it (default: the folder holding this file)")
    p.add_argument("--repo-url", metavar="URL",
                   help="the generator's repository, linked from the dataset card (--export-hub only; without "
                        f"it the card says {REPO_URL_PLACEHOLDER!r})")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the export is, so that it unwinds as Ctrl-C does and leaves no staging."""


def raise_terminated(signum, frame):
    raise Terminated


def main(argv: list[str] | None = None, prog: str = "export.py") -> int:
    parser = build_parser(prog)
    try:
        args = parser.parse_args(argv)
        if args.repo_url is not None and not args.export_hub:
            parser.error("--repo-url names the repository in the dataset card: it goes with --export-hub only")
        if args.repo_url is not None and not REPO_URL.fullmatch(args.repo_url):
            parser.error(f"--repo-url must be an http(s) address such as https://github.com/USER/REPO, "
                         f"got {args.repo_url!r}")
    except SystemExit as stop:  # a bad flag (status 2, one line already printed) or --help (0)
        return stop.code
    out = args.export_hub or args.export_vlmevalkit
    # Only where SIGTERM would kill outright, and only the main thread may set a handler.
    take_term = (threading.current_thread() is threading.main_thread()
                 and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)
    previous = signal.signal(signal.SIGTERM, raise_terminated) if take_term else None
    try:
        return run_export(args, out, prog)
    finally:
        if take_term:
            signal.signal(signal.SIGTERM, previous)


def run_export(args, out: Path, prog: str) -> int:
    try:
        source = read_source(args.dataset)
        if args.export_hub:
            export_hub(source, out, args.quiet, args.repo_url or REPO_URL_PLACEHOLDER)
        else:
            export_tsv(source, out, args.quiet)
    except ExportError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:
        how, status = ("terminated", 143) if isinstance(stop, Terminated) else ("interrupted", 130)
        print(f"{prog}: {how}; {out} is as it was", file=sys.stderr)
        return status
    except OSError as error:
        print(f"{prog}: error: {error.filename or out}: {error.strerror or error}", file=sys.stderr)
        return 1
    if not args.quiet:
        print(f"exported {len(source.records)} images to {out}", file=sys.stderr)
        if args.export_hub and not args.repo_url:
            print(f"note: the card's repository link is a placeholder ({REPO_URL_PLACEHOLDER}): "
                  "export again with --repo-url URL before publishing", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
