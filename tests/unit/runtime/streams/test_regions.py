"""Region events: a track's box bottom centre entering and leaving named polygons, per stream, with a lost track
leaving only after ``lost_after`` frames; the same frames always give the same events."""

from __future__ import annotations

import json

import pytest

from edgebuild.runtime.streams.records import Track, TrackedFrame
from edgebuild.runtime.streams.regions import (
    LOST_AFTER,
    Region,
    RegionWatcher,
    anchor,
    load_regions,
    point_in_polygon,
    regions_from_json,
)

DOOR = Region.rectangle("door", 100, 100, 200, 200)
YARD = Region.rectangle("yard", 150, 100, 300, 200)
L_SHAPE = Region("l", [(0, 0), (100, 0), (100, 50), (50, 50), (50, 100), (0, 100)])


def _at(track_id: int, x: float, y: float, cls: int = 0) -> Track:
    """A 20 x 40 box standing with its bottom centre on (x, y)."""
    return Track(track_id, [x - 10, y - 40, x + 10, y], cls, 0.9)


def _frame(number: int, *tracks: Track, stream: int = 0) -> TrackedFrame:
    return TrackedFrame(stream, number, list(tracks), time=1000.0 + number)


def _brief(events) -> list[tuple]:
    return [(e.stream, e.frame, e.region, e.kind, e.track.id) for e in events]


@pytest.mark.parametrize(("point", "inside"), [
    ((25, 25), True), ((75, 25), True), ((25, 75), True),  # the L's three squares
    ((75, 75), False),  # its notch
    ((100, 25), True), ((50, 75), True), ((0, 0), True), ((50, 50), True),  # edges and corners
    ((-1, 50), False), ((101, 25), False), ((25, 100.5), False),
])
def test_a_point_is_inside_a_concave_polygon_or_on_its_edge(point, inside) -> None:
    assert point_in_polygon(point, L_SHAPE.points) is inside


def test_the_anchor_is_the_box_bottom_centre() -> None:
    assert anchor(Track(1, [10, 20, 30, 80], 0, 0.5)) == (20.0, 80.0)
    # the box's centre (150, 90) is above the door, its feet (150, 120) inside: it is in
    watcher = RegionWatcher([DOOR])
    assert _brief(watcher.update(_frame(0, Track(1, [140, 60, 160, 120], 0, 0.9))))[0][3] == "enter"
    # the box's centre (150, 150) is inside, its feet (150, 230) below: it is not
    assert watcher.update(_frame(0, Track(2, [140, 70, 160, 230], 0, 0.9), stream=1)) == []


def test_a_track_enters_and_leaves_with_its_frame_box_and_time() -> None:
    watcher = RegionWatcher([DOOR])
    assert watcher.update(_frame(0, _at(7, 50, 150))) == []
    entered = watcher.update(_frame(1, _at(7, 120, 150)))
    assert _brief(entered) == [(0, 1, "door", "enter", 7)]
    assert entered[0].track == _at(7, 120, 150) and entered[0].time == 1001.0
    assert watcher.inside(0, 7) == ["door"]
    assert watcher.update(_frame(2, _at(7, 130, 150))) == []  # still inside: nothing
    left = watcher.update(_frame(3, _at(7, 250, 150)))
    assert _brief(left) == [(0, 3, "door", "leave", 7)] and left[0].track == _at(7, 250, 150)
    assert left[0].json_line() == ('{"stream":0,"frame":3,"region":"door","event":"leave","track":'
                                   '{"id":7,"box":[240.0,110.0,260.0,150.0],"class":0,"score":0.9},"time":1003.0}')


def test_crossing_from_one_region_to_another_leaves_then_enters() -> None:
    left, right = Region.rectangle("left", 0, 0, 100, 100), Region.rectangle("right", 100.5, 0, 200, 100)
    watcher = RegionWatcher([right, left])
    watcher.update(_frame(0, _at(1, 50, 50)))
    assert _brief(watcher.update(_frame(1, _at(1, 150, 50)))) == [(0, 1, "left", "leave", 1),
                                                                 (0, 1, "right", "enter", 1)]


def test_overlapping_regions_are_entered_in_the_order_they_are_given() -> None:
    watcher = RegionWatcher([YARD, DOOR])
    assert _brief(watcher.update(_frame(0, _at(1, 175, 150)))) == [(0, 0, "yard", "enter", 1),
                                                                  (0, 0, "door", "enter", 1)]
    assert _brief(watcher.update(_frame(1, _at(1, 250, 150)))) == [(0, 1, "door", "leave", 1)]


def test_a_track_lost_inside_leaves_after_lost_after_frames_with_its_last_box() -> None:
    watcher = RegionWatcher([DOOR])
    watcher.update(_frame(10, _at(4, 150, 150)))
    for number in range(11, 10 + LOST_AFTER):  # missing for 29 frames: still inside
        assert watcher.update(_frame(number)) == []
    assert watcher.inside(0, 4) == ["door"]
    lost = watcher.update(_frame(10 + LOST_AFTER))
    assert _brief(lost) == [(0, 40, "door", "leave", 4)]
    assert lost[0].track == _at(4, 150, 150) and lost[0].time == 1040.0
    assert watcher.update(_frame(41)) == [] and watcher.inside(0, 4) == []


def test_a_track_found_again_before_lost_after_never_left() -> None:
    watcher = RegionWatcher([DOOR], lost_after=5)
    watcher.update(_frame(0, _at(4, 150, 150)))
    assert [watcher.update(_frame(n)) for n in range(1, 5)] == [[]] * 4
    assert watcher.update(_frame(5, _at(4, 160, 150))) == []  # back at the fifth frame: no leave, no enter
    assert watcher.update(_frame(9)) == []
    assert _brief(watcher.update(_frame(10))) == [(0, 10, "door", "leave", 4)]  # 5 frames from frame 5


def test_dropped_frames_count_towards_lost_after() -> None:
    watcher = RegionWatcher([DOOR], lost_after=30)
    watcher.update(_frame(10, _at(4, 150, 150)))
    assert _brief(watcher.update(_frame(45))) == [(0, 45, "door", "leave", 4)]


def test_lost_tracks_leave_in_id_order_after_the_frames_own_events() -> None:
    watcher = RegionWatcher([DOOR, YARD], lost_after=2)
    watcher.update(_frame(0, _at(9, 175, 150), _at(3, 120, 150)))
    events = watcher.update(_frame(2, _at(5, 250, 150)))
    assert _brief(events) == [(0, 2, "yard", "enter", 5), (0, 2, "door", "leave", 3),
                              (0, 2, "door", "leave", 9), (0, 2, "yard", "leave", 9)]


def test_regions_and_tracks_belong_to_their_stream() -> None:
    only_1 = Region.rectangle("gate", 0, 0, 100, 100, stream=1)
    watcher = RegionWatcher([only_1, DOOR], lost_after=3)
    assert _brief(watcher.update(_frame(0, _at(1, 50, 50), stream=0))) == []
    assert _brief(watcher.update(_frame(0, _at(1, 50, 50), stream=1))) == [(1, 0, "gate", "enter", 1)]
    assert _brief(watcher.update(_frame(0, _at(1, 150, 150), stream=0))) == [(0, 0, "door", "enter", 1)]
    # stream 1's frames make only stream 1's track 1 lost, whatever their numbers
    assert _brief(watcher.update(_frame(100, stream=1))) == [(1, 100, "gate", "leave", 1)]
    assert watcher.inside(0, 1) == ["door"]
    assert _brief(watcher.update(_frame(3, stream=0))) == [(0, 3, "door", "leave", 1)]


def test_finish_makes_every_track_still_inside_leave_at_its_streams_last_frame() -> None:
    watcher = RegionWatcher([DOOR])
    watcher.update(_frame(0, _at(1, 150, 150), _at(2, 20, 20)))
    watcher.update(_frame(3, _at(2, 20, 20)))
    assert _brief(watcher.finish()) == [(0, 3, "door", "leave", 1)]
    assert watcher.finish() == []


def test_a_track_lost_outside_every_region_is_forgotten_quietly() -> None:
    watcher = RegionWatcher([DOOR], lost_after=2)
    watcher.update(_frame(0, _at(1, 20, 20)))
    assert watcher.update(_frame(5)) == [] and watcher.finish() == []


def test_the_same_frames_give_the_same_events() -> None:
    frames = [_frame(n, *[_at(i, (n * 13 + i * 37) % 320, (n * 7 + i * 11) % 240) for i in range(n % 5)])
              for n in range(200)]

    def run() -> list:
        watcher = RegionWatcher([DOOR, YARD, L_SHAPE], lost_after=3)
        return [e.json_line() for f in frames for e in watcher.update(f)] + [e.json_line() for e in watcher.finish()]

    first = run()
    assert len(first) > 50 and first == run()


def test_regions_from_json_take_polygons_and_boxes(tmp_path) -> None:
    path = tmp_path / "regions.json"
    path.write_text(json.dumps({"regions": [{"name": "door", "box": [100, 100, 200, 200]},
                                            {"name": "lane", "stream": 1, "polygon": [[0, 0], [10, 0], [5, 9]]}]}))
    assert load_regions(str(path)) == [DOOR, Region("lane", [(0.0, 0.0), (10.0, 0.0), (5.0, 9.0)], 1)]


@pytest.mark.parametrize(("data", "says"), [
    ({"zones": []}, "JSON list"),
    ([{"box": [0, 0, 1, 1]}], "needs a \"name\""),
    ([{"name": "x"}], "neither"),
])
def test_bad_regions_json_says_what_is_wrong(data, says) -> None:
    with pytest.raises(ValueError, match=says):
        regions_from_json(data)


def test_a_watcher_refuses_regions_it_cannot_tell_apart_or_draw() -> None:
    with pytest.raises(ValueError, match="share a name"):
        RegionWatcher([DOOR, DOOR])
    with pytest.raises(ValueError, match="three points"):
        RegionWatcher([Region("line", [(0, 0), (1, 1)])])
    with pytest.raises(ValueError, match="at least 1"):
        RegionWatcher([DOOR], lost_after=0)
    RegionWatcher([DOOR, Region.rectangle("door", 0, 0, 1, 1, stream=2)])  # another stream's door is fine
