"""A dataset folder's records, read for the audit scripts (recount.py, shortcuts.py, parallel_stretch.py).

Both scripts judge a folder someone points them at, so a folder that is not a
dataset is refused with one line naming what is wrong, before any image is
measured: a traceback from a worker process, or an empty dataset "passing" a
gate, would say nothing useful. Standard library only, and independent of
creation.py, like the scripts themselves.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ANNOTATIONS = "annotations.jsonl"


class DatasetInputError(ValueError):
    """The folder does not hold a readable dataset; the message is one line."""


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, like the scripts' other refusals (exit status 2)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def missing_test_package(tool: str, module: str) -> str:
    """The one line a script prints when run outside the test environment, which installs what it needs."""
    return (f"{tool}: error: needs the module {module}, which the test requirements install: "
            "pip install -r tests/requirements.txt")


def read_records(dataset_dir: Path, limit: int | None = None) -> list[dict]:
    """The first `limit` records (all when None) of dataset_dir/annotations.jsonl, each with a string
    "image" naming a file by its path relative to the folder and an integer "answer"."""
    if not dataset_dir.is_dir():
        raise DatasetInputError(f"{dataset_dir} is not a folder")
    path = dataset_dir / ANNOTATIONS
    if not path.is_file():
        raise DatasetInputError(f"{dataset_dir} holds no {ANNOTATIONS}: not a finished dataset (a sharded "
                                "one has it once merged with `creation.py --merge`)")
    records = []
    with open(path, encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, 1):
            if limit is not None and len(records) == limit:
                break
            if line.strip():
                records.append(checked_record(dataset_dir, line, f"{path} line {number}"))
    if not records:
        raise DatasetInputError(f"{path} holds no records")
    return records


@contextmanager
def readable_image(path) -> Iterator[None]:
    """Turn a failure to decode the image at path (damaged, or not an image) into a DatasetInputError.

    The block holds only the opening and decoding, so any exception there is the file's: Pillow raises
    OSError, SyntaxError (broken chunks), ValueError or its DecompressionBombError (a huge header).
    """
    try:
        yield
    except Exception as error:
        raise DatasetInputError(f"{path}: not a readable image ({type(error).__name__}: {error})") from None


def checked_record(dataset_dir: Path, line: str, where: str) -> dict:
    try:
        record = json.loads(line)
    except (ValueError, RecursionError) as error:  # RecursionError: a line nested past Python's limit
        reason = "nested too deeply" if isinstance(error, RecursionError) else error
        raise DatasetInputError(f"{where}: not JSON ({reason})") from None
    image, answer = (record.get("image"), record.get("answer")) if isinstance(record, dict) else (None, None)
    if not isinstance(image, str) or type(answer) is not int:
        raise DatasetInputError(f'{where}: not a record with a string "image" and an integer "answer"')
    if not (dataset_dir / image).is_file():
        raise DatasetInputError(f"{where}: its image {image} is not found from {dataset_dir}")
    return record
