"""Running a benchmark at its smoke size, as CI does, so none of them can rot unnoticed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def run_bench(
    name: str, tmp_path: Path, *extra: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``bench/<name>.py --smoke --dir tmp_path …`` in a clean environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNBACK_")}
    return subprocess.run(
        [sys.executable, str(BENCH / f"{name}.py"), "--smoke", "--dir", str(tmp_path), *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
