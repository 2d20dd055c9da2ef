"""The CLI in a fresh process that reports what it imported, optional packages blocked or not."""

from __future__ import annotations

import json
import subprocess
import sys

OPTIONAL = ("torch", "open_clip", "spacy", "ray", "tensorboard", "torchvision", "webdataset")
INTEGRATIONS = ("transformers", "timm", "wandb")


def cli_imports(args: list[str], blocked: tuple[str, ...] = ()) -> tuple[dict, str]:
    done = subprocess.run(
        [sys.executable, "-c", CLI, json.dumps(list(blocked)), json.dumps(args)], capture_output=True, text=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


CLI = """
import json, sys
for name in json.loads(sys.argv[1]):
    sys.modules[name] = None
sys.argv = ["caption-debias", *json.loads(sys.argv[2])]
from caption_debias.cli.main import main
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
def loaded(names):
    return sorted({m.split(".")[0] for m in sys.modules if m.split(".")[0] in names and sys.modules[m] is not None})
print(json.dumps({"code": code, "imported": loaded(%r), "integrations": loaded(%r)}))
""" % (OPTIONAL, INTEGRATIONS)
