"""What a folder's own files may make the tools read outside the folders the user named.

A folder can come from anyone. The paths its files record (an image root in its manifest, an input
folder in its lineage) are followed only when they pass `recorded_path_problem`: never a filesystem
root, a system folder or a home folder (or a folder that holds one). Otherwise a folder from elsewhere
could record `/` and have view serve any file the user can read. A path the user types
(--image-root) is the user's choice and is not checked here. docs/reliability.md states the rule.
"""

from __future__ import annotations

import os
from pathlib import Path

from caption_debias import storage
from caption_debias.errors import UserError

# Folders of the operating system, never a dataset's image root unless the user types one.
SYSTEM_FOLDERS = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var/run",
    "/System",
    "/Library",
    "/private/etc",
    "/private/var/run",
)
HOME_PARENTS = ("/home", "/Users")  # where users' home folders live (Linux, macOS)


def _homes() -> list[Path]:
    homes = [Path(os.path.realpath(Path.home()))]
    for parent in HOME_PARENTS:
        try:
            homes += [Path(os.path.realpath(e.path)) for e in os.scandir(parent) if e.is_dir()]
        except OSError:
            continue
    return homes


def recorded_path_problem(recorded: str) -> str | None:
    """Why a folder a manifest records is not read (after its symlinks are followed), or None."""
    if storage.is_remote(recorded):  # a store: no filesystem root or home folder of this machine there
        return None
    real = Path(storage.resolve_folder(recorded))  # absolute, symlinks followed, file:// as a path
    if real == Path(real.anchor):
        return "a filesystem root"
    for system in SYSTEM_FOLDERS:
        if real.is_relative_to(system):
            return f"a system folder ({system})"
    for home in _homes():
        if home.is_relative_to(real):
            return "a home folder" if home == real else f"a folder that holds a home folder ({home})"
    return None


def check_recorded_root(recorded: str, recorded_in: object) -> str:
    """A recorded image root when it may be followed; else one line naming it and how to read it anyway."""
    problem = recorded_path_problem(recorded)
    if problem is not None:
        raise UserError(
            f"{recorded_in}: its manifest records the image root {recorded}, {problem}; a folder's own files "
            f"never make the tools read there (type --image-root {recorded} to read it anyway)"
        )
    return recorded
