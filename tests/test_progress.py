"""Progress lines: done / total, an estimate of the time left by what the same model took, a heartbeat."""

from __future__ import annotations

from harness.pool.progress import Progress, clock


def test_clock() -> None:
    assert (clock(0), clock(75), clock(3725)) == ("0:00", "1:15", "1:02:05")


def test_the_estimate_weighs_what_is_left_by_its_kind() -> None:
    """Two artifacts of a gotcha (1 s each) and two of a transformer (60 s each) are left after one of each: the
    estimate is the transformer's 60 s plus the gotcha's 1 s, over the two workers, not the mean of the two."""
    said: list[str] = []
    progress = Progress("export", 6, said.append, workers=2)
    progress.expect(["gotcha"] * 3 + ["bert"] * 3)
    progress.done("export gotcha.torchscript.op13 ok", kind="gotcha", seconds=1.0)
    progress.done("export bert.torchscript.op13 ok", kind="bert", seconds=60.0)
    assert said[-1] == "export bert.torchscript.op13 ok  [2/6, ETA 1:01]"  # (2 x 60 + 2 x 1) / 2 workers
    for _ in range(3):
        progress.tick("quiet", kind="gotcha", seconds=1.0)  # within 5 s of the last line: counted, not printed
    assert said[-1].startswith("export bert") and progress.count == 5
    progress.tick("the last one always prints", kind="bert", seconds=60.0)
    assert said[-1].startswith("the last one always prints  [6/6, ") and said[-1].endswith(" in all]")


def test_a_heartbeat_names_what_runs() -> None:
    said: list[str] = []
    progress = Progress("export", 3, said.append)
    progress.running([("bert.dynamo.op18", 45.0), ("gpt2.torchscript.op13", 12.0)])
    assert said == ["export: running bert.dynamo.op18 (0:45), gpt2.torchscript.op13 (0:12)  [0/3 done, ETA ?]"]
