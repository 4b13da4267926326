"""The profile's account of where a grade's workers were stopped for other grades' windows, by
their own stages (``grade.side_by_side.stepped_by_stage``)."""
from kernelmill.grade.side_by_side import stage_seconds, stepped_by_stage


def test_steps_aside_are_split_over_the_stages_they_fall_in():
    # a run that started at t=100: setup from 0.5 s, forward from 2 s, timing from 9 s, ended
    # at 12 s; stopped 3-5 s (forward), 8.5-9.5 s (across forward and timing) and 11-13 s (past
    # its end: counted to its end only)
    stages = [("setup", 0.5), ("forward", 2.0), ("timing", 9.0)]
    spans = [(103.0, 105.0), (108.5, 109.5), (111.0, 113.0)]
    by_stage = stepped_by_stage(spans, 100.0, stages, 12.0)
    assert by_stage == {"forward": 2.5, "timing": 1.5}
    seconds = stage_seconds(stages, 12.0)
    assert all(by_stage[k] <= seconds[k] for k in by_stage)
    # before the first mark: ``start``, as ``stage_seconds`` names it; unknown start, no stages
    # or no steps: nothing
    assert stepped_by_stage([(100.1, 100.3)], 100.0, stages, 12.0) == {"start": 0.2}
    assert stepped_by_stage(spans, None, stages, 12.0) == {}
    assert stepped_by_stage(spans, 100.0, [], 12.0) == {}
    assert stepped_by_stage([], 100.0, stages, 12.0) == {}
