"""turnback's home directory, found with the standard library alone: the front-ends that run
before anything else is imported (a terminal agent's hook, ``turnback acp``'s start) need it."""

from __future__ import annotations

import os


def home_of(home: str | os.PathLike[str] | None) -> str:
    """turnback's home: ``home``, else ``$TURNBACK_HOME``, else the platform's data directory."""
    if home is not None:
        return os.path.abspath(os.path.expanduser(home))
    configured = os.environ.get("TURNBACK_HOME")
    if configured:
        return os.path.abspath(os.path.expanduser(configured))
    from platformdirs import user_data_dir

    return user_data_dir("turnback", appauthor=False)
