"""Runs that span machines or survive interruption: shards, merge, resume, refusals, signals."""

import errno
import fcntl
import gc
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import pytest
from PIL import Image

import creation

ROOT = Path(__file__).resolve().parents[1]
N, SEED = 12, 21
FLAGS = ["--n", str(N), "--seed", str(SEED), "--quiet"]


def command(out, *extra):
    return [sys.executable, str(ROOT / "creation.py"), *FLAGS, "--out", str(out), *extra]


def dataset_bytes(folder):
    return {name: (folder / name).read_bytes() for name in ("annotations.jsonl", "data.json")}


def listing(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("reference")
    assert creation.main([*FLAGS, "--out", str(out), "--workers", "2"]) == 0
    return out


def test_three_shards_merge_to_exactly_one_run(reference, tmp_path):
    for k in range(3):
        assert creation.main([*FLAGS, "--out", str(tmp_path), "--workers", "1", "--shard", f"{k}/3"]) == 0
        assert not (tmp_path / "annotations.jsonl").exists()
    assert creation.main([*FLAGS, "--out", str(tmp_path), "--merge"]) == 0
    assert dataset_bytes(tmp_path) == dataset_bytes(reference)
    assert listing(tmp_path) == listing(reference)


@pytest.fixture
def two_of_three_shards(tmp_path):
    for k in (0, 2):
        assert creation.main([*FLAGS, "--out", str(tmp_path), "--workers", "1", "--shard", f"{k}/3"]) == 0
    return tmp_path


def test_a_second_merge_says_the_dataset_is_already_merged(reference, tmp_path, capsys):
    shutil.copytree(reference, tmp_path, dirs_exist_ok=True)
    before = dataset_bytes(tmp_path)
    assert creation.main([*FLAGS[:-1], "--out", str(tmp_path), "--merge"]) == 0  # merging is idempotent
    assert capsys.readouterr().err.strip().endswith(f"the dataset was merged already; nothing left to do in {tmp_path}")
    assert dataset_bytes(tmp_path) == before and listing(tmp_path) == listing(reference)


def test_merge_names_a_missing_shard(two_of_three_shards, capsys):
    assert creation.main([*FLAGS, "--out", str(two_of_three_shards), "--merge"]) == 1
    assert "missing 1 of 3 shards: 1/3" in capsys.readouterr().err
    assert not (two_of_three_shards / "annotations.jsonl").exists()


def test_merge_names_the_first_few_missing_shards_and_counts_the_rest(tmp_path, capsys):
    flags = ["--n", "8", "--seed", str(SEED), "--quiet", "--out", str(tmp_path)]
    assert creation.main([*flags, "--workers", "1", "--shard", "3/8"]) == 0
    assert creation.main([*flags, "--merge"]) == 1
    assert "missing 7 of 8 shards: 0/8, 1/8, 2/8, 4/8, 5/8 and 2 more" in capsys.readouterr().err


def test_merge_with_a_mistyped_flag_keeps_the_shard_work_even_with_overwrite(two_of_three_shards, capsys):
    out = two_of_three_shards
    assert creation.main([*FLAGS, "--out", str(out), "--shard", "1/3", "--workers", "1"]) == 0
    before = {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}
    other_seed = ["--n", str(N), "--seed", str(SEED + 1), "--quiet", "--out", str(out), "--merge"]
    for extra in ([], ["--overwrite"]):  # --overwrite replaces another whole dataset, never shard work
        assert creation.main([*other_seed, *extra]) == 1
        err = capsys.readouterr().err
        assert "shards/shard-00000-of-00003.jsonl was made with other flags" in err
        assert "--overwrite" not in err.replace("never removes shard work", "")
        assert {path: path.read_bytes() for path in out.rglob("*") if path.is_file()} == before
    assert creation.main([*FLAGS, "--out", str(out), "--merge"]) == 0


def test_merge_names_a_duplicated_shard(two_of_three_shards, capsys):
    shards = two_of_three_shards / "shards"
    shutil.copy(shards / "shard-00002-of-00003.jsonl", shards / "shard-00002-of-00003-copy.jsonl")
    assert creation.main([*FLAGS, "--out", str(two_of_three_shards), "--merge"]) == 1
    assert "shard 2/3 appears twice" in capsys.readouterr().err


def test_merge_refuses_a_shard_holding_a_foreign_index(two_of_three_shards, capsys):
    path = two_of_three_shards / "shards" / "shard-00000-of-00003.jsonl"
    lines = path.read_text().splitlines()
    record = json.loads(lines[1])
    record["index"] = 1  # belongs to shard 1
    path.write_text("\n".join([lines[0], json.dumps(record), *lines[2:]]) + "\n")
    assert creation.main([*FLAGS, "--out", str(two_of_three_shards), "--shard", "1/3", "--workers", "1"]) == 0
    assert creation.main([*FLAGS, "--out", str(two_of_three_shards), "--merge"]) == 1
    assert "shard-00000-of-00003.jsonl is incomplete or holds indices of another shard" in capsys.readouterr().err


def test_merge_keeps_a_different_datasets_files(two_of_three_shards, tmp_path_factory, capsys):
    out = two_of_three_shards
    assert creation.main([*FLAGS, "--out", str(out), "--shard", "1/3", "--workers", "1"]) == 0
    other = tmp_path_factory.mktemp("other")
    assert creation.main(["--n", "2", "--seed", str(SEED + 1), "--quiet", "--out", str(other), "--workers", "1"]) == 0
    foreign = dataset_bytes(other)
    for name, text in foreign.items():
        (out / name).write_bytes(text)
    assert creation.main([*FLAGS, "--out", str(out), "--merge"]) == 1
    assert "holds a different dataset" in capsys.readouterr().err
    assert dataset_bytes(out) == foreign  # nothing of the other dataset replaced without --overwrite
    assert creation.main([*FLAGS, "--out", str(out), "--merge", "--overwrite"]) == 0
    assert json.loads((out / "data.json").read_text())["config"]["seed"] == SEED


@pytest.mark.parametrize("left", ["shard file", "journal"])
def test_a_shard_of_another_split_is_refused_before_drawing(two_of_three_shards, left, capsys):
    out = two_of_three_shards
    if left == "journal":  # a shard run of the first split still going, or killed, and nothing else
        (out / "shards" / "shard-00002-of-00003.jsonl").rename(out / ".progress-00002-of-00003.jsonl")
        (out / "shards" / "shard-00000-of-00003.jsonl").unlink()
    before = listing(out)
    assert creation.main([*FLAGS, "--out", str(out), "--shard", "1/4", "--workers", "1"]) == 1
    found = "2 file(s), first shards/shard-00000-of-00003.jsonl" if left == "shard file" else \
        "1 file(s), first .progress-00002-of-00003.jsonl"
    assert capsys.readouterr().err.strip().endswith(
        f"{out} holds shard work split 3 ways ({found}); this run is shard 1/4: give every shard the same M, "
        "or move those files away to split the dataset anew")
    assert listing(out) == before
    assert creation.main([*FLAGS, "--out", str(out), "--shard", "1/3", "--workers", "1"]) == 0


def test_merge_refuses_an_image_that_does_not_match(two_of_three_shards, capsys):
    assert creation.main([*FLAGS, "--out", str(two_of_three_shards), "--shard", "1/3", "--workers", "1"]) == 0
    shutil.copy(two_of_three_shards / "images" / "tangled_loops_00000.png",
                two_of_three_shards / "images" / "tangled_loops_00003.png")
    assert creation.main([*FLAGS, "--out", str(two_of_three_shards), "--merge"]) == 1
    assert "images/tangled_loops_00003.png" in capsys.readouterr().err


LONG = ["--n", "40", "--seed", str(SEED), "--quiet", "--workers", "2"]


@pytest.fixture(scope="module")
def long_reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("long_reference")
    assert creation.main([*LONG, "--out", str(out)]) == 0
    return out


def start_and_wait(out, finished_samples):
    """Start a run and return it once its journal holds `finished_samples` records."""
    # Ctrl-C at its default: a shell that starts this suite in the background hands it on ignored,
    # and a run that inherits an ignored SIGINT rightly keeps going.
    process = subprocess.Popen([sys.executable, str(ROOT / "creation.py"), *LONG, "--out", str(out)],
                               stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    journal = out / ".progress.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if journal.exists() and journal.read_text().count("\n") > finished_samples:
            return process
        time.sleep(0.02)
    raise AssertionError("the run finished or stalled before it could be interrupted")


def children_of(pid):
    """Process ids whose parent is pid, from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def running(pid):
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False


def test_run_killed_several_times_then_resumed_equals_one_run(long_reference, tmp_path):
    for finished in (2, 9, 17):
        process = start_and_wait(tmp_path, finished)
        workers = children_of(process.pid)
        process.kill()
        _, err = process.communicate()
        deadline = time.monotonic() + 10
        while any(map(running, workers)) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert workers and not any(map(running, workers))  # they die with the parent, not after their image
        assert "Traceback" not in err
    assert not (tmp_path / "annotations.jsonl").exists()
    (tmp_path / "images" / "tangled_loops_00001.png").write_bytes(b"truncated")
    assert subprocess.run([sys.executable, str(ROOT / "creation.py"), *LONG, "--out", str(tmp_path)],
                          timeout=300).returncode == 0
    assert dataset_bytes(tmp_path) == dataset_bytes(long_reference)
    assert listing(tmp_path) == listing(long_reference)  # no journal, no temporary left


@pytest.mark.parametrize("sent, status, message", [
    (signal.SIGINT, 130, "interrupted"),
    (signal.SIGTERM, 143, "terminated"),  # a batch scheduler's time limit
])
def test_a_signal_to_the_parent_exits_with_one_line_and_resumes(long_reference, tmp_path, sent, status, message):
    process = start_and_wait(tmp_path, 3)
    process.send_signal(sent)
    _, err = process.communicate(timeout=30)
    assert process.returncode == status
    assert err.strip().splitlines() == [f"creation.py: {message}; run the same command again to resume"]
    assert not (tmp_path / "annotations.jsonl").exists()
    assert subprocess.run([sys.executable, str(ROOT / "creation.py"), *LONG, "--out", str(tmp_path)],
                          timeout=300).returncode == 0
    assert dataset_bytes(tmp_path) == dataset_bytes(long_reference)
    assert listing(tmp_path) == listing(long_reference)


def test_ctrl_c_while_the_libraries_load_exits_with_one_line(tmp_path):
    """Ctrl-C before main has set its handler, here the moment numpy starts loading, prints no traceback."""
    (tmp_path / "sitecustomize.py").write_text(
        "import os, signal, sys\n"
        "class InterruptOnNumpy:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'numpy':\n"
        "            sys.meta_path.remove(self)\n"
        "            os.kill(os.getpid(), signal.SIGINT)\n"
        "sys.meta_path.insert(0, InterruptOnNumpy())\n")
    result = subprocess.run([sys.executable, str(ROOT / "creation.py"), "--n", "2", "--out", str(tmp_path / "out")],
                            env={**os.environ, "PYTHONPATH": str(tmp_path)}, capture_output=True, text=True,
                            timeout=60, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert (result.returncode, result.stderr.splitlines()) == (130, ["creation.py: interrupted"])
    assert not (tmp_path / "out").exists()


def test_a_stop_signal_whose_exception_is_lost_still_stops_the_run(tmp_path, monkeypatch):
    """Python prints and ignores an exception raised while a finalizer runs: the run must stop all the same."""
    cfg = creation.Config(n=3, seed=3)
    monkeypatch.setattr(creation.STOP_REQUEST, "stop", None)
    real_sample = creation.make_sample

    def sample_then_lost_interrupt(cfg, index):
        if index == 0:
            try:
                creation.STOP_REQUEST.handle(signal.SIGINT, None)
            except KeyboardInterrupt:
                pass
        return real_sample(cfg, index)

    monkeypatch.setattr(creation, "make_sample", sample_then_lost_interrupt)
    with pytest.raises(KeyboardInterrupt):
        creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True)
    assert not (tmp_path / "annotations.jsonl").exists()
    assert len(list((tmp_path / "images").iterdir())) == 1  # the image drawn before the check is kept for a resume


def write_forever(tmp):
    tmp.write_bytes(b"half an image")
    time.sleep(60)


def test_a_run_stopped_while_a_worker_writes_leaves_no_temporary(tmp_path, monkeypatch):
    """The pool kills its workers outright when a run stops; the parent then removes their half-written files."""
    cfg = creation.Config(n=4, seed=3)
    written = tmp_path / creation.image_name(1, cfg.n)

    def stopping_sample(cfg, index):  # forked workers inherit this patch
        if index == 0:
            while not any(written.parent.glob(".*.tmp*")):  # fail only once sample 1 is mid-write
                time.sleep(0.01)
            raise RuntimeError("stop")
        creation.write_atomic(written, write_forever)

    monkeypatch.setattr(creation, "make_sample", stopping_sample)
    with pytest.raises(RuntimeError, match="stop"):
        creation.generate_dataset(cfg, tmp_path, workers=2, quiet=True)
    assert list((tmp_path / "images").iterdir()) == []


SLOW_LAST_SAMPLE = """
import sys, time
sys.path.insert(0, {root!r})
import creation
drawn = creation.make_sample
def slow_last(cfg, index):
    if index == cfg.n - 1:
        time.sleep(60)
    return drawn(cfg, index)
creation.make_sample = slow_last
sys.exit(creation.main(sys.argv[1:]))
"""


def test_sigterm_to_the_whole_group_with_a_worker_idle_stops_promptly(tmp_path):
    """timeout(1), kill -- -PGID or a batch scheduler signal every process: an idle worker then dies
    holding the job queue's lock, which must not leave the parent waiting for it forever."""
    script = tmp_path / "slow_last.py"
    script.write_text(SLOW_LAST_SAMPLE.format(root=str(ROOT)), encoding="utf-8")
    out = tmp_path / "out"
    process = subprocess.Popen([sys.executable, str(script), "--n", "4", "--seed", "21", "--workers", "2",
                                "--quiet", "--out", str(out)], stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    journal = out / ".progress.jsonl"
    deadline = time.monotonic() + 60
    while not (journal.exists() and journal.read_text().count("\n") > 3) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)  # the other worker is now idle, waiting for a job
    os.killpg(process.pid, signal.SIGTERM)
    try:
        _, err = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise AssertionError("the run hung after SIGTERM")
    assert process.returncode == 143
    assert err.strip().splitlines() == ["creation.py: terminated; run the same command again to resume"]
    assert not [p.name for p in out.rglob(".*") if p.name != ".progress.jsonl"]  # no lock, no temporary


def test_a_second_run_of_the_same_command_is_refused_while_the_first_runs(long_reference, tmp_path, capsys):
    first = start_and_wait(tmp_path, 2)
    assert creation.main([*LONG, "--out", str(tmp_path)]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"creation.py: error: another run is writing this dataset into {tmp_path} right now; "
        "let it finish or stop it, then run again"]
    assert first.wait(timeout=300) == 0
    assert dataset_bytes(tmp_path) == dataset_bytes(long_reference)
    assert listing(tmp_path) == listing(long_reference)  # the lock file is gone too


def test_only_the_same_shard_or_a_merge_waits_for_a_shard_run(tmp_path, capsys):
    with creation.exclusive_run(tmp_path, creation.Shard(1, 3)):
        assert creation.main([*FLAGS, "--out", str(tmp_path), "--shard", "1/3"]) == 1
        assert f"another run is writing shard 1/3 into {tmp_path}" in capsys.readouterr().err
        for k in (0, 2):  # other shards of the same folder run alongside
            assert creation.main([*FLAGS, "--out", str(tmp_path), "--shard", f"{k}/3"]) == 0
    assert creation.main([*FLAGS, "--out", str(tmp_path), "--shard", "1/3"]) == 0
    with creation.exclusive_run(tmp_path, creation.WHOLE_RUN):  # a merge writes what a whole run writes
        assert creation.main([*FLAGS, "--out", str(tmp_path), "--merge"]) == 1
    assert creation.main([*FLAGS, "--out", str(tmp_path), "--merge"]) == 0


def test_a_different_dataset_is_refused_then_replaced_only_with_overwrite(reference, tmp_path):
    shutil.copytree(reference, tmp_path, dirs_exist_ok=True)
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "images" / "holiday.png").write_bytes(b"not the generator's")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    smaller = [sys.executable, str(ROOT / "creation.py"), "--n", "5", "--seed", str(SEED), "--quiet",
               "--out", str(tmp_path), "--workers", "1"]
    refused = subprocess.run(smaller, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 1
    assert "--overwrite" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    assert subprocess.run([*smaller, "--overwrite"], timeout=300).returncode == 0
    images = sorted(p.name for p in (tmp_path / "images").iterdir())
    assert images == ["holiday.png"] + [f"tangled_loops_{i:05d}.png" for i in range(5)]
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert json.loads((tmp_path / "data.json").read_text())["num_samples"] == 5


def test_unwritable_output_gives_one_clear_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = subprocess.run(command(blocker / "out"), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.startswith("creation.py: error: ") and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("text", ["3", "3/3", "-1/3", "a/b", "1/0"])
def test_bad_shard_is_refused(text, tmp_path):
    result = subprocess.run(command(tmp_path, "--shard", text), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "--shard" in result.stderr
    assert listing(tmp_path) == []


def cheap_sample(cfg, index):
    """A stand-in for make_sample with a real record's fields but a tiny image, to isolate bookkeeping memory."""
    image = Image.new("L", (8, 8), index % 256)
    num_loops = creation.loop_count(cfg, index, creation.sample_rng(cfg, index))
    record = {**creation.fixed_fields(cfg, index, num_loops), "num_crossings": 20, "num_self_crossings": 0,
              "min_crossing_angle_deg": 31.5, "loop_redraws": 40, "pixel_sha256": creation.pixel_sha256(image),
              "tracked": []}
    return image, record, None


def count_draws(monkeypatch):
    """Swap in cheap_sample, noting each index drawn in the list returned."""
    drawn = []
    monkeypatch.setattr(creation, "make_sample", lambda cfg, index: drawn.append(index) or cheap_sample(cfg, index))
    return drawn


def records_alive():
    """Records still referenced anywhere; cheap_sample's list field makes the collector track them."""
    gc.collect()  # garbage from earlier tests is not held by anyone
    return sum(1 for thing in gc.get_objects() if isinstance(thing, dict) and "pixel_sha256" in thing)


INDEX_OF_CALL = {  # a function each stage calls once per sample, and how to read the sample's index from its arguments
    "generate": ("make_sample", lambda cfg, index: index),
    "merge": ("check_image", lambda job: job[1]),
    "repeat": ("image_matches", lambda path, sha256, size: int(path.stem.rsplit("_", 1)[1])),
}


@pytest.mark.parametrize("stage", list(INDEX_OF_CALL))
def test_no_stage_holds_the_records(stage, tmp_path, monkeypatch):
    """Memory flat in n: a run, a merge or a repeated run has a few records alive at a time, not all of them."""
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    cfg = creation.Config(n=300, seed=3)
    if stage == "merge":
        for k in range(3):
            creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True, shard=creation.Shard(k, 3))
    if stage == "repeat":
        creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True)
    name, index_of = INDEX_OF_CALL[stage]
    original, alive, before = getattr(creation, name), [], records_alive()  # what other tests' fixtures keep

    def counting(*args):
        if index_of(*args) in (0, cfg.n - 1):  # records read ahead show at the first sample, records kept at the last
            alive.append(records_alive() - before)
        return original(*args)

    monkeypatch.setattr(creation, name, counting)
    if stage == "merge":
        creation.merge_shards(cfg, tmp_path, workers=1, quiet=True)
    else:
        creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True)
    assert len(alive) == 2 and max(alive) <= 5, alive  # a handful in flight, not one per sample
    assert len((tmp_path / "annotations.jsonl").read_text(encoding="utf-8").splitlines()) == cfg.n


def test_merge_reads_one_shard_file_at_a_time(tmp_path, monkeypatch):
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    cfg = creation.Config(n=40, seed=3)
    for k in range(40):
        creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True, shard=creation.Shard(k, 40))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # Room for a few more files than are open now, far fewer than one per shard.
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 20, hard))
    try:
        creation.merge_shards(cfg, tmp_path, workers=1, quiet=True)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert len((tmp_path / "annotations.jsonl").read_text(encoding="utf-8").splitlines()) == cfg.n


def test_a_shard_removes_only_its_own_leftover_temporaries(tmp_path, monkeypatch):
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    images = tmp_path / "images"
    images.mkdir()
    mine, theirs = images / ".tangled_loops_00003.png.tmp99", images / ".tangled_loops_00004.png.tmp99"
    foreign = images / ".other_00003.png.tmp99"
    for path in (mine, theirs, foreign):
        path.write_bytes(b"cut short")
    creation.generate_dataset(creation.Config(n=9, seed=3), tmp_path, workers=1, quiet=True, shard=creation.Shard(0, 3))
    assert not mine.exists() and theirs.exists() and foreign.exists()


def test_finished_and_journalled_samples_are_reused_not_redrawn(tmp_path, monkeypatch):
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    cfg = creation.Config(n=20, seed=3)
    creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True)
    finished = dataset_bytes(tmp_path)
    drawn = count_draws(monkeypatch)
    creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True)
    assert drawn == [] and dataset_bytes(tmp_path) == finished
    lines = (tmp_path / "annotations.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    # A checkout that made every line end CRLF (git's autocrlf) holds the same dataset; the rerun writes LF again.
    for name in ("annotations.jsonl", "data.json"):
        path = tmp_path / name
        path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True)
    assert drawn == [] and dataset_bytes(tmp_path) == finished
    # annotations.jsonl deleted: data.json is never read for records, so the images are drawn again, alike.
    (tmp_path / "annotations.jsonl").unlink()
    creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True)
    assert drawn == list(range(20)) and dataset_bytes(tmp_path) == finished
    drawn.clear()
    # An interrupted run: a journal holding the first ten records, a line cut short, no dataset files.
    header = json.dumps(creation.identity(cfg)) + "\n"
    (tmp_path / ".progress.jsonl").write_text(header + "".join(lines[:10]) + lines[10][:40], encoding="utf-8")
    (tmp_path / "annotations.jsonl").unlink()
    (tmp_path / "data.json").unlink()
    creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True)
    assert drawn == list(range(10, 20)) and dataset_bytes(tmp_path) == finished


def test_an_edited_record_is_drawn_again_not_copied_into_data_json(tmp_path, monkeypatch):
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    cfg = creation.Config(n=12, seed=3)
    creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True)
    finished = dataset_bytes(tmp_path)
    lines = (tmp_path / "annotations.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    edited = json.loads(lines[4])
    edited["answer"] = 99
    lines[4] = json.dumps(edited) + "\n"
    (tmp_path / "annotations.jsonl").write_text("".join(lines), encoding="utf-8")
    drawn = count_draws(monkeypatch)
    creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True)
    assert drawn == [4] and dataset_bytes(tmp_path) == finished


def test_annotations_without_data_json_are_rewritten_or_refused_never_reused(tmp_path, monkeypatch):
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    cfg = creation.Config(n=12, seed=3)
    creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True)
    finished = dataset_bytes(tmp_path)
    (tmp_path / "data.json").unlink()
    drawn = count_draws(monkeypatch)
    # Nothing in annotations.jsonl names the settings that drew the images (here another stroke width).
    thicker = creation.Config(n=12, seed=3, stroke_width=4.0)
    creation.generate_dataset(thicker, tmp_path, workers=1, quiet=True)
    assert drawn == list(range(12))
    assert json.loads((tmp_path / "data.json").read_text(encoding="utf-8"))["config"]["stroke_width"] == 4.0
    (tmp_path / "data.json").unlink()
    other = creation.Config(n=12, seed=4)  # another seed: other answers under the same file names
    with pytest.raises(creation.DatasetError, match=r"different dataset \(annotations.jsonl: line 1: index 0: seed 3, not 4;"):
        creation.generate_dataset(other, tmp_path, workers=1, quiet=True)
    assert (tmp_path / "annotations.jsonl").read_bytes() == finished["annotations.jsonl"]
    creation.generate_dataset(other, tmp_path, workers=1, quiet=True, overwrite=True)
    assert json.loads((tmp_path / "data.json").read_text(encoding="utf-8"))["config"]["seed"] == 4


def test_merge_refuses_an_edited_record(tmp_path, monkeypatch):
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    cfg = creation.Config(n=6, seed=3)
    for k in range(2):
        creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True, shard=creation.Shard(k, 2))
    shard_file = tmp_path / "shards" / "shard-00001-of-00002.jsonl"
    lines = shard_file.read_text(encoding="utf-8").splitlines(keepends=True)
    edited = json.loads(lines[1])
    edited["answer"] += 1
    lines[1] = json.dumps(edited) + "\n"
    shard_file.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(creation.DatasetError, match="1 image.* not matching their record"):
        creation.merge_shards(cfg, tmp_path, workers=1, quiet=True)


def test_a_lock_file_removed_before_it_was_locked_guards_nothing(tmp_path):
    lock_path = tmp_path / ".progress.lock"
    with creation.exclusive_run(tmp_path, creation.WHOLE_RUN):
        late = open(lock_path, "a")  # a run that opened the file just before the first removed it
    try:
        with creation.exclusive_run(tmp_path, creation.WHOLE_RUN):  # a third run, on a new file
            fcntl.flock(late, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the removed file can still be locked...
            assert not creation.locks_its_path(late, lock_path)  # ...and is known not to be the path's
            with pytest.raises(creation.DatasetError, match="another run"):
                with creation.exclusive_run(tmp_path, creation.WHOLE_RUN):
                    pass
    finally:
        late.close()
    assert not lock_path.exists()


def test_main_runs_outside_the_main_thread(tmp_path, monkeypatch):
    """A harness may call main() from a worker thread, where signal handlers cannot be set."""
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    results = []
    thread = threading.Thread(target=lambda: results.append(
        creation.main([*FLAGS, "--out", str(tmp_path), "--workers", "1"])))
    thread.start()
    thread.join(timeout=120)
    assert results == [0]


@pytest.mark.parametrize("text", ["[1, 2, 3]", "not json", '"a string"'])
def test_a_data_json_this_generator_did_not_write_is_refused(text, tmp_path, monkeypatch):
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    (tmp_path / "data.json").write_text(text, encoding="utf-8")
    with pytest.raises(creation.DatasetError, match=r"data.json is not a file this generator writes"):
        creation.generate_dataset(creation.Config(n=3, seed=3), tmp_path, workers=1, quiet=True)
    assert (tmp_path / "data.json").read_text(encoding="utf-8") == text


def test_overwrite_removes_a_foreign_shard_but_keeps_this_datasets_records(tmp_path, monkeypatch):
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    cfg = creation.Config(n=12, seed=3)
    creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True)
    finished = dataset_bytes(tmp_path)
    foreign = tmp_path / "shards" / "shard-00000-of-00002.jsonl"
    foreign.parent.mkdir()
    foreign.write_text(json.dumps(creation.identity(creation.Config(n=12, seed=4))) + "\n", encoding="utf-8")
    drawn = count_draws(monkeypatch)
    creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True, overwrite=True)
    assert not foreign.exists() and drawn == [] and dataset_bytes(tmp_path) == finished


def test_default_workers_follow_the_cores_this_process_may_use(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert creation.build_parser().parse_args([]).workers == 1


@pytest.fixture
def pool_sizes(monkeypatch) -> list[int]:
    """The worker count of every process pool a run starts, in order."""
    started = []

    class Recording(creation.ProcessPoolExecutor):
        def __init__(self, workers, **options):
            started.append(workers)
            super().__init__(workers, **options)

    monkeypatch.setattr(creation, "ProcessPoolExecutor", Recording)
    return started


def test_a_pool_starts_no_more_workers_than_there_are_images(tmp_path, monkeypatch, pool_sizes):
    monkeypatch.setattr(creation, "usable_cores", lambda: 16)  # so that --workers 16 is allowed on any machine
    assert creation.main(["--n", "3", "--seed", "3", "--quiet", "--out", str(tmp_path / "a"), "--workers", "16"]) == 0
    shard = ["--n", "7", "--seed", "3", "--quiet", "--workers", "16", "--shard"]
    assert creation.main([*shard, "0/3", "--out", str(tmp_path / "b")]) == 0  # images 0, 3 and 6
    assert creation.main([*shard, "1/6", "--out", str(tmp_path / "c")]) == 0  # image 1 alone, drawn without a pool
    assert pool_sizes == [3, 3]


def test_more_than_four_workers_per_core_is_bad_input_in_one_line(tmp_path, monkeypatch, pool_sizes, capsys):
    monkeypatch.setattr(creation, "usable_cores", lambda: 2)
    with pytest.raises(SystemExit) as stop:
        creation.main(["--n", "4", "--seed", "3", "--quiet", "--out", str(tmp_path / "out"), "--workers", "9"])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and "--workers must be at most 8 (4 per core" in err[0], err
    assert pool_sizes == [] and list(tmp_path.iterdir()) == []


def test_workers_are_forked_whatever_the_default_start_method(tmp_path):
    """Python 3.14 makes forkserver Linux's default; workers must still be this process's children."""
    code = ("import multiprocessing, sys; multiprocessing.set_start_method('forkserver'); "
            f"sys.path.insert(0, {str(ROOT)!r}); import creation; "
            f"sys.exit(creation.main({[*FLAGS, '--out', str(tmp_path), '--workers', '2']!r}))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_a_rerun_says_which_images_it_kept_and_which_it_drew(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    args = ["--n", "6", "--seed", "3", "--out", str(tmp_path), "--workers", "1"]
    assert creation.main(args) == 0
    assert capsys.readouterr().err.strip().endswith(f"wrote 6 images and annotations.jsonl, data.json in {tmp_path}")
    (tmp_path / "images" / "tangled_loops_00002.png").unlink()
    assert creation.main(args) == 0
    assert capsys.readouterr().err.strip().endswith(
        f"kept 5 of 6 images, which match their records, drew 1, and wrote annotations.jsonl, data.json in {tmp_path}")


@pytest.mark.parametrize("name, shard", [("annotations.jsonl", creation.WHOLE_RUN), ("data.json", creation.WHOLE_RUN),
                                         ("shards/shard-00001-of-00002.jsonl", creation.Shard(1, 2))])
def test_a_folder_where_the_run_writes_a_file_is_refused_before_drawing(name, shard, tmp_path, monkeypatch):
    (tmp_path / name).mkdir(parents=True)
    drawn = count_draws(monkeypatch)
    with pytest.raises(creation.DatasetError, match=f"{name} is a folder, not a file"):
        creation.generate_dataset(creation.Config(n=4, seed=3), tmp_path, workers=1, quiet=True, shard=shard)
    assert drawn == []


def test_settings_that_draw_nothing_leave_nothing_that_refuses_the_suggested_fix(tmp_path, monkeypatch):
    def impossible(cfg, index):
        raise creation.PlacementError(f"sample {index} (seed {cfg.seed}): ...: lower --min-curl-px")

    monkeypatch.setattr(creation, "make_sample", impossible)
    with pytest.raises(creation.PlacementError):
        creation.generate_dataset(creation.Config(n=4, seed=3, min_curl_px=90), tmp_path, workers=1, quiet=True)
    assert sorted(os.listdir(tmp_path)) == []  # no journal, no empty images folder
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    assert creation.generate_dataset(creation.Config(n=4, seed=3, min_curl_px=20), tmp_path, workers=1, quiet=True) == 4


def refused_write(image, target):
    raise PermissionError(errno.EACCES, "Permission denied", str(target))


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_folder_that_takes_no_image_names_the_image_and_leaves_nothing_behind(tmp_path, monkeypatch, capsys,
                                                                                  workers):
    monkeypatch.setattr(creation, "save_png", refused_write)  # forked workers inherit it
    out = tmp_path / "made"
    assert creation.main([*FLAGS, "--out", str(out), "--workers", workers]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"creation.py: error: {out / creation.image_name(0, N)}: Permission denied"]
    assert list(tmp_path.iterdir()) == []  # no journal, no images folder, not even the --out folder it made


def test_a_failing_shard_leaves_the_shared_images_folder_and_an_unrecorded_image_keeps_the_journal(tmp_path,
                                                                                                    monkeypatch):
    def impossible(cfg, index):
        raise creation.PlacementError(f"sample {index}: ...")

    monkeypatch.setattr(creation, "make_sample", impossible)
    cfg = creation.Config(n=4, seed=3)
    with pytest.raises(creation.PlacementError):
        creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True, shard=creation.Shard(0, 2))
    # Another shard's run may have found the folder made and be about to write there.
    assert (tmp_path / "images").is_dir() and not creation.journal_path(tmp_path, creation.Shard(0, 2)).exists()
    # An image another worker wrote before the failure, whose record never reached the journal.
    (tmp_path / "other" / "images").mkdir(parents=True)
    (tmp_path / "other" / creation.image_name(1, cfg.n)).write_bytes(b"png")
    with pytest.raises(creation.PlacementError):
        creation.generate_dataset(cfg, tmp_path / "other", workers=1, quiet=True)
    assert (tmp_path / "other" / ".progress.jsonl").exists()


@pytest.mark.parametrize("failure", [creation.PlacementError, PermissionError])
def test_a_failure_after_some_images_keeps_them_for_the_same_settings(tmp_path, monkeypatch, failure):
    def fails_at_two(cfg, index):
        if index == 2:
            raise creation.PlacementError("sample 2: ...")
        return cheap_sample(cfg, index)

    save_png = creation.save_png
    if failure is creation.PlacementError:
        monkeypatch.setattr(creation, "make_sample", fails_at_two)
    else:
        def refuses_image_2(image, target):
            (refused_write if "00002" in str(target) else save_png)(image, target)

        monkeypatch.setattr(creation, "make_sample", cheap_sample)
        monkeypatch.setattr(creation, "save_png", refuses_image_2)
    cfg = creation.Config(n=4, seed=3)
    with pytest.raises(failure):
        creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True)
    assert (tmp_path / ".progress.jsonl").exists() and len(os.listdir(tmp_path / "images")) == 2
    monkeypatch.setattr(creation, "save_png", save_png)
    drawn = count_draws(monkeypatch)
    creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True)
    assert drawn == [2, 3]


def test_a_file_named_images_is_refused_in_one_line_and_a_refused_run_makes_no_images_folder(tmp_path, monkeypatch):
    drawn = count_draws(monkeypatch)
    (tmp_path / "images").write_text("notes")
    with pytest.raises(creation.BadOutput, match="images is a file, not a folder"):
        creation.generate_dataset(creation.Config(n=4, seed=3), tmp_path, workers=1, quiet=True)
    other = tmp_path / "other"
    creation.generate_dataset(creation.Config(n=4, seed=3), other, workers=1, quiet=True, shard=creation.Shard(0, 2))
    (other / "images").rename(tmp_path / "kept")
    with pytest.raises(creation.DatasetError, match="different dataset"):
        creation.generate_dataset(creation.Config(n=4, seed=4), other, workers=1, quiet=True, shard=creation.Shard(0, 2))
    assert not (other / "images").exists() and drawn == [0, 2]


@pytest.mark.parametrize("name, flags", [("scenes", {"scenes": True}), ("review", {"overlays": True}),
                                         ("review/overlays", {"overlays": True})])
def test_a_file_where_a_flag_writes_its_folder_is_refused_in_one_line(name, flags, tmp_path, monkeypatch):
    drawn = count_draws(monkeypatch)
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text("notes")
    with pytest.raises(creation.BadOutput, match=f"{name} is a file, not a folder"):
        creation.generate_dataset(creation.Config(n=4, seed=3), tmp_path, workers=1, quiet=True, **flags)
    assert drawn == [] and not (tmp_path / "images").exists()


def test_a_whole_run_or_an_overwrite_leaves_no_empty_shards_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    cfg = creation.Config(n=6, seed=3)
    creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True, shard=creation.Shard(0, 2))
    creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True)  # takes the finished shard's records
    assert not (tmp_path / "shards").exists()
    creation.generate_dataset(cfg, tmp_path / "other", workers=1, quiet=True, shard=creation.Shard(1, 2))
    creation.generate_dataset(creation.Config(n=6, seed=4), tmp_path / "other", workers=1, quiet=True, overwrite=True)
    assert not (tmp_path / "other" / "shards").exists()


def test_overwrite_removes_the_replaced_datasets_images_the_new_one_does_not_name(tmp_path, monkeypatch):
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    creation.generate_dataset(creation.Config(n=8, seed=3), tmp_path, workers=1, quiet=True)
    shutil.copytree(tmp_path / "images", tmp_path / "review" / "overlays")  # stand-ins for its overlays
    creation.generate_dataset(creation.Config(n=5, seed=4), tmp_path, workers=1, quiet=True, overwrite=True)
    names = [f"tangled_loops_{i:05d}.png" for i in range(5)]
    assert sorted(p.name for p in (tmp_path / "images").iterdir()) == names
    assert not (tmp_path / "review").exists()  # no overlay outlives the image it showed, nor their empty folder


def test_overwrite_leaves_no_empty_folders_of_the_replaced_dataset(tmp_path):
    """A stranger review: replacing a dataset made with --scenes --overlays left empty scenes/ and review/overlays/."""
    creation.generate_dataset(creation.Config(n=2, seed=3), tmp_path, workers=1, quiet=True, overlays=True,
                              scenes=True)
    assert (tmp_path / "scenes").is_dir() and (tmp_path / "review" / "overlays").is_dir()
    creation.generate_dataset(creation.Config(n=2, seed=4), tmp_path, workers=1, quiet=True, overwrite=True)
    assert not (tmp_path / "scenes").exists() and not (tmp_path / "review").exists()
    assert len(list((tmp_path / "images").iterdir())) == 2


def test_a_whole_run_removes_an_interrupted_shards_journal_unless_its_lock_is_held(tmp_path, monkeypatch):
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    cfg = creation.Config(n=6, seed=3)
    header = json.dumps(creation.identity(cfg)) + "\n"
    idle, busy = (creation.journal_path(tmp_path, creation.Shard(k, 3)) for k in (0, 1))
    idle.write_text(header, encoding="utf-8")
    busy.write_text(header, encoding="utf-8")
    busy.with_suffix(".lock").touch()  # a shard run holds it
    creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True)
    assert not idle.exists() and busy.exists()


def test_an_empty_data_json_is_no_dataset_and_is_written_over(tmp_path, monkeypatch):
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    (tmp_path / "data.json").write_bytes(b"")  # a copy cut short, say: it holds nobody's dataset
    creation.generate_dataset(creation.Config(n=3, seed=3), tmp_path, workers=1, quiet=True)
    assert json.loads((tmp_path / "data.json").read_text(encoding="utf-8"))["num_samples"] == 3


@pytest.mark.parametrize("cut_at", [200, 500])
def test_a_data_json_cut_short_inside_its_head_is_no_dataset_and_is_written_over(cut_at, tmp_path, monkeypatch):
    # As an empty one: it was "a different dataset (data.json: n missing, ...)" before.
    cfg = creation.Config(n=4, seed=3)
    expected = clean_run(tmp_path, monkeypatch, cfg)
    data = tmp_path / "clean" / "data.json"
    data.write_bytes(data.read_bytes()[:cut_at])  # the head names the generator, the config is cut
    creation.generate_dataset(cfg, tmp_path / "clean", workers=1, quiet=True)
    assert dataset_bytes(tmp_path / "clean") == expected


# ---------------------------------------------------------------------------
# Hostile or damaged folders (issue 16): no foreign file deleted, no traceback, no hang


def clean_run(tmp_path, monkeypatch, cfg):
    """A clean cheap run of cfg in a folder of its own: the bytes every repaired rerun must end with."""
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    creation.generate_dataset(cfg, tmp_path / "clean", workers=1, quiet=True)
    return dataset_bytes(tmp_path / "clean")


@pytest.mark.parametrize("images_elsewhere", [False, True])
def test_overwrite_deletes_only_images_the_replaced_datasets_records_name_and_match(
        tmp_path, monkeypatch, images_elsewhere):
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    out = tmp_path / "out"
    out.mkdir()
    if images_elsewhere:  # a symlinked images/ is written through, but nothing is deleted out of the folder
        (tmp_path / "elsewhere").mkdir()
        (out / "images").symlink_to(tmp_path / "elsewhere")
    creation.generate_dataset(creation.Config(n=10, seed=1), out, workers=1, quiet=True)
    images = out / "images"
    (images / "tangled_loops_99999.png").write_bytes(os.urandom(3000))  # looks like the tool's, is not
    shutil.copy(images / "tangled_loops_00000.png", images / "tangled_loops_00009.png")  # not its bytes any more
    assert creation.main(["--n", "5", "--seed", "2", "--out", str(out), "--overwrite", "--quiet",
                          "--workers", "1"]) == 0
    left = sorted(p.name for p in images.iterdir())
    new = [f"tangled_loops_{i:05d}.png" for i in range(5)]
    replaced = [f"tangled_loops_{i:05d}.png" for i in range(5, 10)]
    kept = replaced if images_elsewhere else ["tangled_loops_00009.png"]
    assert left == sorted(new + kept + ["tangled_loops_99999.png"])


def png_claiming(width, height):
    """The signature and IHDR chunk of a PNG of that size, and no pixels: a decompression-bomb header."""
    ihdr = b"IHDR" + width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([8, 0, 0, 0, 0])
    chunk = len(ihdr[4:]).to_bytes(4, "big") + ihdr + zlib.crc32(ihdr).to_bytes(4, "big")
    return b"\x89PNG\r\n\x1a\n" + chunk


def test_whatever_sits_at_an_image_path_is_redrawn_never_decoded_blindly_or_waited_on(tmp_path):
    clean, out = tmp_path / "clean", tmp_path / "out"
    args = ["--n", "5", "--seed", str(SEED), "--size", "256", "--original-shapes", "--min-radius", "40", "--max-radius", "70",
            "--interior-margin", "20", "--min-loops", "2", "--max-loops", "3", "--quiet", "--workers", "1"]
    run = [sys.executable, str(ROOT / "creation.py"), *args]
    assert subprocess.run([*run, "--out", str(clean)], timeout=120).returncode == 0
    shutil.copytree(clean, out)
    images = out / "images"
    (images / "tangled_loops_00001.png").write_bytes(png_claiming(20000, 20000))
    (images / "tangled_loops_00002.png").unlink()
    os.mkfifo(images / "tangled_loops_00002.png")
    outside = tmp_path / "outside.png"
    shutil.copy(images / "tangled_loops_00003.png", outside)  # the right pixels, but through a symlink
    (images / "tangled_loops_00003.png").unlink()
    (images / "tangled_loops_00003.png").symlink_to(outside)
    before = outside.read_bytes()
    result = subprocess.run([*run, "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stderr == ""
    assert dataset_bytes(out) == dataset_bytes(clean) and listing(out) == listing(clean)
    for i in (1, 2, 3):
        path = images / f"tangled_loops_{i:05d}.png"
        assert path.is_file() and not path.is_symlink()
        assert path.read_bytes() == (clean / "images" / path.name).read_bytes()
    assert outside.read_bytes() == before


DAMAGED_LINES = {
    "deeply nested": b"[" * 100_000 + b"\n",
    "not UTF-8": b'{"index": "\xff\xfe"}\n',
    "a huge number": b'{"index": 1' + b"0" * 5000 + b"}\n",
    "NaN": b'{"index": 1, "min_crossing_angle_deg": NaN}\n',
    "longer than any record": b'{"index": 1, "pad": "' + b"x" * 200_000 + b'"}\n',
}


@pytest.mark.parametrize("damage", list(DAMAGED_LINES))
@pytest.mark.parametrize("where", ["header", "record"])
def test_a_damaged_journal_is_read_as_damaged_never_a_traceback(damage, where, tmp_path, monkeypatch):
    cfg = creation.Config(n=6, seed=3)
    expected = clean_run(tmp_path, monkeypatch, cfg)
    out = tmp_path / "out"
    out.mkdir()
    header = json.dumps(creation.identity(cfg)).encode() + b"\n"
    good = (tmp_path / "clean" / "annotations.jsonl").read_bytes().splitlines(keepends=True)
    lines = [DAMAGED_LINES[damage]] + good if where == "header" else [header, good[0], DAMAGED_LINES[damage], *good[1:3]]
    (out / ".progress.jsonl").write_bytes(b"".join(lines))
    assert creation.main(["--n", "6", "--seed", "3", "--out", str(out), "--quiet", "--workers", "1"]) == 0
    assert dataset_bytes(out) == expected and not (out / ".progress.jsonl").exists()


@pytest.mark.parametrize("damage", list(DAMAGED_LINES))
def test_a_damaged_data_json_is_refused_in_one_line(damage, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    (tmp_path / "data.json").write_bytes(DAMAGED_LINES[damage])
    args = ["--n", "3", "--seed", "3", "--out", str(tmp_path), "--quiet", "--workers", "1"]
    assert creation.main(args) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"creation.py: error: {tmp_path / 'data.json'} is not a file this generator writes "
        f"({creation.NOT_OURS}): move it away or pass --overwrite to replace it"]
    assert (tmp_path / "data.json").read_bytes() == DAMAGED_LINES[damage]
    assert creation.main([*args, "--overwrite"]) == 0


@pytest.mark.parametrize("field, value", [("answer", float), ("index", bool), ("seed", bool), ("width", float)])
def test_a_record_equal_only_loosely_is_drawn_again(field, value, tmp_path, monkeypatch):
    cfg = creation.Config(n=6, seed=1)  # seed 1, so True == seed; index 1, so True == index
    expected = clean_run(tmp_path, monkeypatch, cfg)
    out = tmp_path / "out"
    shutil.copytree(tmp_path / "clean", out)
    lines = (out / "annotations.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    record = json.loads(lines[1])
    record[field] = value(record[field])
    lines[1] = json.dumps(record) + "\n"
    (out / "annotations.jsonl").write_text("".join(lines), encoding="utf-8")
    drawn = count_draws(monkeypatch)
    creation.generate_dataset(cfg, out, workers=1, quiet=True)
    assert drawn == [1] and dataset_bytes(out) == expected


def kill_points(folder, shards):
    """Each state a --merge killed at some point leaves, made by hand from the merged folder and its shard files."""
    def temporaries():
        for name, content in shards.items():
            (folder / "shards" / name).write_bytes(content)
        (folder / "data.json").unlink()
        (folder / ".annotations.jsonl.tmp4242").write_text("half")
        (folder / ".progress.lock").touch()

    def annotations_only():
        temporaries()
        (folder / ".annotations.jsonl.tmp4242").unlink()

    def all_shards_left():
        for name, content in shards.items():
            (folder / "shards" / name).write_bytes(content)

    def one_shard_left():
        name, content = next(iter(shards.items()))
        (folder / "shards" / name).write_bytes(content)

    def empty_shards_folder():
        pass

    return {f.__name__: f for f in (temporaries, annotations_only, all_shards_left, one_shard_left, empty_shards_folder)}


@pytest.mark.parametrize("point", ["temporaries", "annotations_only", "all_shards_left", "one_shard_left",
                                   "empty_shards_folder"])
def test_merge_rerun_after_a_kill_at_any_point_ends_merged_with_nothing_left(point, tmp_path, monkeypatch):
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    cfg = creation.Config(n=6, seed=3)
    for k in range(2):
        creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True, shard=creation.Shard(k, 2))
    shards = {p.name: p.read_bytes() for p in (tmp_path / "shards").iterdir()}
    creation.merge_shards(cfg, tmp_path, workers=1, quiet=True)
    merged, files = dataset_bytes(tmp_path), listing(tmp_path)
    (tmp_path / "shards").mkdir()
    kill_points(tmp_path, shards)[point]()
    assert creation.main(["--n", "6", "--seed", "3", "--out", str(tmp_path), "--merge", "--quiet", "--workers", "1"]) == 0
    assert dataset_bytes(tmp_path) == merged and listing(tmp_path) == files


def test_a_live_run_of_another_dataset_is_named_as_such(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    live = creation.Config(n=6, seed=1)
    with creation.exclusive_run(tmp_path, creation.WHOLE_RUN):
        (tmp_path / ".progress.jsonl").write_text(json.dumps(creation.identity(live)) + "\n")
        assert creation.main(["--n", "6", "--seed", "2", "--out", str(tmp_path), "--quiet"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"creation.py: error: another run is writing a different dataset (seed 1, not 2) into {tmp_path} "
        "right now; let it finish or stop it, then run again"]


def test_a_different_dataset_is_told_by_what_differs(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    assert creation.main(["--n", "4", "--seed", "1", "--out", str(tmp_path), "--quiet"]) == 0
    (tmp_path / "annotations.jsonl").unlink()  # data.json alone says whose the folder is
    assert creation.main(["--n", "5", "--seed", "2", "--out", str(tmp_path), "--quiet"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"creation.py: error: {tmp_path} holds a different dataset (data.json: n 4, not 5; seed 1, not 2); "
        "choose another --out or pass --overwrite to replace it"]


def test_out_naming_a_file_is_bad_input_in_one_true_line(tmp_path, capsys):
    (tmp_path / "file").write_text("mine")
    assert creation.main([*FLAGS, "--out", str(tmp_path / "file")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"creation.py: error: --out {tmp_path / 'file'} is a file, not a folder"]
    assert creation.main([*FLAGS, "--out", str(tmp_path / "file"), "--merge"]) == 2
    assert (tmp_path / "file").read_text() == "mine"


def test_an_out_folder_this_user_cannot_write_is_bad_input_in_one_line(tmp_path, monkeypatch, capsys):
    # Run as root, the tests cannot take write permission away, so the check is asked about this folder.
    out = tmp_path / "read-only"
    out.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: Path(path) != out and real_access(path, mode, **kw))
    for extra in ([], ["--merge"]):
        assert creation.main([*FLAGS, "--out", str(out), *extra]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [
            f"creation.py: error: --out {out} is not writable (its permissions, or a read-only file system): "
            "choose another folder"]
    assert list(out.iterdir()) == []


def test_an_out_folder_that_cannot_be_made_is_bad_input_named_as_such(tmp_path, capsys):
    out = tmp_path / "made" / ("x" * 300)  # longer than any file system allows a name to be
    assert creation.main([*FLAGS, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"creation.py: error: cannot make the --out folder {out}: ")
    assert list(tmp_path.iterdir()) == []  # the parent it made on the way is gone again


def test_an_out_link_to_nothing_is_bad_input_that_says_so(tmp_path, capsys):
    (tmp_path / "out").symlink_to(tmp_path / "gone")
    assert creation.main([*FLAGS, "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"creation.py: error: --out {tmp_path / 'out'} is a symbolic link to {tmp_path / 'gone'}, which does not exist"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize("stage", ["remove_taken_shard_files", "write_contact_sheet"])
def test_a_stop_once_the_dataset_is_complete_does_not_ask_to_resume(stage, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    args = ["--n", "4", "--seed", "3", "--out", str(tmp_path), "--quiet", "--workers", "1", "--contact-sheet", "2"]
    original = getattr(creation, stage)

    def terminated(*args):
        raise creation.Terminated

    monkeypatch.setattr(creation, stage, terminated)
    assert creation.main(args) == 143
    assert capsys.readouterr().err.strip().splitlines() == [
        "creation.py: terminated; the dataset was already complete; the same command again only tidies up"]
    monkeypatch.setattr(creation, stage, original)
    drawn = count_draws(monkeypatch)
    assert creation.main(args) == 0 and drawn == []
    assert (tmp_path / "review" / "contact_sheet.png").is_file()
    assert not [p.name for p in tmp_path.rglob(".*")]


@pytest.mark.parametrize("name", [".progress.lock", ".progress.jsonl", ".progress-00000-of-00002.lock",
                                  ".progress-00000-of-00002.jsonl"])
@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_the_runs_own_hidden_files_are_never_written_through(name, kind, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    out, outside = tmp_path / "out", tmp_path / "outside"
    out.mkdir()
    if kind == "symlink":
        (out / name).symlink_to(outside)
    else:
        os.mkfifo(out / name)
    shard = ["--shard", "0/2"] if "-of-" in name else []
    assert creation.main(["--n", "4", "--seed", "3", "--out", str(out), "--quiet", "--workers", "1", *shard]) == 2
    what = "a symbolic link" if kind == "symlink" else "a named pipe"
    assert capsys.readouterr().err.strip().splitlines() == [
        f"creation.py: error: {out / name} is {what}, not a file: the run never reads or writes through one; "
        "move it away"]
    assert not outside.exists()


@pytest.mark.parametrize("text", ["my own annotations\n", "[1, 2]\n", '{"image": "cat.png"}\n'])
def test_an_annotations_file_this_generator_did_not_write_is_bad_input_not_a_dataset(text, tmp_path, monkeypatch):
    drawn = count_draws(monkeypatch)
    (tmp_path / "annotations.jsonl").write_text(text, encoding="utf-8")
    with pytest.raises(creation.BadOutput, match=r"annotations.jsonl is not a file this generator writes "
                                                 r"\(its first line is no record of this generator\)"):
        creation.generate_dataset(creation.Config(n=3, seed=3), tmp_path, workers=1, quiet=True)
    assert (tmp_path / "annotations.jsonl").read_text(encoding="utf-8") == text and drawn == []
    creation.generate_dataset(creation.Config(n=3, seed=3), tmp_path, workers=1, quiet=True, overwrite=True)
    assert drawn == [0, 1, 2]  # the message offers --overwrite, which replaces it


@pytest.mark.parametrize("merge", [False, True])
def test_an_export_folder_is_refused_as_out_even_with_overwrite(merge, tmp_path, monkeypatch):
    drawn = count_draws(monkeypatch)
    (tmp_path / creation.EXPORT_MARKER_FILE).write_text("{}", encoding="utf-8")
    (tmp_path / "annotations.jsonl").write_text("", encoding="utf-8")
    before = listing(tmp_path)
    with pytest.raises(creation.BadOutput, match=rf"is an export \({creation.EXPORT_MARKER_FILE} marks it\)"):
        if merge:
            creation.merge_shards(creation.Config(n=3, seed=3), tmp_path, workers=1, quiet=True, overwrite=True)
        else:
            creation.generate_dataset(creation.Config(n=3, seed=3), tmp_path, workers=1, quiet=True, overwrite=True)
    assert listing(tmp_path) == before and drawn == []


def test_the_export_marker_is_the_one_export_py_writes():
    sys.path.insert(0, str(ROOT))
    import export
    assert creation.EXPORT_MARKER_FILE == export.MARKER_FILE


@pytest.mark.parametrize("extras", [{}, {"overlays": True, "scenes": True}])
@pytest.mark.parametrize("fails", ["placement", "refusal"])
def test_a_failed_or_refused_run_removes_the_folders_it_made(fails, extras, tmp_path, monkeypatch):
    def impossible(cfg, index):
        raise creation.PlacementError(f"sample {index}: ...")

    def refused(*args):
        raise creation.BadOutput("refused")

    monkeypatch.setattr(creation, "make_sample", impossible)
    if fails == "refusal":  # a run refused inside the lock, after the folder was made
        monkeypatch.setattr(creation, "refuse_non_files_at_targets", refused)
    with pytest.raises((creation.PlacementError, creation.BadOutput)):
        creation.generate_dataset(creation.Config(n=4, seed=3), tmp_path / "new" / "deeper", workers=1,
                                  quiet=True, **extras)
    assert listing(tmp_path) == []


def test_a_failed_shard_run_keeps_the_folder_other_shards_may_be_writing_to(tmp_path, monkeypatch):
    def impossible(cfg, index):
        raise creation.PlacementError(f"sample {index}: ...")

    monkeypatch.setattr(creation, "make_sample", impossible)
    with pytest.raises(creation.PlacementError):
        creation.generate_dataset(creation.Config(n=4, seed=3), tmp_path / "new", workers=1, quiet=True,
                                  shard=creation.Shard(0, 2))
    assert (tmp_path / "new").is_dir()


def test_a_split_into_more_shards_than_images_made_before_its_refusal_still_merges(tmp_path):
    # The command line now refuses M > n, but such shard sets exist, and their files are complete.
    cfg = creation.Config(n=2, seed=SEED)
    for k in range(3):
        creation.generate_dataset(cfg, tmp_path, 1, True, creation.Shard(k, 3))
    assert creation.main(["--n", "2", "--seed", str(SEED), "--quiet", "--out", str(tmp_path), "--merge"]) == 0
    assert len((tmp_path / "annotations.jsonl").read_text().splitlines()) == 2
