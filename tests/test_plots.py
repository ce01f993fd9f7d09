"""The SVG line charts: well-formed, one line per series with a point per measured value, gaps for the rest."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from harness.publish import plots

NS = "{http://www.w3.org/2000/svg}"


def test_one_polyline_per_run_of_values_and_a_point_per_value() -> None:
    svg = plots.line_chart(
        "pass rate <%>",
        ["1.15.1", "1.16.3", "1.17.3", "1.18.1"],
        {"dynamo opset 18": [None, None, 70.0, 72.5], "torchscript <op> 17": [60.0, None, 61.0, 62.0]},
        y_label="% of cases",
        y_max=100,
        dashed=["torchscript <op> 17"],
    )
    root = ET.fromstring(svg)  # escaped: a series name with < stays well-formed
    lines = root.findall(f"{NS}polyline")
    assert len(lines) == 2  # dynamo: one run of 2 points; torchscript: a gap leaves a single point, no line
    assert [len(pl.get("points", "").split()) for pl in lines] == [2, 2]
    assert sum(1 for c in root.iter(f"{NS}circle")) == 5
    tips = [t.text for t in root.iter(f"{NS}title")]
    assert "dynamo opset 18 · 1.18.1: 72" in tips[1] or "dynamo opset 18 · 1.18.1: 72.5" in tips
    assert any(el.get("stroke-dasharray") for el in root.iter(f"{NS}polyline"))
    texts = [t.text for t in root.iter(f"{NS}text")]
    assert "pass rate <%>" in texts and "100" in texts


def test_the_same_data_gives_the_same_bytes() -> None:
    args = ("t", ["a", "b"], {"s": [1.0, 2.0]})
    assert plots.line_chart(*args, y_label="µs") == plots.line_chart(*args, y_label="µs")
