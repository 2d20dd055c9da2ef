"""The one skeleton every folder-writing stage runs in (prepare, curate, score, pack, ablate).

    with stage_run(folder, options, inputs):
        ...the stage's body: folder.start, run_tasks, prune, manifest...

Before the body, in this order and once: the options checked (`validate()`), the output's
storage checked (a store held in this process refused with --workers > 1 or Ray), no input
that is, holds or lies inside the output (`storage.refuse_overlap`), the output not a file,
the folder locked (`StageFolder.locked`: one writer; an OSError the body raises outside the
atomic writers becomes one `WriteFailed` line), the engine's runtime up (`engines.runtime`:
Ray joined or started, stopped after).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Sequence

from caption_debias import engines, storage
from caption_debias.runner.folder import StageFolder


@contextmanager
def stage_run(folder: StageFolder, options: Any, inputs: Sequence[Any]) -> Iterator[StageFolder]:
    """Hold `folder` for a stage's body: checked, locked, the engine up (module docstring).

    `options`: the stage's options object (validate(), workers, engine, ray_address);
    `inputs`: every folder or file the stage reads (none may overlap the output).
    """
    options.validate()
    out = folder.out
    storage.require_shared(out, options.workers, options.engine, "--out")
    storage.refuse_overlap(inputs, out)
    folder.check_not_a_file()
    with folder.locked(), engines.runtime(options):
        yield folder
