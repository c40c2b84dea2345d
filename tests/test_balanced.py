"""The default, budgeted mode: budgets, one-piece tangles, every rule kept; the original shapes behind a switch."""

import copy
import dataclasses
import shlex
from pathlib import Path

import numpy as np
import pytest

import creation
from tangle_check import find_all_events, tangle_violations
from creation import Config

BALANCED = Config(n=1, seed=3)


def connected_pieces(tangle):
    """How many pieces the loops form when two loops that cross are joined."""
    parent = list(range(len(tangle.loops)))

    def root(x):
        while parent[x] != x:
            x = parent[x]
        return x

    between = ~tangle.crossings.is_self
    for a, b in zip(tangle.crossings.loop_a[between], tangle.crossings.loop_b[between]):
        parent[root(int(a))] = root(int(b))
    return len({root(x) for x in range(len(parent))})


def test_budgets_are_the_default_and_the_original_shapes_a_named_switch():
    assert Config().original_shapes is False
    assert "--original-shapes" not in creation.canonical_command(Config())
    assert "--original-shapes" in creation.canonical_command(Config(original_shapes=True))


@pytest.mark.parametrize("cfg", [Config(n=6, seed=11), Config(n=6, seed=11, original_shapes=True, max_radius=250.0)])
def test_the_canonical_command_regenerates_its_config(cfg):
    argv = creation.canonical_command(cfg).split()[2:]
    assert creation.config_from_args(creation.build_parser().parse_args(argv)) == cfg


@pytest.mark.parametrize("argv", [["--min-radius", "150"], ["--max-radius", "200"], ["--radius-jitter", "0.1"],
                                  ["--max-waypoints", "10"]])
def test_a_flag_the_budgeted_mode_does_not_use_is_refused(argv):
    """Named at its default or not, a loop-shape flag of the original mode would be silently ignored."""
    with pytest.raises(ValueError, match=f"{argv[0]}: used only with --original-shapes"):
        creation.config_from_args(creation.build_parser().parse_args(argv))
    assert creation.config_from_args(creation.build_parser().parse_args(argv + ["--original-shapes"]))


def test_the_old_balanced_switch_names_the_default():
    parse = creation.build_parser().parse_args
    assert creation.config_from_args(parse(["--balanced"])) == Config()
    with pytest.raises(ValueError, match="--balanced is the default"):
        creation.config_from_args(parse(["--balanced", "--original-shapes"]))


def test_too_wide_a_loop_range_for_one_ink_budget_names_the_flags():
    with pytest.raises(ValueError, match="one ink budget.*--min-loops 3.*--max-loops 11.*--max-loops at most 7 here, "
                                         "or --min-loops at least 5"):
        Config(min_loops=3)
    Config(min_loops=3, max_loops=7)  # the values the message offers are accepted
    Config(min_loops=5, max_loops=11)


@pytest.mark.parametrize("num_loops", range(5, 12))
def test_budgets_do_not_depend_on_n(num_loops):
    rng = np.random.default_rng(num_loops)
    for _ in range(50):
        shapes = creation.balanced_shapes(Config(), rng, num_loops)
        perimeters = np.array([s.perimeter for s in shapes])
        assert len(shapes) == num_loops
        assert 11 * 750 <= perimeters.sum() <= 11 * 1000
        assert np.all((perimeters >= 550) & (perimeters <= 2600))
        assert np.all(np.diff(perimeters) <= 0)  # largest first
        assert all(0 <= s.nested <= s.curls for s in shapes)
        curls = sum(s.curls + s.nested for s in shapes)
        for_missing = creation.CURLS_PER_MISSING_LOOP * (11 - num_loops)
        assert int(for_missing) <= curls < for_missing + creation.BALANCED_EXTRA_CURLS + 1  # the draw is below its top
        caps = np.array([s.crossing_cap for s in shapes])
        assert np.all(np.diff(caps) >= 0)
        assert np.all(caps >= 2 * np.arange(num_loops) + creation.CROSSING_SLACK)
        assert all(2 * s.curls <= s.waypoints for s in shapes)


def test_missing_loops_bring_nested_curls_of_their_own(monkeypatch):
    """With the per-image share at zero, only the nested curls that stand in for missing loops are left:
    none at max_loops, more the fewer the loops (0.6 per missing loop, less where the curls leave no room)."""
    monkeypatch.setattr(creation, "NESTED_CURL_SHARE", (0.0, 0.0))
    means = {}
    for num_loops in (5, 8, 11):
        rng = np.random.default_rng(num_loops)
        means[num_loops] = np.mean([sum(s.nested for s in creation.balanced_shapes(Config(), rng, num_loops))
                                    for _ in range(200)])
    assert means[11] == 0
    assert 2.0 <= means[5] <= creation.NESTED_CURLS_PER_MISSING_LOOP * 6
    assert means[11] < means[8] < means[5]


def test_a_balanced_loop_has_exactly_its_perimeter():
    rng = np.random.default_rng(0)
    shape = creation.LoopShape(perimeter=1500.0, waypoints=12, wiggle=0.4, curls=2, crossing_cap=10.0)
    points, _ = creation.balanced_loop(shape, BALANCED, rng)
    assert np.hypot(*(np.roll(points, -1, axis=0) - points).T).sum() == pytest.approx(1500.0)


@pytest.mark.parametrize("seed", range(20))
def test_a_curl_crosses_its_loop_once_and_steeply(seed):
    rng = np.random.default_rng(seed)
    shape = creation.LoopShape(perimeter=1500.0, waypoints=12, wiggle=0.0, curls=1, crossing_cap=10.0)
    points, curvature_radius = creation.balanced_loop(shape, BALANCED, rng)
    _, crossings, _ = find_all_events([points + 512], BALANCED)
    assert crossings.is_self.sum() == 1
    assert crossings.angle_deg.min() >= 30
    assert curvature_radius.min() >= BALANCED.min_curvature_radius


@pytest.mark.parametrize("count", [9, 12])
def test_curls_take_every_other_gap(count):
    rng = np.random.default_rng(count)
    cfg = Config(angle_jitter=0.0)  # with no wiggle either, ring points lie on the unit circle
    shape = creation.LoopShape(perimeter=1.0, waypoints=count, wiggle=0.0, curls=count // 2, crossing_cap=0.0)
    path = creation.balanced_waypoints(shape, cfg, rng)
    on_ring = np.flatnonzero(np.isclose(np.hypot(*path.T), 1.0, atol=1e-9))
    assert len(on_ring) == count and len(path) == count + 5 * (count // 2)
    followers = np.diff(np.append(on_ring, len(path))) - 1  # curl points after each ring point
    assert set(followers) == {0, 5}
    assert not np.any((followers == 5) & (np.roll(followers, -1) == 5))  # no two curls side by side


@pytest.mark.parametrize("count", [9, 12])
def test_a_nested_curl_takes_the_place_of_its_lobes_apex(count):
    rng = np.random.default_rng(count)
    cfg = Config(angle_jitter=0.0)
    shape = creation.LoopShape(perimeter=1.0, waypoints=count, wiggle=0.0, curls=count // 2, crossing_cap=0.0,
                               nested=2)
    path = creation.balanced_waypoints(shape, cfg, rng)
    on_ring = np.flatnonzero(np.isclose(np.hypot(*path.T), 1.0, atol=1e-9))
    followers = np.diff(np.append(on_ring, len(path))) - 1
    # A ring curl's five points; a nested one keeps the four off the apex and puts five of its own between them.
    assert len(on_ring) == count
    assert (followers == 9).sum() == 2 and (followers == 5).sum() == count // 2 - 2


def nested_and_plain_curl(seed: int):
    """One 1500 px loop with one curl, with and without a second curl on the curl's lobe.

    The shapes are drawn from the same stream, so the ring and its curl are the same in both.
    """
    loops = []
    for nested in (1, 0):
        shape = creation.LoopShape(perimeter=1500.0, waypoints=12, wiggle=0.0, curls=1, crossing_cap=10.0,
                                   nested=nested)
        points, curvature_radius = creation.balanced_loop(shape, BALANCED, np.random.default_rng(seed))
        loops.append((points - points.mean(axis=0) + BALANCED.size / 2, curvature_radius))
    return loops


def test_a_nested_curl_crosses_its_loop_once_more_and_steeply():
    self_crossings, angles = [], []
    for seed in range(20):
        (points, curvature_radius), _ = nested_and_plain_curl(seed)
        crossings = find_all_events([points], BALANCED)[1]
        self_crossings.append(int(crossings.is_self.sum()))
        angles.append(crossings.angle_deg.min())
        assert curvature_radius.min() >= BALANCED.min_curvature_radius
    # Now and then the nested curl also crosses the sides of the lobe it sits on; placement judges those.
    assert min(self_crossings) == 2 and self_crossings.count(2) >= 18
    assert min(a for a, k in zip(angles, self_crossings) if k == 2) >= 38  # ring curls cross at 41-66 degrees


@pytest.mark.parametrize("seed", range(3))
def test_the_audits_curl_count_misses_a_nested_curls_outer_lobe(seed, tmp_path):
    shortcuts = pytest.importorskip("shortcuts")  # the shortcut audit, an independent reading of the pixels
    features = []
    for (points, _), name in zip(nested_and_plain_curl(seed), ("nested", "plain")):
        path = tmp_path / f"{name}.png"
        creation.render_loops((points,), BALANCED, np.random.default_rng(seed)).save(path)
        features.append(shortcuts.compute_features(path))
    nested, plain = features
    # One crossing more and most of a turn more, but no more curls: the lobe the second curl sits on has no
    # branch that returns to its own crossing.
    assert nested["junctions"] == plain["junctions"] + 1
    assert nested["curls"] == plain["curls"]
    assert nested["net_turning_rad"] - plain["net_turning_rad"] > 0.5 * 2 * np.pi


@pytest.mark.parametrize("index", range(8))
def test_balanced_samples_keep_every_rule_in_one_piece(index):
    rng = creation.sample_rng(BALANCED, index)
    num_loops = creation.loop_count(BALANCED, index, rng)
    tangle, _ = creation.sample_tangle(BALANCED, rng, num_loops, index)
    assert len(tangle.loops) == num_loops
    assert tangle_violations(list(tangle.loops), BALANCED) == []
    assert connected_pieces(tangle) == 1


def test_balanced_images_regenerate_alone():
    image, record, _ = creation.make_sample(Config(n=3, seed=4), 2)
    again, record_again, _ = creation.make_sample(Config(n=3, seed=4), 2)
    assert record == record_again and record["pixel_sha256"] == creation.pixel_sha256(again)


def test_a_single_loop_is_refused():
    with pytest.raises(ValueError, match="--min-loops must be at least 2"):
        Config(min_loops=1, max_loops=1)


@pytest.mark.parametrize("loops", [2, 5])
def test_a_narrow_loop_range_places_every_sample(loops):
    """Extra curls follow the ink: 14 on the ink of two or five loops bent too tightly and sampling gave up."""
    cfg = Config(n=6, seed=0, min_loops=loops, max_loops=loops, sample_restarts=3)
    for index in range(6):
        tangle, _ = creation.sample_tangle(cfg, creation.sample_rng(cfg, index), loops, index)
        assert tangle_violations(list(tangle.loops), cfg) == [] and connected_pieces(tangle) == 1


def test_the_loop_radius_flags_it_ignores_are_not_checked():
    """Balanced loops are sized by their ink share, so --max-radius cannot make a small canvas refuse it."""
    with pytest.raises(ValueError, match="--max-radius"):
        Config(size=768, original_shapes=True)
    assert Config(size=768).size == 768


def test_more_waypoints_than_the_original_shapes_most_are_allowed_by_default():
    """--max-waypoints belongs to --original-shapes, so it cannot cap --min-waypoints in the default mode."""
    assert Config(min_waypoints=11).min_waypoints == 11


SCREENED_RULES = ("disconnected", "crossing_budget", "crossing_angle", "crossing_bend", "crossing_separation",
                  "same_pair_separation")


def partial_tangle(index):
    """The tangle of a default sample's loops but its last, and the last loop's budgeted shape."""
    rng = creation.sample_rng(BALANCED, index)
    num_loops = creation.loop_count(BALANCED, index, rng)
    shapes = creation.balanced_shapes(BALANCED, copy.deepcopy(rng), num_loops)  # the sampler's first draw
    tangle, _ = creation.sample_tangle(BALANCED, rng, num_loops, index)
    partial = creation.Tangle.empty(BALANCED)
    for loop in tangle.loops[:-1]:
        partial, reason = creation.try_add_loop(partial, loop, BALANCED)
        assert reason is None
    return partial, shapes[-1]


def drawn_loop(shape, seed):
    """The first loop of the shape that draw_loop places, drawing from default_rng(seed)."""
    rng = np.random.default_rng(seed)
    while True:
        loop, _ = creation.draw_loop(BALANCED, rng, shape)
        if loop is not None:
            return loop


def placements(loop, count, seed):
    rng = np.random.default_rng(seed)
    return loop[None] + rng.uniform(*creation.placement_range(loop, BALANCED), (count, 2))[:, None]


def unmoved(partial, tries):
    """The segments of the loop the copies share, as the tangle's next loop (moving a loop does not change them)."""
    return creation.loop_segments(tries[0], len(partial.loops), BALANCED.bend_window)


@pytest.mark.parametrize("index, whole_cap", [(0, False), (1, False), (2, False), (1, True)])
def test_the_placement_screen_rejects_exactly_what_placement_rejects_for_crossings_between_loops(index, whole_cap):
    partial, shape = partial_tangle(index)
    if whole_cap:  # an even budget, so some copies (two closed loops cross an even number of times) meet it exactly
        room = partial.crossing_room(shape)
        shape = dataclasses.replace(shape, crossing_cap=shape.crossing_cap - room + 2 * np.floor(room / 2))
    rng = np.random.default_rng(index)
    curl_free = dataclasses.replace(shape, curls=0)
    while True:  # a loop that does not cross itself, so every crossing rule it can break is about other loops
        loop, _ = creation.draw_loop(BALANCED, rng, curl_free)
        if loop is not None and not find_all_events([loop], BALANCED)[1].is_self.any():
            break
    tries = placements(loop, 300, index)
    room = partial.crossing_room(shape)
    faults, hits = creation.placement_faults(partial, tries, unmoved(partial, tries), room, BALANCED)
    allowed = creation.unbroken(faults)
    reasons = [creation.try_add_loop(partial, loop_copy, BALANCED, shape)[1] for loop_copy in tries]
    assert list(allowed) == [reason not in SCREENED_RULES for reason in reasons]
    assert 0 < allowed.sum() < len(tries)  # both outcomes were tried
    # Where no copy passes, the rule blamed is the last, in placement's order, that some copy reached.
    rank = np.array([SCREENED_RULES.index(reason) if reason in SCREENED_RULES else -1 for reason in reasons])
    blamed = []
    for last in sorted(set(rank[rank >= 0])):
        failed = tries[(rank >= 0) & (rank <= last)]
        blamed.append(creation.rule_to_blame(
            creation.placement_faults(partial, failed, unmoved(partial, failed), room, BALANCED)[0]))
        assert blamed[-1] == SCREENED_RULES[last]
    assert len(blamed) >= 4
    if whole_cap:
        on_budget = np.bincount(hits.copy, minlength=len(tries)) == room  # a copy within budget hands on every crossing
        assert np.any(on_budget) and np.any(allowed & on_budget)


@pytest.mark.parametrize("index", range(3))
def test_the_placement_screen_never_rejects_a_loop_with_curls_that_placement_accepts(index):
    partial, shape = partial_tangle(index)
    loop = drawn_loop(dataclasses.replace(shape, curls=max(shape.curls, 1)), index)
    assert find_all_events([loop], BALANCED)[1].is_self.any()
    tries = placements(loop, 300, index)
    room = partial.crossing_room(shape)
    allowed = creation.unbroken(creation.placement_faults(partial, tries, unmoved(partial, tries), room, BALANCED)[0])
    reasons = [creation.try_add_loop(partial, loop_copy, BALANCED, shape)[1] for loop_copy in tries]
    assert 0 < allowed.sum() < len(tries)
    assert all(reason in SCREENED_RULES for reason, ok in zip(reasons, allowed) if not ok)


@pytest.mark.parametrize("index", range(3))
def test_the_crossings_the_screen_hands_on_are_the_ones_placement_finds(index):
    partial, shape = partial_tangle(index)
    loop = drawn_loop(shape, index)
    tries = placements(loop, 60, index)
    room = partial.crossing_room(shape)
    faults, hits = creation.placement_faults(partial, tries, unmoved(partial, tries), room, BALANCED)
    within_budget = creation.unbroken({rule: faults[rule] for rule in ("disconnected", "crossing_budget")})
    accepted = 0
    for k, loop_copy in enumerate(tries):
        if not within_budget[k]:  # the screen hands on no copy outside the budget
            continue
        searched, reason = creation.try_add_loop(partial, loop_copy, BALANCED, shape)
        handed, handed_reason = creation.try_add_loop(partial, loop_copy, BALANCED, shape, hits.of(k))
        assert handed_reason == reason
        if reason is None:
            accepted += 1
            for field in dataclasses.fields(creation.Crossings):
                np.testing.assert_array_equal(getattr(handed.crossings, field.name),
                                              getattr(searched.crossings, field.name))
    assert not faults["disconnected"].all() and accepted > 0


@pytest.mark.parametrize("index, cap", [(0, None), (2, None), (3, None), (0, 0.0)])  # a cap of 0: nowhere fits
def test_the_screen_places_the_first_position_that_passes(index, cap):
    partial, shape = partial_tangle(index)
    if cap is not None:
        shape = dataclasses.replace(shape, crossing_cap=cap)
    loop = drawn_loop(shape, index)
    placed, pairs, reason = creation.screen_placements(partial, loop, BALANCED, np.random.default_rng(7), shape)
    offsets = np.vstack([np.zeros(2), np.random.default_rng(7).uniform(
        *creation.placement_range(loop, BALANCED), (creation.PLACEMENTS_PER_SHAPE - 1, 2))])
    tries = loop[None] + offsets[:, None]
    room = partial.crossing_room(shape)
    faults, _ = creation.placement_faults(partial, tries, unmoved(partial, tries), room, BALANCED)
    allowed = creation.unbroken(faults)
    assert allowed.any() == (cap is None)
    if allowed.any():
        assert reason is None
        np.testing.assert_array_equal(placed, tries[np.argmax(allowed)])
        # The crossings it hands on are those a search at the chosen position finds.
        searched, searched_reason = creation.try_add_loop(partial, placed, BALANCED, shape)
        handed, handed_reason = creation.try_add_loop(partial, placed, BALANCED, shape, pairs)
        assert handed_reason == searched_reason
        if searched is not None:
            assert len(handed.crossings) == len(searched.crossings)
            np.testing.assert_array_equal(handed.crossings.point, searched.crossings.point)
    else:
        assert placed is None and pairs is None and reason == creation.rule_to_blame(faults) == "crossing_budget"


def test_a_loop_as_wide_as_the_drawable_area_is_screened_where_it_stands():
    partial, shape = partial_tangle(0)
    low, high = BALANCED.interior_margin, BALANCED.size - BALANCED.interior_margin
    t = np.linspace(0, 2 * np.pi, 900, endpoint=False)
    loop = np.column_stack([low + (high - low) * (1 + np.cos(t)) / 2, 512 + 100 * np.sin(t)])
    loop[0, 0] = np.nextafter(high, np.inf)  # an ulp past the margin, as rounding in a shift can leave it
    assert creation.placement_range(loop, BALANCED) is None
    placed, _, reason = creation.screen_placements(partial, loop, BALANCED, np.random.default_rng(0), shape)
    assert placed is None or np.array_equal(placed, loop)


@pytest.mark.parametrize("crossings, shallow, bent, crowded, lens, rule", [
    ([0, 0], [0, 0], [0, 0], [0, 0], [0, 0], "disconnected"),
    ([0, 9], [0, 0], [0, 0], [0, 0], [0, 0], "crossing_budget"),
    ([3, 9], [1, 0], [0, 0], [0, 0], [0, 0], "crossing_angle"),
    ([3, 2], [1, 0], [0, 1], [0, 0], [0, 0], "crossing_bend"),
    ([3, 2], [1, 0], [0, 0], [0, 1], [0, 0], "crossing_separation"),
    ([3, 2], [1, 0], [0, 0], [0, 0], [0, 1], "same_pair_separation"),
])
def test_a_shape_that_fits_nowhere_is_blamed_on_the_first_rule_its_positions_all_break(crossings, shallow, bent,
                                                                                        crowded, lens, rule):
    rules = ("crossing_angle", "crossing_bend", "crossing_separation", "same_pair_separation")
    faults = {**creation.count_faults(np.array(crossings), room=5),
              **{rule: np.array(f, dtype=bool) for rule, f in zip(rules, (shallow, bent, crowded, lens))}}
    assert not creation.unbroken(faults).any()
    assert creation.rule_to_blame(faults) == rule


def readme_small_canvas_config() -> Config:
    """The config of the README's "Smaller canvases" command."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme.split("### Smaller canvases", 1)[1]
    command = section.split("```bash\n", 1)[1].split("\n```", 1)[0].replace("\\\n", " ")
    argv = shlex.split(command)[2:]  # past "python creation.py"
    return creation.config_from_args(creation.build_parser().parse_args(argv))


def test_the_readmes_smaller_canvas_settings_draw_the_five_loop_sample_that_needs_every_length_halved():
    # Sample 5 of seed 0 at 512 px could not be placed while the bend rule's window stayed 10 px.
    cfg = readme_small_canvas_config()
    assert (cfg.size, cfg.bend_window) == (512, 5.0)
    _, record, _ = creation.make_sample(cfg, 5)
    assert record["num_loops"] == 5
