"""Line charts as small, deterministic SVG files (the README embeds them; GitHub renders SVG).

Written by hand rather than with a plotting library: the report environment
stays pandas + tabulate, and the same data gives the same bytes, so a
republished table changes a plot's file only when its numbers change.
Standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape

# Colour-blind-safe palette (Okabe–Ito), then greys.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000", "#999999", "#666666")


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * exp:
            return step * exp
    return 10 * exp


def _fmt(v: float) -> str:
    return f"{v:.0f}" if v >= 10 or v == int(v) else f"{v:.2g}"


def line_chart(
    title: str,
    x_labels: Sequence[str],
    series: Mapping[str, Sequence[float | None]],
    *,
    y_label: str,
    x_label: str = "",
    y_max: float | None = None,
    dashed: Sequence[str] = (),
    width: int = 920,
    height: int = 400,
) -> str:
    """One line per series over categorical x; ``None`` leaves a gap. ``dashed`` series draw dashed. Both axes
    carry their title (``x_label`` under the rotated tick labels).

    (Over 60 lines, on purpose: one SVG drawn back to front, frame, grid, ticks, lines, legend, each a few lines
    that share the chart's geometry.)"""
    left, right, top, bottom = 64, 290, 40, 98
    plot_w, plot_h = width - left - right, height - top - bottom
    values = [v for vs in series.values() for v in vs if v is not None]
    top_value = y_max if y_max is not None else _nice_max(max(values, default=1.0))
    n = max(len(x_labels), 1)

    def x(i: int) -> float:
        return left + (plot_w * (i + 0.5) / n)

    def y(v: float) -> float:
        return top + plot_h * (1 - min(v, top_value) / top_value)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'font-family="Helvetica, Arial, sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text x="{left}" y="22" font-size="15" font-weight="bold">{escape(title)}</text>',
    ]
    for k in range(6):
        tick = top_value * k / 5
        yy = y(tick)
        out.append(f'<line x1="{left}" y1="{yy:.1f}" x2="{left + plot_w}" y2="{yy:.1f}" stroke="#e0e0e0"/>')
        out.append(f'<text x="{left - 6}" y="{yy + 4:.1f}" text-anchor="end" fill="#444">{_fmt(tick)}</text>')
    out.append(
        f'<text transform="translate(16,{top + plot_h / 2:.0f}) rotate(-90)" text-anchor="middle" fill="#444">'
        f"{escape(y_label)}</text>"
    )
    for i, label in enumerate(x_labels):
        out.append(f'<text transform="translate({x(i):.1f},{top + plot_h + 12}) rotate(45)" fill="#444">{escape(label)}</text>')
    if x_label:
        out.append(
            f'<text x="{left + plot_w / 2:.0f}" y="{height - 8}" text-anchor="middle" fill="#444">{escape(x_label)}</text>'
        )
    out.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#888"/>')
    for s, (name, vs) in enumerate(series.items()):
        colour = PALETTE[s % len(PALETTE)]
        dash = ' stroke-dasharray="6 4"' if name in dashed else ""
        run: list[str] = []
        segments: list[list[str]] = []
        for i, v in enumerate(vs):
            if v is None:
                if run:
                    segments.append(run)
                run = []
                continue
            run.append(f"{x(i):.1f},{y(v):.1f}")
        if run:
            segments.append(run)
        for seg in segments:
            if len(seg) > 1:
                out.append(f'<polyline points="{" ".join(seg)}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
        for i, v in enumerate(vs):
            if v is not None:
                tip = f"{name} · {x_labels[i]}: {_fmt(v)}"
                out.append(f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="3" fill="{colour}"><title>{escape(tip)}</title></circle>')
        ly = top + 8 + 18 * s
        lx = left + plot_w + 16
        out.append(f'<line x1="{lx}" y1="{ly}" x2="{lx + 24}" y2="{ly}" stroke="{colour}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{lx + 30}" y="{ly + 4}">{escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
