"""`caption-debias ablate`: does a curation decision make the trained model better?

A plan (plan.py) names a base folder, arms (curate options applied to it, or existing folders),
one train recipe with the same step budget for every arm, and the evaluation; run.py curates,
trains and evaluates every arm x seed through the public API (cd.curate, cd.train, retrieval),
resumable per unit; report.py turns the per-query hits into deltas against the reference arm
with paired bootstrap intervals: ablation.json, a terminal table, report.html.

- `options.py`: `AblateOptions`, the command's flags;
- `plan.py`: `read_plan`, every fault of a plan one line each;
- `run.py`: `ablate`, the arms on the stage runner and the engines;
- `report.py`: `summarise`, `terminal_table`, `write_report`.
"""

from caption_debias.api import make_callable

make_callable(__name__)  # caption_debias.ablate(...) runs it: ablate/api.py
