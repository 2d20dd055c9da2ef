"""`caption_debias.ablate(...)`: the Python form of `caption-debias ablate`, and its one front door (docs/api.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from caption_debias.api import Result, options_from, quiet_logs

if TYPE_CHECKING:
    from caption_debias.ablate.options import AblateOptions


def ablate(plan: str | Path, out: str | Path, *, options: AblateOptions | None = None, **kwargs: Any) -> Result:
    """Run the ablation plan `plan` into `out`; the options are ablate's flags (AblateOptions: device,
    workers, engine, overwrite, ...), as keyword arguments (`quiet` defaults to True) or one object.

    Returns counts (arms, seeds, reused units) and paths (results: ablation.json, report: report.html);
    `data` is what ablation.json holds.
    """
    from caption_debias.ablate.options import AblateOptions

    opts = options_from(AblateOptions, kwargs, "ablate", options).validate()
    from caption_debias.ablate.run import REPORT, RESULT
    from caption_debias.ablate.run import ablate as run

    with quiet_logs(opts.quiet):
        summary = run(plan, out, opts)
    out = Path(out)
    counts = {
        "arms": len(summary["arms"]),
        "seeds": len(summary["plan"]["train"]["seeds"]),
        "reused_units": summary["reused_units"],
    }
    return Result("ablate", out, counts, {"results": out / RESULT, "report": out / REPORT}, summary)
