"""`caption-debias demo`: the whole method on the built-in synthetic world, minutes on a CPU.

synth (train + test worlds) -> prepare -> stats -> the start (the shipped `demo-start`, a
small model with CLIP's habits; the `v1` preset trains its own stage 1 instead) -> stretch to
248 -> `longclip` and `debias` fine-tunes from that start with the same budget -> eval + probe
on the test world, each gap between the arms with a paired bootstrap interval -> grounding on
a planted world -> DIR/results.json, DIR/report.html, a terminal table. Every stage calls the
library's public API; this package only wires them and writes the report:

- `options.py`: `DemoOptions`, the command's flags;
- `config.py`: `DemoConfig` and its presets, the stages and arms, the shipped start;
- `run.py`: `run_demo`, the stages in order on the shared progress (`DemoProgress`);
- `report.py`: the gaps and the verdict (`summarise`, `verdict`), the terminal table, report.html.
"""

from caption_debias.demo.config import (
    ARMS,
    GAP_VARIANTS,
    PRESETS,
    STAGES,
    VARIANTS,
    DemoConfig,
    preset,
    shipped_start,
)
from caption_debias.demo.options import DemoOptions
from caption_debias.demo.report import gap_rows, summarise, terminal_table, verdict, write_report
from caption_debias.demo.run import CPU_RUN, DemoProgress, run_demo

__all__ = [
    "ARMS",
    "CPU_RUN",
    "GAP_VARIANTS",
    "PRESETS",
    "STAGES",
    "VARIANTS",
    "DemoConfig",
    "DemoOptions",
    "DemoProgress",
    "gap_rows",
    "preset",
    "run_demo",
    "shipped_start",
    "summarise",
    "terminal_table",
    "verdict",
    "write_report",
]
