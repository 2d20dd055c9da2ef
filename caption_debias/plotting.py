"""Matplotlib helpers every report's figures share (stats, probe, demo): imported by the functions
that draw, so matplotlib loads only when a figure is made."""

from __future__ import annotations


def legend_outside(ax) -> None:
    """The legend to the right of the axes, where it cannot cover the data (the stats, probe
    and demo plots all use it)."""
    if ax.get_legend_handles_labels()[0]:  # an empty dataset draws nothing to label
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False, fontsize="small")
