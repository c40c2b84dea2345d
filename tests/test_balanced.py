"""The default, budgeted mode: budgets, one-piece tangles, every rule kept; the original shapes behind a switch."""

import dataclasses
import shlex
from collections import Counter
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


def test_too_wide_a_loop_range_for_the_merges_names_the_flags():
    with pytest.raises(ValueError, match="--max-loops 11 rings merged down.*--min-loops 3.*--max-loops at most 7 here, "
                                         "or --min-loops at least 5"):
        Config(min_loops=3)
    Config(min_loops=3, max_loops=7)  # the values the message offers are accepted
    Config(min_loops=5, max_loops=11)


def test_ring_budgets_share_the_ink_and_know_nothing_of_n():
    rng = np.random.default_rng(5)
    for _ in range(100):
        shapes = creation.ring_shapes(Config(), rng)
        perimeters = np.array([s.perimeter for s in shapes])
        assert len(shapes) == 11  # --max-loops rings, whatever N
        assert 11 * 750 <= perimeters.sum() <= 11 * 1000
        assert np.all((perimeters >= 550) & (perimeters <= 2600))
        assert np.all(np.diff(perimeters) <= 0)  # largest first
        assert all(0 <= s.nested <= s.curls for s in shapes)
        assert sum(s.curls + s.nested for s in shapes) < creation.BALANCED_CURLS + 1  # the draw is below its top
        caps = np.array([s.crossing_cap for s in shapes])
        assert np.all(np.diff(caps) >= 0)
        assert np.all(caps >= 2 * np.arange(11) + creation.CROSSING_SLACK)
        assert all(2 * s.curls <= s.waypoints for s in shapes)


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


def circle(centre, radius=150.0, points=500):
    t = np.linspace(0, 2 * np.pi, points, endpoint=False)
    return np.column_stack([centre[0] + radius * np.cos(t), centre[1] + radius * np.sin(t)])


def ring_tangle(*centres):
    """Rings of radius 150 at these centres, as a tangle."""
    tangle = creation.Tangle.empty(BALANCED)
    for centre in centres:
        tangle, reason = creation.try_add_loop(tangle, circle(centre), BALANCED)
        assert reason is None
    return tangle


def cut_sites(tangle):
    return creation.merge_cuts(tangle, creation.merge_sites(tangle, BALANCED), BALANCED, np.random.default_rng(0))


@pytest.mark.parametrize("centres, cross_joins, splices", [
    (((300, 500), (630, 500)), 1, 0),  # 30 px apart: a near pass
    (((300, 500), (560, 500), (430, 330)), 0, 1),  # two rings crossing twice, a third across both
])
def test_a_merge_makes_two_rings_one_loop_that_crosses_itself_where_they_met(centres, cross_joins, splices):
    """A cross-join at a near pass adds an X; a splice takes one away: either way two rings become one loop
    that keeps every rule."""
    tangle = ring_tangle(*centres)
    sites = cut_sites(tangle)
    assert (len(sites[0]) > 0, len(sites[1]) > 0) == (cross_joins > 0, splices > 0)
    conflicts = creation.same_pair_conflicts(tangle.crossings, BALANCED)
    chosen = creation.choose_merges(tangle, sites, conflicts, cross_joins, splices, BALANCED, np.random.default_rng(0))
    loops = creation.merged_loops(tangle, chosen)
    assert len(loops) == len(centres) - 1
    assert tangle_violations(loops, BALANCED) == []
    crossings = find_all_events(loops, BALANCED)[1]
    assert len(crossings) == len(tangle.crossings) + cross_joins - splices
    assert crossings.is_self.sum() == 1  # the X made, or the rings' other crossing
    # Alone, a cross-joined pair is a figure eight whose two lobes nothing crosses (merge_rings refuses that).
    assert creation.bare_lobes(crossings, len(loops)) == (2 if cross_joins else 0)
    assert creation.bare_lobes(tangle.crossings, len(tangle.loops)) == 0
    # Merges only join different loops: as many as there are rings would join a loop to itself.
    assert creation.choose_merges(tangle, sites, conflicts, cross_joins, len(centres) - cross_joins, BALANCED,
                                  np.random.default_rng(0)) is None


def test_a_splice_that_would_leave_a_bare_lobe_is_marked_and_tried_last():
    """Two rings alone crossing twice bound four faces of two corners each: splicing either crossing would
    leave one face cornered by the other crossing alone, a lobe a count of curls finds. Where some splices
    leave none, those are chosen first."""
    pair = ring_tangle((300, 500), (500, 500))
    sites = cut_sites(pair)
    assert sites[1][:, 5].tolist() == [1, 1]
    conflicts = creation.same_pair_conflicts(pair.crossings, BALANCED)
    chosen = creation.choose_merges(pair, sites, conflicts, 0, 1, BALANCED, np.random.default_rng(0))
    loops = creation.merged_loops(pair, chosen)
    assert creation.bare_lobes(find_all_events(loops, BALANCED)[1], 1) == 2  # still made when nothing else is left
    # Two rings crossing twice with a third across both, and a fourth crossing only the third, twice.
    four = ring_tangle((300, 750), (560, 750), (430, 580), (430, 330))
    sites = cut_sites(four)
    safe = sites[1][:, 5] == 0
    assert safe.any() and not safe.all()
    conflicts = creation.same_pair_conflicts(four.crossings, BALANCED)
    for seed in range(10):
        chosen = creation.choose_merges(four, sites, conflicts, 0, 1, BALANCED, np.random.default_rng(seed))
        assert [list(site) for site in chosen] in [[row] for row in sites[1][safe, :5].tolist()]


def test_merges_keep_the_crossing_count_whatever_n():
    """Half the merges add an X and half take one away, so images of 5 loops hold as many crossings as of 11."""
    cfg = Config(n=70, seed=3)
    totals = {}
    for index in range(cfg.n):
        _, record, _ = creation.make_sample(cfg, index)
        totals.setdefault(record["num_loops"], []).append(record["num_crossings"] + record["num_self_crossings"])
    few, many = np.mean(totals[5] + totals[6]), np.mean(totals[10] + totals[11])
    assert abs(few - many) < 3.5  # all splices would leave five loops about 5.5 fewer


def test_a_tangle_is_kept_only_if_it_takes_the_most_merges_any_n_asks_for(monkeypatch):
    """Which ring tangles survive must not depend on N: an eleven-loop sample, which merges nothing, still
    refuses a tangle that cannot take the six merges of a five-loop one."""
    asked = []

    def no_room(tangle, sites, conflicts, cross_joins, splices, cfg, rng):
        asked.append(cross_joins + splices)
        return None
    monkeypatch.setattr(creation, "choose_merges", no_room)
    rng = np.random.default_rng(0)
    tangle = creation.place_loops(BALANCED, rng, creation.ring_shapes(BALANCED, rng), Counter())
    redraws = Counter()
    assert creation.merge_rings(tangle, 11, BALANCED, rng, redraws) is None
    assert asked == [6] and redraws["merge_sites"] == 1


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
    """The ring tangle of a default sample but its last ring, and the last ring's budgeted shape."""
    rng = np.random.default_rng(index)
    shapes = creation.ring_shapes(BALANCED, rng)
    tangle = None
    while tangle is None:
        tangle = creation.place_loops(BALANCED, rng, shapes[:-1], Counter())
    return tangle, shapes[-1]


def drawn_loop(shape, seed):
    """The first loop of the shape that draw_loop places, drawing from default_rng(seed)."""
    rng = np.random.default_rng(seed)
    while True:
        loop, _ = creation.draw_loop(BALANCED, rng, shape)
        if loop is not None:
            return loop


def placements(partial, loop, count, seed):
    """count copies of loop at docked positions, as the sampler tries them.  (count, P, 2)"""
    rng, offsets = np.random.default_rng(seed), []
    while len(offsets) < count:
        offsets.extend(creation.docked_offsets(partial, loop, BALANCED, rng))
    return loop[None] + np.array(offsets[:count])[:, None]


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
    tries = placements(partial, loop, 300, index)
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
    tries = placements(partial, loop, 300, index)
    room = partial.crossing_room(shape)
    allowed = creation.unbroken(creation.placement_faults(partial, tries, unmoved(partial, tries), room, BALANCED)[0])
    reasons = [creation.try_add_loop(partial, loop_copy, BALANCED, shape)[1] for loop_copy in tries]
    assert 0 < allowed.sum() < len(tries)
    assert all(reason in SCREENED_RULES for reason, ok in zip(reasons, allowed) if not ok)


@pytest.mark.parametrize("index", range(3))
def test_the_crossings_the_screen_hands_on_are_the_ones_placement_finds(index):
    partial, shape = partial_tangle(index)
    loop = drawn_loop(shape, index)
    tries = placements(partial, loop, 200, index)
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
    room = partial.crossing_room(shape)
    for seed in range(index, index + 1000, 10):  # most draws fit nowhere; with no cap, find one that fits
        loop = drawn_loop(shape, seed)
        offsets = creation.docked_offsets(partial, loop, BALANCED, np.random.default_rng(7))
        assert 0 < len(offsets) <= creation.PLACEMENTS_PER_SHAPE
        tries = loop[None] + offsets[:, None]
        faults, _ = creation.placement_faults(partial, tries, unmoved(partial, tries), room, BALANCED)
        allowed = creation.unbroken(faults)
        if allowed.any() or cap is not None:
            break
    placed, pairs, reason = creation.screen_placements(partial, loop, BALANCED, np.random.default_rng(7), shape)
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


def test_a_ring_as_wide_as_the_drawable_area_is_refused_for_the_margin():
    partial, shape = partial_tangle(0)
    low, high = BALANCED.interior_margin, BALANCED.size - BALANCED.interior_margin
    t = np.linspace(0, 2 * np.pi, 900, endpoint=False)
    loop = np.column_stack([low + (high - low) * (1 + np.cos(t)) / 2, 512 + 100 * np.sin(t)])
    loop[0, 0] = np.nextafter(high, np.inf)  # an ulp past the margin, as rounding in a shift can leave it
    assert creation.placement_range(loop, BALANCED) is None
    placed, _, reason = creation.screen_placements(partial, loop, BALANCED, np.random.default_rng(0), shape)
    assert placed is None and reason == "interior_margin"


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
