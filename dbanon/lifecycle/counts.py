"""What a release counts: the figures every run reports whatever the method (rows, classes,
smallest class...), and the two ways of counting groups (released classes, internal groups)."""

from __future__ import annotations

from typing import Any

# Figures every run reports, whatever the method; the rest of a run's metrics are the method's.
COMMON_FIGURES = ("rows", "classes", "min_class_size", "gcp", "risk", "seconds", "seed")


# The groups a method formed inside (its build's figures, dbanon.metrics.loss): two groups can be
# released with equal QIs, so they are not the release's classes, and are never named as such.
GROUP_FIGURES = ("groups", "min_group_size", "max_group_size", "avg_group_size")


# What runs recorded before the two were told apart: the groups' largest and average size.
_OLD_GROUP_FIGURES = ("max_class_size", "avg_class_size")


def released_classes(figures: dict[str, Any]) -> dict[str, Any] | None:
    """The release's classes, rows with equal released QIs (a GROUP BY over the released
    relation, Method.figures): count, min, max, avg size; None for a release without classes."""
    count, rows = figures.get("classes"), figures.get("rows")
    if count is None:
        return None
    return {
        "count": count,
        "min_size": figures.get("min_class_size"),
        "max_size": figures.get("max_class_size"),
        "avg_size": round(rows / count, 4) if count and rows is not None else None,
    }


def internal_groups(metrics: dict[str, Any]) -> dict[str, Any] | None:
    """The method's own groups (count, min, max, avg size) from a run's metrics; None for a
    method that forms none beyond its classes. A run recorded before the two were told apart
    has only the groups' largest and average size."""
    if any(f in metrics for f in GROUP_FIGURES):
        names = GROUP_FIGURES
    elif "released_classes" not in metrics and any(f in metrics for f in _OLD_GROUP_FIGURES):
        names = (None, None, *_OLD_GROUP_FIGURES)
    else:
        return None
    return {k: metrics.get(f) if f else None
            for k, f in zip(("count", "min_size", "max_size", "avg_size"), names, strict=True)}


def counted(metrics: dict[str, Any]) -> dict[str, Any]:
    """`report`'s two named figures, from a run's metrics of any age."""
    if "released_classes" in metrics:
        released = metrics["released_classes"]
    else:  # an older run: its max_class_size, if any, was the largest group's
        released = released_classes({**metrics, "max_class_size": None})
    return {"released_classes": released, "internal_groups": internal_groups(metrics)}

