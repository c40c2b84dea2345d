"""A change to the output must come with a new GENERATOR_VERSION.

The version is part of a dataset's identity: a resumed run keeps every image
whose pixel hash matches its record file under the same identity. If the
output changed under an unchanged version, a run resumed across the change
would mix old and new images without noticing. CI's byte comparison of the
committed dataset catches a forgotten regeneration, not a forgotten bump;
this test catches the bump.
"""

import hashlib
import json
import re
from pathlib import Path

import creation

ROOT = Path(__file__).resolve().parents[1]
FINGERPRINTS = Path(__file__).with_name("output_fingerprints.json")
# A few samples from each mode whose output a change could touch alone.
PROBES = [
    (creation.Config(n=7, seed=0), range(3)),
    (creation.Config(n=7, seed=1, original_shapes=True), range(2)),
    (creation.Config(n=4, seed=0, min_loops=5, max_loops=5), range(1)),  # curls scale with max_loops
    (creation.Config(n=5, seed=2, answers="uniform", stroke_width=5.0, size=768, original_shapes=True, min_radius=100,
                     max_radius=200, min_loops=3, max_loops=6), range(2)),
]


def output_fingerprint() -> str:
    digest = hashlib.sha256()
    for cfg, indices in PROBES:
        for index in indices:
            _, record, _ = creation.make_sample(cfg, index)
            digest.update(json.dumps(record, sort_keys=True).encode())
    return digest.hexdigest()


def committed_records() -> list[dict]:
    return [json.loads(line) for line in (ROOT / "annotations.jsonl").read_text().splitlines()]


def test_output_changes_come_with_a_new_generator_version():
    recorded = json.loads(FINGERPRINTS.read_text())
    current = output_fingerprint()
    assert list(recorded)[-1] == creation.GENERATOR_VERSION, (
        f"GENERATOR_VERSION {creation.GENERATOR_VERSION} has no fingerprint: add "
        f'"{creation.GENERATOR_VERSION}": "{current}" at the end of {FINGERPRINTS.name}')
    assert recorded[creation.GENERATOR_VERSION] == current, (
        f"the output changed under version {creation.GENERATOR_VERSION}: bump GENERATOR_VERSION, regenerate "
        f'the committed dataset, and add "<new version>": "{current}" to {FINGERPRINTS.name}')
    assert len(set(recorded.values())) == len(recorded), "two versions claim the same output"


def test_the_readme_shows_the_committed_first_record():
    readme = (ROOT / "README.md").read_text()
    shown = readme.split("One record:\n\n```json\n", 1)[1].split("\n```", 1)[0]
    shown = json.loads(shown.replace('"How many distinct closed loops are tangled together in this image? ..."',
                                     json.dumps(creation.QUESTION)))
    committed = committed_records()
    assert shown == committed[0]
    hashes = {record["pixel_sha256"] for record in committed}
    assert set(re.findall(r'"pixel_sha256": "([0-9a-f]{64})"', readme)) <= hashes  # the sample prediction too


def test_the_committed_dataset_is_what_the_code_draws():
    """Every tenth committed record, drawn again: a regeneration forgotten after an output change fails here,
    before CI's byte comparison of the whole dataset."""
    committed = committed_records()
    cfg = creation.Config(n=len(committed), seed=committed[0]["seed"])
    for index in range(0, len(committed), 10):
        assert creation.make_sample(cfg, index)[1] == committed[index], f"record {index} differs"
