"""Validate stage: checks across labs, then excerpts cut and key blocks bound.

Input: a loaded Project. Output: ResolvedLab values, or one InputError with every problem.
"""

from __future__ import annotations

from infralens.errors import Problems
from infralens.excerpts import resolve_excerpt
from infralens.load import Project
from infralens.models import Lab, ResolvedLab
from infralens.schema import did_you_mean


def check_labs(project: Project, problems: Problems) -> None:
    """Report duplicate lab numbers and tracks that site.yml does not declare."""
    tracks = [track.id for track in project.site.tracks]
    by_number: dict[int, Lab] = {}
    for lab in project.labs:
        if lab.track not in tracks:
            problems.add(lab.track_mark, f"unknown track {lab.track!r}{did_you_mean(lab.track, tracks)}; tracks in {project.site.path}: {', '.join(tracks)}")
        first = by_number.get(lab.number)
        if first is not None:
            problems.add(lab.number_mark, f"lab number {lab.number} is already used by {first.path}:{first.number_mark.line}")
        else:
            by_number[lab.number] = lab


def resolve(project: Project) -> tuple[ResolvedLab, ...]:
    """Check the labs together and resolve each one's excerpt."""
    problems = Problems()
    check_labs(project, problems)
    resolved = []
    for lab in project.labs:
        excerpt = resolve_excerpt(lab, project.sources[lab.preview.starter], problems)
        if excerpt is not None:
            resolved.append(ResolvedLab(lab, excerpt))
    problems.raise_if_any()
    return tuple(resolved)
