"""The roofline picture of a calculator with `chart: roofline`: one roof per hardware preset, one dot
per operator preset, on log-log axes, as an SVG the build draws beside the page. Pure.

The picture is laid out for its narrowest reading too: at a phone's width (templates/calc_chart.svg
doubles its text there) every other tick label is dropped where they would crowd, and roof labels
keep a line apart at that size."""

from __future__ import annotations

import math
from dataclasses import dataclass

from infralens.lab.shown import (
    SI,
    Case,
    scaled,
    show,
    significant,
)
from infralens.model.calculator import (
    Calculator,
)

WIDTH, HEIGHT = 640, 400
"""The picture's size in SVG units."""
LEFT, RIGHT, TOP, BOTTOM = 70, 604, 34, 340
"""Where the plot area's edges stand inside it (room for text at its largest: the y axis's title
above it, the x axis's below)."""
LINE = 24
"""The height of a line of text at its largest size (templates/calc_chart.svg), in SVG units."""
CROWDED = 7
"""From this many ticks on an axis, every other label is dropped at a phone's width."""


@dataclass(frozen=True)
class Tick:
    at: float
    """Pixels along its axis."""
    text: str
    minor: bool = False
    """Its label is dropped at a phone's width, where the axis has too many to read."""


@dataclass(frozen=True)
class Roof:
    label: str
    path: str
    """SVG path data of the roof, in the picture's pixels."""
    ridge: tuple[float, float] | None
    """Where the slope meets the flat roof, in pixels, when it is inside the picture."""
    label_at: tuple[float, float]


@dataclass(frozen=True)
class Dot:
    """An operator on the chart, numbered in the table's column order."""

    number: int
    x: float
    y: float


@dataclass(kw_only=True, frozen=True)
class RooflineView:
    """A log-log roofline drawn at build: one roof per hardware case, one dot per operator case at
    the defaults' hardware, and the marker at the defaults, which the page's script moves."""

    width: int
    height: int
    left: float
    top: float
    right: float
    bottom: float
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]
    roofs: tuple[Roof, ...]
    dots: tuple[Dot, ...]
    marker: tuple[float, float]
    current: str
    """The path of the roof at the current inputs (the defaults' roof, until the script moves it)."""
    summary: str
    span: tuple[float, float, float, float]
    """The decades shown: log10 of the x range and of the y range."""


def roofline_view(calc: Calculator, cases: tuple[Case, ...]) -> RooflineView:
    """Lay out a calculator's roofline: the decades its cases need, the roofs, the operators."""
    chart = calc.chart
    assert chart is not None
    groups = calc.groups()
    hardware_groups = {g for g, names in groups.items() if chart.peak in names or chart.bandwidth in names}
    operator_groups = {g for g, names in groups.items() if chart.x in names} - hardware_groups
    numbers = [{i.name: i.number(v) for i, (_, v) in zip(calc.inputs, case.values)} | dict(case.results) for case in cases]
    # Only a case above 0 on every axis has a place on log-scale axes; the manifest's checks refuse
    # the rest (calculator._check_chart, check_calculator), so none is dropped from a page that builds.
    plotted = [(case, at) for case, at in zip(cases, numbers) if all(math.isfinite(at[k]) and at[k] > 0 for k in (chart.x, chart.y, chart.peak, chart.bandwidth))]
    cases, numbers = (tuple(c for c, _ in plotted), [at for _, at in plotted]) if plotted else (cases[:1], numbers[:1])
    roofs_at: dict[tuple[float, float], str] = {}
    for case, at in zip(cases, numbers):
        if case.group in hardware_groups or case is cases[0]:
            roofs_at.setdefault((at[chart.peak], at[chart.bandwidth]), case.label)
    operators = [(case, at) for case, at in zip(cases, numbers) if case.group in operator_groups]
    xs = [at[chart.x] for at in numbers] + [peak / bandwidth for peak, bandwidth in roofs_at]
    x_input = calc.input(chart.x)
    lx0 = max(math.floor(math.log10(min(xs) / 2)), math.floor(math.log10(x_input.min)))
    lx1 = min(math.ceil(math.log10(max(xs) * 2)), math.ceil(math.log10(x_input.max)))
    ys = [at[chart.y] for at in numbers] + [min(peak, 10**lx0 * bandwidth) for peak, bandwidth in roofs_at] + [peak for peak, _ in roofs_at]
    ly0, ly1 = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys) * 1.5))

    def px(x: float) -> float:
        return round(LEFT + (math.log10(x) - lx0) / (lx1 - lx0) * (RIGHT - LEFT), 1)

    def py(y: float) -> float:
        return round(BOTTOM - (math.log10(y) - ly0) / (ly1 - ly0) * (BOTTOM - TOP), 1)

    roofs = []
    heights = label_heights([py(peak) - 5 for peak, _ in roofs_at])
    for ((peak, bandwidth), label), height in zip(roofs_at.items(), heights):
        path, ridge = roof_path(peak, bandwidth, lx0, lx1, ly0, px, py)
        roofs.append(Roof(label, path, ridge, (RIGHT - 4, height)))
    dots = tuple(Dot(n, px(at[chart.x]), py(at[chart.y])) for n, (_, at) in enumerate(operators, 1))
    first = numbers[0]
    x_ticks = ticks([px(10.0**k) for k in range(lx0, lx1 + 1)], [significant(10.0**k) for k in range(lx0, lx1 + 1)])
    y_ticks = ticks([py(10.0**k) for k in range(ly0, ly1 + 1)], ["".join(scaled(10.0**k, 1000, SI)) for k in range(ly0, ly1 + 1)])
    y_output = next(o for o in calc.outputs if o.name == chart.y)
    summary = "; ".join(f"{label}: flat at {show(peak, 'si', y_output.unit)} from {significant(peak / bandwidth)} FLOP/B" for (peak, bandwidth), label in roofs_at.items())
    return RooflineView(
        width=WIDTH, height=HEIGHT, left=LEFT, top=TOP, right=RIGHT, bottom=BOTTOM, x_ticks=x_ticks, y_ticks=y_ticks, roofs=tuple(roofs), dots=dots,
        marker=(px(first[chart.x]), py(first[chart.y])), current=roof_path(first[chart.peak], first[chart.bandwidth], lx0, lx1, ly0, px, py)[0],
        summary=summary, span=(lx0, lx1, ly0, ly1),
    )


def ticks(places: list[float], texts: list[str]) -> tuple[Tick, ...]:
    """An axis's ticks; on a crowded axis every other label (the first kept) is minor."""
    crowded = len(places) >= CROWDED
    return tuple(Tick(at, text, crowded and index % 2 == 1) for index, (at, text) in enumerate(zip(places, texts)))


def label_heights(wanted: list[float]) -> list[float]:
    """Baselines for the roofs' labels, each as near as it can be to the one wanted (just above its
    roof) while every two stay a line apart: a higher label is pushed up, and all of them down if
    the top one would leave the picture."""
    order = sorted(range(len(wanted)), key=lambda index: -wanted[index])  # lowest on the page first
    placed = list(wanted)
    for before, index in zip(order, order[1:]):
        placed[index] = min(wanted[index], placed[before] - LINE)
    if order and (short := TOP + LINE - 4 - min(placed)) > 0:
        placed = [height + short for height in placed]
    return [round(height, 1) for height in placed]


def roof_path(peak: float, bandwidth: float, lx0: int, lx1: int, ly0: int, px, py) -> tuple[str, tuple[float, float] | None]:
    """The roof min(peak, x × bandwidth) across the picture, and its ridge point if inside it."""
    x0, x1, ridge = 10.0**lx0, 10.0**lx1, peak / bandwidth
    start = max(x0, 10.0**ly0 / bandwidth)  # where the slope enters above the bottom edge
    points = [(start, min(peak, start * bandwidth))]
    if start < ridge < x1:
        points.append((ridge, peak))
    points.append((x1, min(peak, x1 * bandwidth)))
    path = "M" + " L".join(f"{px(x)} {py(y)}" for x, y in points)
    return path, (px(ridge), py(peak)) if start < ridge < x1 else None
