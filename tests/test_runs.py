"""Runs that span machines or survive interruption: shards, merge, resume, refusals, signals, the lock."""

import errno
import fcntl
import gc
import json
import os
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
STATE = creation.STATE_DIR


def command(out, *extra):
    return [sys.executable, str(ROOT / "creation.py"), *FLAGS, "--out", str(out), *extra]


def dataset_bytes(folder):
    return {name: (folder / name).read_bytes() for name in ("annotations.jsonl", "data.json")}


def listing(folder):
    """Every path under folder but the run file, which a shard run adds its split to."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.name != "run.json")


def records(folder):
    return folder / STATE / "records"


def leftovers(folder):
    """Temporaries anywhere under the folder: files in the run's tmp/, or hidden files beside the dataset's."""
    tmp = folder / STATE / "tmp"
    return [p for p in tmp.rglob("*") if p.is_file()] if tmp.exists() else []


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("reference")
    assert creation.main([*FLAGS, "--out", str(out), "--workers", "2"]) == 0
    return out


# ---------------------------------------------------------------------------
# Shards and merge


def test_three_shards_merge_to_exactly_one_run(reference, tmp_path):
    for k in range(3):
        assert creation.main([*FLAGS, "--out", str(tmp_path), "--workers", "1", "--shard", f"{k}/3"]) == 0
        assert not (tmp_path / "annotations.jsonl").exists()
    assert creation.main([*FLAGS, "--out", str(tmp_path), "--merge"]) == 0
    assert dataset_bytes(tmp_path) == dataset_bytes(reference)
    assert listing(tmp_path) == listing(reference)
    assert creation.main([*FLAGS, "--out", str(tmp_path), "--merge"]) == 0  # merging again changes nothing
    assert dataset_bytes(tmp_path) == dataset_bytes(reference)


@pytest.fixture
def two_of_three_shards(tmp_path):
    for k in (0, 2):
        assert creation.main([*FLAGS, "--out", str(tmp_path), "--workers", "1", "--shard", f"{k}/3"]) == 0
    return tmp_path


def test_merge_names_a_missing_shard(two_of_three_shards, capsys):
    assert creation.main([*FLAGS, "--out", str(two_of_three_shards), "--merge"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "creation.py: error: missing 4 of 12 samples of shard 1/3: images/tangled_loops_00001.png, "
        "images/tangled_loops_00004.png, images/tangled_loops_00007.png, images/tangled_loops_00010.png"]
    assert not (two_of_three_shards / "annotations.jsonl").exists()


def test_merge_names_the_first_few_missing_samples_and_counts_the_rest(tmp_path, capsys):
    flags = ["--n", "8", "--seed", str(SEED), "--quiet", "--out", str(tmp_path)]
    assert creation.main([*flags, "--workers", "1", "--shard", "3/8"]) == 0
    assert creation.main([*flags, "--merge"]) == 2
    assert "missing 7 of 8 samples of shard 0/8, 1/8, 2/8, 4/8, 5/8 and 2 more shards: " \
           "images/tangled_loops_00000.png" in capsys.readouterr().err


def test_merge_with_a_mistyped_flag_keeps_the_shard_work_even_with_overwrite(two_of_three_shards, capsys):
    out = two_of_three_shards
    assert creation.main([*FLAGS, "--out", str(out), "--shard", "1/3", "--workers", "1"]) == 0
    before = {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}
    other_seed = ["--n", str(N), "--seed", str(SEED + 1), "--quiet", "--out", str(out), "--merge"]
    for extra in ([], ["--overwrite"]):  # --overwrite never removes shard work in a merge
        assert creation.main([*other_seed, *extra]) == 2
        err = capsys.readouterr().err
        assert "holds no shard runs of these flags to merge (seed 21, not 22); a merge never removes shard work" in err
        assert {path: path.read_bytes() for path in out.rglob("*") if path.is_file()} == before
    assert creation.main([*FLAGS, "--out", str(out), "--merge"]) == 0


def test_a_shard_of_another_split_is_refused_before_drawing(two_of_three_shards, capsys, monkeypatch):
    out = two_of_three_shards
    before = listing(out)
    drawn = count_draws(monkeypatch)
    assert creation.main([*FLAGS, "--out", str(out), "--shard", "1/4", "--workers", "1"]) == 2
    assert capsys.readouterr().err.strip().endswith(
        f"{out} holds shards of a 3-way split; this run is shard 1/4: give every shard the same M")
    assert listing(out) == before and drawn == []


def test_merge_refuses_an_image_that_does_not_match(two_of_three_shards, capsys):
    assert creation.main([*FLAGS, "--out", str(two_of_three_shards), "--shard", "1/3", "--workers", "1"]) == 0
    shutil.copy(two_of_three_shards / "images" / "tangled_loops_00000.png",
                two_of_three_shards / "images" / "tangled_loops_00003.png")
    assert creation.main([*FLAGS, "--out", str(two_of_three_shards), "--merge"]) == 2
    assert "missing 1 of 12 samples of shard 0/3: images/tangled_loops_00003.png" in capsys.readouterr().err


def test_merge_refuses_an_edited_record(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    cfg = creation.Config(n=6, seed=3)
    for k in range(2):
        creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True, shard=creation.Shard(k, 2))
    path = records(tmp_path) / "tangled_loops_00003.json"
    edited = json.loads(path.read_text(encoding="utf-8"))
    edited["answer"] += 1
    path.write_text(json.dumps(edited) + "\n", encoding="utf-8")
    assert creation.main(["--n", "6", "--seed", "3", "--out", str(tmp_path), "--merge", "--quiet", "--workers", "1"]) == 2
    assert "missing 1 of 6 samples of shard 1/2: images/tangled_loops_00003.png" in capsys.readouterr().err


def test_a_merge_of_nothing_is_refused_in_one_line(tmp_path, capsys):
    assert creation.main([*FLAGS, "--out", str(tmp_path), "--merge"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"creation.py: error: {tmp_path} holds no shard runs of these flags to merge (no readable {STATE}/run.json); "
        "a merge never removes shard work"]
    assert listing(tmp_path) == []


def test_a_split_into_more_shards_than_images_made_before_its_refusal_still_merges(tmp_path):
    cfg = creation.Config(n=2, seed=SEED)
    for k in range(3):
        creation.generate_dataset(cfg, tmp_path, 1, True, creation.Shard(k, 3))
    assert creation.main(["--n", "2", "--seed", str(SEED), "--quiet", "--out", str(tmp_path), "--merge"]) == 0
    assert len((tmp_path / "annotations.jsonl").read_text().splitlines()) == 2


def kill_points(folder):
    """Each state a --merge killed at some point leaves, made by hand from the merged folder."""
    def temporaries():  # a temporary of a dead process, no data.json yet
        dead = folder / STATE / "tmp" / "999999999"
        dead.mkdir(parents=True)
        (dead / "data.json").write_text("half")
        (folder / "data.json").unlink()

    def annotations_cut_short():
        (folder / "annotations.jsonl").write_text("{\"image\": ")
        (folder / "data.json").unlink()

    def nothing_written():
        (folder / "annotations.jsonl").unlink()
        (folder / "data.json").unlink()

    return {f.__name__: f for f in (temporaries, annotations_cut_short, nothing_written)}


@pytest.mark.parametrize("point", ["temporaries", "annotations_cut_short", "nothing_written"])
def test_merge_rerun_after_a_kill_at_any_point_ends_merged_with_nothing_left(point, tmp_path, monkeypatch):
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    cfg = creation.Config(n=6, seed=3)
    for k in range(2):
        creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True, shard=creation.Shard(k, 2))
    assert creation.main(["--n", "6", "--seed", "3", "--out", str(tmp_path), "--merge", "--quiet", "--workers", "1"]) == 0
    merged, files = dataset_bytes(tmp_path), listing(tmp_path)
    kill_points(tmp_path)[point]()
    assert creation.main(["--n", "6", "--seed", "3", "--out", str(tmp_path), "--merge", "--quiet", "--workers", "1"]) == 0
    assert dataset_bytes(tmp_path) == merged and listing(tmp_path) == files


# ---------------------------------------------------------------------------
# Kills, signals and reruns

LONG = ["--n", "40", "--seed", str(SEED), "--quiet", "--workers", "2"]


@pytest.fixture(scope="module")
def long_reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("long_reference")
    assert creation.main([*LONG, "--out", str(out)]) == 0
    return out


def start_and_wait(out, finished_samples):
    """Start a run and return it once `finished_samples` samples have their record on disk."""
    # Ctrl-C at its default: a shell that starts this suite in the background hands it on ignored,
    # and a run that inherits an ignored SIGINT rightly keeps going.
    process = subprocess.Popen([sys.executable, str(ROOT / "creation.py"), *LONG, "--out", str(out)],
                               stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if records(out).is_dir() and len(os.listdir(records(out))) >= finished_samples:
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
    assert listing(tmp_path) == listing(long_reference) and leftovers(tmp_path) == []  # no temporary left


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
    assert listing(tmp_path) == listing(long_reference) and leftovers(tmp_path) == []


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
            while not leftovers(tmp_path):  # fail only once sample 1 is mid-write
                time.sleep(0.01)
            raise RuntimeError("stop")
        creation.write_atomic(written, write_forever, tmp_path)

    monkeypatch.setattr(creation, "make_sample", stopping_sample)
    with pytest.raises(RuntimeError, match="stop"):
        creation.generate_dataset(cfg, tmp_path, workers=2, quiet=True)
    assert list((tmp_path / "images").iterdir()) == [] and leftovers(tmp_path) == []


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
    deadline = time.monotonic() + 60
    while not (records(out).is_dir() and len(os.listdir(records(out))) >= 3) and time.monotonic() < deadline:
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
    assert leftovers(out) == []


# ---------------------------------------------------------------------------
# The folder's lock: live only while held


def test_a_second_run_of_the_same_command_is_refused_while_the_first_runs(long_reference, tmp_path, capsys):
    first = start_and_wait(tmp_path, 2)
    assert creation.main([*LONG, "--out", str(tmp_path)]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"creation.py: error: another run is writing into {tmp_path} right now; let it finish or stop it, then run again"]
    assert first.wait(timeout=300) == 0
    assert dataset_bytes(tmp_path) == dataset_bytes(long_reference)
    assert listing(tmp_path) == listing(long_reference)


def test_an_overwriting_shard_is_refused_while_a_whole_run_is_live(long_reference, tmp_path, capsys):
    """The issue's first failure: a shard run with --overwrite deleted a live run's work."""
    first = start_and_wait(tmp_path, 2)
    images = sorted(os.listdir(tmp_path / "images"))
    other = ["--n", "20", "--seed", "6", "--quiet", "--workers", "1", "--out", str(tmp_path)]
    for extra in (["--shard", "0/2", "--overwrite"], ["--overwrite"]):
        assert creation.main([*other, *extra]) == 1
        assert "another run is writing into" in capsys.readouterr().err
    for extra in (["--shard", "0/2"], []):  # refused as another dataset before the lock is even tried
        assert creation.main([*other, *extra]) == 2
        assert "holds a different dataset" in capsys.readouterr().err
    assert set(images) <= set(os.listdir(tmp_path / "images"))
    assert first.wait(timeout=300) == 0
    assert dataset_bytes(tmp_path) == dataset_bytes(long_reference)
    assert listing(tmp_path) == listing(long_reference)


def held_lock(folder, mode):
    """The folder's lock held as a live run holds it: shared by shard runs, alone by the rest."""
    lock = open(folder / STATE / "lock", "wb")
    fcntl.flock(lock, mode)
    return lock


def test_shard_runs_share_the_folder_and_shut_out_whole_runs_and_merges(tmp_path, capsys):
    assert creation.main([*FLAGS, "--out", str(tmp_path), "--shard", "1/3", "--workers", "1"]) == 0
    with held_lock(tmp_path, fcntl.LOCK_SH):  # a shard run of this dataset, live
        for k in (0, 2):  # other shards of the same folder run alongside
            assert creation.main([*FLAGS, "--out", str(tmp_path), "--shard", f"{k}/3", "--workers", "1"]) == 0
        for extra in (["--merge"], [], ["--shard", "0/3", "--overwrite"]):
            assert creation.main([*FLAGS, "--out", str(tmp_path), *extra]) == 1
            assert "another run is writing into" in capsys.readouterr().err
    with held_lock(tmp_path, fcntl.LOCK_EX):  # a whole run or a merge, live
        assert creation.main([*FLAGS, "--out", str(tmp_path), "--shard", "0/3"]) == 1
    assert creation.main([*FLAGS, "--out", str(tmp_path), "--merge"]) == 0


def test_a_shard_run_of_another_dataset_never_replaces_a_live_one_that_drew_nothing_yet(tmp_path, capsys):
    (tmp_path / STATE).mkdir()
    run_file = tmp_path / STATE / "run.json"
    run_file.write_text(json.dumps({**creation.identity(creation.Config(n=N, seed=SEED + 1)), "shards": 3}) + "\n")
    before = run_file.read_bytes()
    with held_lock(tmp_path, fcntl.LOCK_SH):  # its shard run has started and holds no sample yet
        assert creation.main([*FLAGS, "--out", str(tmp_path), "--shard", "0/3", "--workers", "1"]) == 1
        assert "another run is writing into" in capsys.readouterr().err
    assert run_file.read_bytes() == before
    assert creation.main([*FLAGS, "--out", str(tmp_path), "--shard", "0/3", "--workers", "1"]) == 0  # once it is gone


def test_shard_runs_started_together_all_run(reference, tmp_path):
    runs = [subprocess.Popen(command(tmp_path, "--shard", f"{k}/3", "--workers", "1"), stderr=subprocess.PIPE, text=True)
            for k in range(3)]
    for run in runs:
        _, err = run.communicate(timeout=300)
        assert run.returncode == 0, err
    assert creation.main([*FLAGS, "--out", str(tmp_path), "--merge"]) == 0
    assert dataset_bytes(tmp_path) == dataset_bytes(reference)


def test_a_lock_file_left_by_a_killed_run_guards_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    (tmp_path / STATE).mkdir()
    (tmp_path / STATE / "lock").write_text("")  # a run killed outright leaves it; no one holds it
    assert creation.main(["--n", "3", "--seed", "3", "--quiet", "--workers", "1", "--out", str(tmp_path)]) == 0


def test_main_runs_outside_the_main_thread(tmp_path, monkeypatch):
    """A harness may call main() from a worker thread, where signal handlers cannot be set."""
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    results = []
    thread = threading.Thread(target=lambda: results.append(
        creation.main([*FLAGS, "--out", str(tmp_path), "--workers", "1"])))
    thread.start()
    thread.join(timeout=120)
    assert results == [0]


# ---------------------------------------------------------------------------
# Resume: keep what is finished and verifies


def cheap_sample(cfg, index):
    """A stand-in for make_sample with a real record's fields but a tiny image, to isolate bookkeeping."""
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
    gc.collect()
    return sum(1 for thing in gc.get_objects() if isinstance(thing, dict) and "pixel_sha256" in thing)


INDEX_OF_CALL = {  # a function each stage calls once per sample, and how to read the sample's index from its arguments
    "generate": ("make_sample", lambda cfg, index: index),
    "merge": ("produce_sample", lambda job: job[1]),
    "repeat": ("image_matches", lambda path, sha256: int(path.stem.rsplit("_", 1)[1])),
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
    original, alive, before = getattr(creation, name), [], records_alive()

    def counting(*args):
        if index_of(*args) in (0, cfg.n - 1):
            alive.append(records_alive() - before)
        return original(*args)

    monkeypatch.setattr(creation, name, counting)
    if stage == "merge":
        assert creation.main(["--n", "300", "--seed", "3", "--out", str(tmp_path), "--merge", "--quiet",
                              "--workers", "1"]) == 0
    else:
        creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True)
    assert len(alive) == 2 and max(alive) <= 5, alive
    assert len((tmp_path / "annotations.jsonl").read_text(encoding="utf-8").splitlines()) == cfg.n


def test_finished_samples_are_kept_not_redrawn(tmp_path, monkeypatch):
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    cfg = creation.Config(n=20, seed=3)
    creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True)
    finished = dataset_bytes(tmp_path)
    drawn = count_draws(monkeypatch)
    creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True)
    assert drawn == [] and dataset_bytes(tmp_path) == finished
    # The dataset files are written from the records, never read: deleted or damaged, they come back alike.
    (tmp_path / "annotations.jsonl").unlink()
    (tmp_path / "data.json").write_bytes(finished["data.json"].replace(b"\n", b"\r\n"))
    creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True)
    assert drawn == [] and dataset_bytes(tmp_path) == finished
    # An interrupted run: records for the first ten samples only.
    for index in range(10, 20):
        creation.record_path(tmp_path, index, cfg.n).unlink()
    creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True)
    assert drawn == list(range(10, 20)) and dataset_bytes(tmp_path) == finished


@pytest.mark.parametrize("resave", ["json.tool", "minified"])
def test_a_resaved_data_json_confuses_nothing(resave, tmp_path, monkeypatch):
    """The issue's third failure: a re-saved data.json was misread as another dataset or not this generator's."""
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    cfg = creation.Config(n=6, seed=3)
    creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True)
    finished = dataset_bytes(tmp_path)
    data = json.loads(finished["data.json"])
    text = json.dumps(data, indent=4) if resave == "json.tool" else json.dumps(data, separators=(",", ":"))
    (tmp_path / "data.json").write_text(text, encoding="utf-8")
    drawn = count_draws(monkeypatch)
    args = ["--n", "6", "--seed", "3", "--quiet", "--workers", "1", "--out", str(tmp_path)]
    assert creation.main(args) == 0 and drawn == [] and dataset_bytes(tmp_path) == finished
    (tmp_path / "data.json").write_text(text, encoding="utf-8")
    assert creation.main([*args, "--overwrite"]) == 0 and drawn == [] and dataset_bytes(tmp_path) == finished
    other = ["--n", "6", "--seed", "4", "--quiet", "--workers", "1", "--out", str(tmp_path)]
    assert creation.main(other) == 2  # still known as seed 3's dataset, from its run file


def test_an_edited_record_is_drawn_again_not_copied_into_data_json(tmp_path, monkeypatch):
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    cfg = creation.Config(n=12, seed=3)
    creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True)
    finished = dataset_bytes(tmp_path)
    path = creation.record_path(tmp_path, 4, cfg.n)
    edited = json.loads(path.read_text(encoding="utf-8"))
    edited["answer"] = 99
    path.write_text(json.dumps(edited) + "\n", encoding="utf-8")
    drawn = count_draws(monkeypatch)
    creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True)
    assert drawn == [4] and dataset_bytes(tmp_path) == finished


@pytest.mark.parametrize("field, value", [("answer", float), ("index", bool), ("seed", bool), ("width", float)])
def test_a_record_equal_only_loosely_is_drawn_again(field, value, tmp_path, monkeypatch):
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    cfg = creation.Config(n=6, seed=1)  # seed 1, so True == seed; index 1, so True == index
    creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True)
    finished = dataset_bytes(tmp_path)
    path = creation.record_path(tmp_path, 1, cfg.n)
    record = json.loads(path.read_text(encoding="utf-8"))
    record[field] = value(record[field])
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    drawn = count_draws(monkeypatch)
    creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True)
    assert drawn == [1] and dataset_bytes(tmp_path) == finished


DAMAGED = {
    "deeply nested": b"[" * 100_000 + b"\n",
    "not UTF-8": b'{"index": "\xff\xfe"}\n',
    "a huge number": b'{"index": 1' + b"0" * 5000 + b"}\n",
    "NaN": b'{"index": 1, "min_crossing_angle_deg": NaN}\n',
    "larger than any record": b'{"index": 1, "pad": "' + b"x" * 200_000 + b'"}\n',
    "cut short": b'{"image": "images/tangled_loops_00001.png", "wid',
}


@pytest.mark.parametrize("damage", list(DAMAGED))
def test_a_damaged_record_is_drawn_again_never_a_traceback(damage, tmp_path, monkeypatch):
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    cfg = creation.Config(n=6, seed=3)
    creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True)
    finished = dataset_bytes(tmp_path)
    creation.record_path(tmp_path, 1, cfg.n).write_bytes(DAMAGED[damage])
    drawn = count_draws(monkeypatch)
    creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True)
    assert drawn == [1] and dataset_bytes(tmp_path) == finished


@pytest.mark.parametrize("damage", list(DAMAGED))
def test_a_damaged_run_file_is_refused_in_one_line(damage, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    args = ["--n", "3", "--seed", "3", "--out", str(tmp_path), "--quiet", "--workers", "1"]
    assert creation.main(args) == 0
    run_file = tmp_path / STATE / "run.json"
    run_file.write_bytes(DAMAGED[damage])
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert creation.main(args) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"creation.py: error: {tmp_path} holds a different dataset (no readable {STATE}/run.json); choose another "
        "--out or pass --overwrite to replace it"]
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    assert creation.main([*args, "--overwrite"]) == 0


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
    record = out / STATE / "records" / "tangled_loops_00004.json"
    record.unlink()
    os.mkfifo(record)  # a pipe where a record is read
    before = outside.read_bytes()
    result = subprocess.run([*run, "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stderr == ""
    assert dataset_bytes(out) == dataset_bytes(clean) and listing(out) == listing(clean)
    for i in (1, 2, 3):
        path = images / f"tangled_loops_{i:05d}.png"
        assert path.is_file() and not path.is_symlink()
        assert path.read_bytes() == (clean / "images" / path.name).read_bytes()
    assert outside.read_bytes() == before and record.is_file()


@pytest.mark.parametrize("name", ["lock", "run.json"])
@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_the_runs_own_files_are_never_read_or_written_through(name, kind, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    out, outside = tmp_path / "out", tmp_path / "outside"
    (out / STATE).mkdir(parents=True)
    if kind == "symlink":
        (out / STATE / name).symlink_to(outside)
    else:
        os.mkfifo(out / STATE / name)
    assert creation.main(["--n", "4", "--seed", "3", "--out", str(out), "--quiet", "--workers", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"creation.py: error: {out / STATE / name} is not a plain file")
    assert not outside.exists()


def test_the_run_that_ends_alone_removes_every_temporary(tmp_path, monkeypatch):
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    cfg = creation.Config(n=3, seed=3)
    left = tmp_path / STATE / "tmp" / "999999999" / "tangled_loops_00001.png"  # a killed run's
    left.parent.mkdir(parents=True)
    left.write_bytes(b"cut short")
    with held_lock(tmp_path, fcntl.LOCK_SH):  # another shard run, live: it may be writing through tmp/
        creation.generate_dataset(cfg, tmp_path, 1, True, creation.Shard(0, 2))
    assert left.exists()
    creation.generate_dataset(cfg, tmp_path, 1, True, creation.Shard(1, 2))
    assert leftovers(tmp_path) == [] and not (tmp_path / STATE / "tmp").exists()


# ---------------------------------------------------------------------------
# Another dataset in --out; --overwrite deletes only what the old run wrote


def test_a_different_dataset_is_refused_then_replaced_only_with_overwrite(reference, tmp_path):
    shutil.copytree(reference, tmp_path, dirs_exist_ok=True)
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "images" / "holiday.png").write_bytes(b"not the generator's")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    smaller = [sys.executable, str(ROOT / "creation.py"), "--n", "5", "--seed", str(SEED), "--quiet",
               "--out", str(tmp_path), "--workers", "1"]
    refused = subprocess.run(smaller, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        f"creation.py: error: {tmp_path} holds a different dataset (n 12, not 5); choose another --out or pass "
        "--overwrite to replace it"]
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    assert subprocess.run([*smaller, "--overwrite"], timeout=300).returncode == 0
    images = sorted(p.name for p in (tmp_path / "images").iterdir())
    assert images == ["holiday.png"] + [f"tangled_loops_{i:05d}.png" for i in range(5)]
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert json.loads((tmp_path / "data.json").read_text())["num_samples"] == 5


def test_a_different_dataset_is_told_by_what_differs(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    assert creation.main(["--n", "4", "--seed", "1", "--out", str(tmp_path), "--quiet", "--workers", "1"]) == 0
    assert creation.main(["--n", "4", "--seed", "2", "--stroke-width", "4", "--out", str(tmp_path), "--quiet"]) == 2
    assert "holds a different dataset (seed 1, not 2);" in capsys.readouterr().err


@pytest.mark.parametrize("name, text", [("data.json", "[1, 2, 3]"), ("data.json", "not json"),
                                        ("annotations.jsonl", "my own annotations\n")])
def test_dataset_files_no_run_here_made_are_refused_in_one_line_unless_overwrite(name, text, tmp_path, monkeypatch,
                                                                                capsys):
    drawn = count_draws(monkeypatch)
    (tmp_path / name).write_text(text, encoding="utf-8")
    args = ["--n", "3", "--seed", "3", "--out", str(tmp_path), "--quiet", "--workers", "1"]
    assert creation.main(args) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"creation.py: error: {tmp_path} holds a different dataset (no readable {STATE}/run.json); choose another "
        "--out or pass --overwrite to replace it"]
    assert listing(tmp_path) == [name] and drawn == []  # nothing written
    assert creation.main([*args, "--overwrite"]) == 0 and drawn == [0, 1, 2]


def test_foreign_files_are_kept_whatever_their_names(tmp_path, monkeypatch):
    """The issue's second failure: --overwrite deleted a user's review files, a plain run a foreign .progress.jsonl."""
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    foreign = {"review/contact_sheet.png": b"mine", "review/overlays/tangled_loops_00000.png": b"mine too",
               ".progress.jsonl": b"{}\n", ".progress.lock": b"", "shards/shard-00000-of-00002.jsonl": b"{}\n",
               "scenes/tangled_loops_00001.json": b"{}"}
    for name, content in foreign.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(content)
    args = ["--n", "4", "--seed", "3", "--out", str(tmp_path), "--quiet", "--workers", "1"]
    assert creation.main(args) == 0
    assert creation.main(["--n", "3", "--seed", "4", "--out", str(tmp_path), "--quiet", "--workers", "1",
                          "--overwrite"]) == 0
    assert {name: (tmp_path / name).read_bytes() for name in foreign} == foreign


def test_overwrite_deletes_what_the_old_run_wrote_and_still_matches(tmp_path):
    old = ["--n", "4", "--seed", "3", "--size", "256", "--original-shapes", "--min-radius", "40", "--max-radius", "70",
           "--interior-margin", "20", "--min-loops", "2", "--max-loops", "3", "--quiet", "--workers", "1",
           "--out", str(tmp_path)]
    assert creation.main([*old, "--overlays", "--scenes", "--contact-sheet", "4"]) == 0
    images = tmp_path / "images"
    shutil.copy(images / "tangled_loops_00000.png", images / "tangled_loops_00003.png")  # not its pixels any more
    (images / "tangled_loops_99999.png").write_bytes(os.urandom(3000))  # looks like the tool's, is not
    new = [*old[:4], "--seed", "5", *old[6:]]
    new[1] = "2"
    assert creation.main([*new, "--overwrite"]) == 0
    assert sorted(p.name for p in images.iterdir()) == [
        "tangled_loops_00000.png", "tangled_loops_00001.png", "tangled_loops_00003.png", "tangled_loops_99999.png"]
    assert os.listdir(tmp_path / "review" / "overlays") == []  # each tagged with its record's pixel hash
    assert sorted(os.listdir(tmp_path / "scenes")) == []
    assert not (tmp_path / "review" / "contact_sheet.png").exists()
    assert len(os.listdir(records(tmp_path))) == 2


@pytest.mark.parametrize("images_elsewhere", [False, True])
def test_overwrite_never_deletes_out_of_the_folder(tmp_path, monkeypatch, images_elsewhere):
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    out = tmp_path / "out"
    out.mkdir()
    if images_elsewhere:  # a symlinked images/ is written through, but nothing is deleted out of the folder
        (tmp_path / "elsewhere").mkdir()
        (out / "images").symlink_to(tmp_path / "elsewhere")
    creation.generate_dataset(creation.Config(n=10, seed=1), out, workers=1, quiet=True)
    assert creation.main(["--n", "5", "--seed", "2", "--out", str(out), "--overwrite", "--quiet",
                          "--workers", "1"]) == 0
    left = len(os.listdir(out / "images"))
    assert left == (10 if images_elsewhere else 5)


def test_settings_that_draw_nothing_leave_nothing_that_refuses_the_suggested_fix(tmp_path, monkeypatch):
    def impossible(cfg, index):
        raise creation.PlacementError(f"sample {index} (seed {cfg.seed}): ...: lower --min-curl-px")

    monkeypatch.setattr(creation, "make_sample", impossible)
    with pytest.raises(creation.PlacementError):
        creation.generate_dataset(creation.Config(n=4, seed=3, min_curl_px=90), tmp_path, workers=1, quiet=True)
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    assert creation.generate_dataset(creation.Config(n=4, seed=3, min_curl_px=20), tmp_path, workers=1, quiet=True) == 4


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
        def refuses_image_2(image, target, tag=None):
            (refused_write if "00002" in str(target) else save_png)(image, target)

        monkeypatch.setattr(creation, "make_sample", cheap_sample)
        monkeypatch.setattr(creation, "save_png", refuses_image_2)
    cfg = creation.Config(n=4, seed=3)
    with pytest.raises(failure):
        creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True)
    assert len(os.listdir(records(tmp_path))) == 2 and leftovers(tmp_path) == []
    monkeypatch.setattr(creation, "save_png", save_png)
    drawn = count_draws(monkeypatch)
    creation.generate_dataset(cfg, tmp_path, workers=1, quiet=True)
    assert drawn == [2, 3]


def refused_write(image, target, tag=None):
    raise PermissionError(errno.EACCES, "Permission denied", str(target))


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_folder_that_takes_no_image_names_the_image_never_a_temporary(tmp_path, monkeypatch, capsys, workers):
    monkeypatch.setattr(creation, "save_png", refused_write)  # forked workers inherit it
    out = tmp_path / "made"
    assert creation.main([*FLAGS, "--out", str(out), "--workers", workers]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"creation.py: error: {out / creation.image_name(0, N)}: Permission denied"]
    assert leftovers(out) == []


# ---------------------------------------------------------------------------
# Bad input: one line, exit 2, nothing written


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


@pytest.mark.parametrize("name, kind", [("annotations.jsonl", "folder"), ("data.json", "folder"),
                                        ("images", "file"), (f"{STATE}/run.json", "folder"), (STATE, "file")])
def test_the_wrong_kind_of_entry_where_the_run_writes_is_refused_before_drawing(name, kind, tmp_path, monkeypatch):
    drawn = count_draws(monkeypatch)
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).mkdir() if kind == "folder" else (tmp_path / name).write_text("notes")
    before = listing(tmp_path)
    wanted = "file" if kind == "folder" else "folder"
    with pytest.raises(creation.DatasetError, match=f"{name} is not a plain {wanted}, and the run writes a {wanted}"):
        creation.generate_dataset(creation.Config(n=4, seed=3), tmp_path, workers=1, quiet=True)
    assert drawn == [] and listing(tmp_path) == before


@pytest.mark.parametrize("name, flags", [("scenes", {"scenes": True}), ("review", {"overlays": True}),
                                         ("review/overlays", {"overlays": True})])
def test_a_file_where_a_flag_writes_its_folder_is_refused_in_one_line(name, flags, tmp_path, monkeypatch):
    drawn = count_draws(monkeypatch)
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text("notes")
    with pytest.raises(creation.DatasetError, match=f"{name} is not a plain folder"):
        creation.generate_dataset(creation.Config(n=4, seed=3), tmp_path, workers=1, quiet=True, **flags)
    assert drawn == [] and not (tmp_path / "images").exists()


@pytest.mark.parametrize("kind", ["file", "link to nothing"])
def test_out_naming_a_file_or_a_link_to_nothing_is_bad_input_in_one_true_line(kind, tmp_path, capsys):
    out = tmp_path / "out"
    out.write_text("mine") if kind == "file" else out.symlink_to(tmp_path / "gone")
    for extra in ([], ["--merge"]):
        assert creation.main([*FLAGS, "--out", str(out), *extra]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [
            f"creation.py: error: --out {out} is not a folder (a file, or a link to nothing)"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out"]
    assert out.is_symlink() if kind != "file" else out.read_text() == "mine"


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
    assert [p.name for p in tmp_path.rglob("*")] in ([], ["made"])  # a parent made on the way may stay (README)


@pytest.mark.parametrize("merge", [False, True])
def test_an_export_folder_is_refused_as_out_even_with_overwrite(merge, tmp_path, monkeypatch, capsys):
    drawn = count_draws(monkeypatch)
    (tmp_path / creation.EXPORT_MARKER_FILE).write_text("{}", encoding="utf-8")
    (tmp_path / "annotations.jsonl").write_text("", encoding="utf-8")
    before = listing(tmp_path)
    args = ["--n", "3", "--seed", "3", "--out", str(tmp_path), "--quiet", "--workers", "1"]
    assert creation.main([*args, "--merge" if merge else "--overwrite"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"is an export ({creation.EXPORT_MARKER_FILE} marks it)" in err[0]
    assert listing(tmp_path) == before and drawn == []


def test_the_export_marker_is_the_one_export_py_writes():
    sys.path.insert(0, str(ROOT))
    import export
    assert creation.EXPORT_MARKER_FILE == export.MARKER_FILE


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
    assert capsys.readouterr().err.strip().endswith(f"drew 6 images and wrote annotations.jsonl, data.json in {tmp_path}")
    (tmp_path / "images" / "tangled_loops_00002.png").unlink()
    assert creation.main(args) == 0
    assert capsys.readouterr().err.strip().endswith(
        f"kept 5 of 6 images, which match their records, drew 1 and wrote annotations.jsonl, data.json in {tmp_path}")


def test_a_shard_run_waits_out_another_shard_run_clearing_its_temporaries(tmp_path):
    """A shard run that ends holds the folder lock alone for a moment (to clear tmp/); a shard run starting
    then waits instead of being refused as if a whole run were live."""
    assert creation.main([*FLAGS, "--out", str(tmp_path), "--workers", "1", "--shard", "0/2"]) == 0
    lock = open(creation.state_path(tmp_path, "lock"), "wb")
    fcntl.flock(lock, fcntl.LOCK_EX)
    release = threading.Timer(0.5, lambda: (fcntl.flock(lock, fcntl.LOCK_UN), lock.close()))
    release.start()
    try:
        assert creation.main([*FLAGS, "--out", str(tmp_path), "--workers", "1", "--shard", "1/2"]) == 0
    finally:
        release.join()
    assert creation.main([*FLAGS, "--out", str(tmp_path), "--merge"]) == 0


def test_overwrite_keeps_an_untagged_overlay_beside_a_record_without_its_hash(tmp_path, monkeypatch):
    """A damaged record with no pixel_sha256 must not make an untagged PNG at its overlay path look like ours."""
    monkeypatch.setattr(creation, "make_sample", cheap_sample)
    args = ["--n", "4", "--seed", "3", "--out", str(tmp_path), "--quiet", "--workers", "1"]
    assert creation.main(args) == 0
    record_file = sorted(records(tmp_path).glob("*.json"))[0]
    record = json.loads(record_file.read_text())
    del record["pixel_sha256"]
    record_file.write_text(json.dumps(record))
    overlay = tmp_path / "review" / "overlays" / Path(record["image"]).name
    overlay.parent.mkdir(parents=True)
    Image.new("L", (8, 8), 200).save(overlay)  # a user's PNG: no tag
    assert creation.main(["--n", "3", "--seed", "4", "--out", str(tmp_path), "--quiet", "--workers", "1",
                          "--overwrite"]) == 0
    assert overlay.exists()
