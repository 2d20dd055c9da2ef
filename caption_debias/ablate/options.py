"""AblateOptions: every option of `caption-debias ablate`, the one source of defaults and help.

The plan file (plan.py) says what is compared; these flags say how the run goes.
"""

from __future__ import annotations

from dataclasses import dataclass

from caption_debias.options import EngineOptions, OverwriteOptions, ProgressOptions, check_device_name, option

DEVICE_HELP = "Where arms train and evaluate: auto (GPU when there is one), cpu, cuda, cuda:N."


@dataclass
class AblateOptions(EngineOptions, OverwriteOptions, ProgressOptions):
    """Every option of `caption-debias ablate` (the CLI reads defaults and --help from here).

    --workers N runs that many arm x seed units side by side, each training and evaluating in a
    process of its own; --engine ray runs each as a Ray task of one CPU (a local runtime, or
    the cluster of --ray-address). The results are the same for any value and either engine."""

    device: str = option("auto", DEVICE_HELP, runtime=True)

    def check(self) -> None:
        check_device_name(self.device)
