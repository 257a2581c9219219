"""Creating a workspace's shadow repository, and mending the files it is made of.

The repository is built in a temporary directory and renamed into place whole. For a git
workspace it borrows from the user's repository as :mod:`turnback.workspace.shadow` describes;
the user's ``.git`` is only ever read.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from pathlib import Path

from turnback.durable import sync_directory, sync_tree
from turnback.errors import GitFailed
from turnback.workspace.git import Git
from turnback.workspace.shadow import (
    OID,
    ShadowRepo,
    UserRepository,
    find_user_repository,
    ref_file_ok,
    write_file,
)

#: Attributes that would make a capture or a restore differ from the bytes on disk. The
#: shadow's ``info/attributes`` wins over every ``.gitattributes`` in the workspace.
ATTRIBUTES = "* -text -eol -filter -ident -working-tree-encoding\n"


def ensure(shadow: ShadowRepo, deadline: float) -> None:
    """Create the shadow repository if it does not exist yet, or mend its fixed files if it does
    (call with its lock held).

    It is built in a temporary directory and renamed into place, so it either exists
    completely or not at all."""
    if shadow.created:
        _repair_head(shadow)
        exclude = shadow.dir / "info" / "exclude"
        with contextlib.suppress(OSError):  # made by an older turnback, or the home moved
            if exclude.read_text(encoding="utf-8") != _own_excludes(shadow):
                exclude.write_text(_own_excludes(shadow), encoding="utf-8")
        return
    _build(shadow, deadline)


def _build(shadow: ShadowRepo, deadline: float) -> None:
    user = find_user_repository(shadow.workspace)
    temporary = shadow.dir.with_name(f"{shadow.dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(temporary, ignore_errors=True)
    if shadow.dir.exists():  # not built by turnback (created() is false): never reuse it
        shutil.rmtree(shadow.dir)
    sha256 = user is not None and _user_object_format(shadow.git, user, deadline) == "sha256"
    args = ["init", "--bare", "--quiet", "--template="]
    if sha256:
        args.append("--object-format=sha256")
    shadow.git.run([*args, str(temporary)], timeout=deadline - time.monotonic())
    (temporary / "info").mkdir(exist_ok=True)
    (temporary / "info" / "attributes").write_text(ATTRIBUTES, encoding="utf-8")
    (temporary / "info" / "exclude").write_text(_own_excludes(shadow), encoding="utf-8")
    (temporary / "turnback-workspace").write_text(str(shadow.workspace) + "\n", "utf-8")
    config = [
        "[core]",
        f"\trepositoryformatversion = {1 if sha256 else 0}",
        "\tbare = false",
        "\tlogAllRefUpdates = false",
        "\tfsync = reference",
        "\tfsyncMethod = batch",
        # A warm capture's status only re-reads directories that changed, and writes only
        # the small part of the index that changed.
        "\tuntrackedCache = true",
        "\tsplitIndex = true",
        "[gc]",
        "\tauto = 0",
        "[index]",
        "\tthreads = true",
    ]
    if sha256:
        config += ["[extensions]", "\tobjectFormat = sha256"]
    if user is not None:
        config[1:1] = [f"\texcludesFile = {_config_value(str(user.exclude))}"]
        (temporary / "objects" / "info").mkdir(parents=True, exist_ok=True)
        (temporary / "objects" / "info" / "alternates").write_text(
            str(user.objects) + "\n", encoding="utf-8"
        )
    (temporary / "config").write_text("\n".join(config) + "\n", encoding="utf-8")
    if user is not None:
        _seed(shadow, user, temporary, deadline)
    sync_tree(temporary)  # whole before its name is: a power cut leaves it or nothing
    os.replace(temporary, shadow.dir)
    sync_directory(shadow.dir.parent)


def _user_object_format(git: Git, user: UserRepository, deadline: float) -> str:
    result = git.run(
        ["config", "--file", str(user.common_dir / "config"), "extensions.objectFormat"],
        timeout=deadline - time.monotonic(),
        check=False,
    )
    return result.stdout.decode("ascii", "replace").strip().lower() or "sha1"


def _own_excludes(shadow: ShadowRepo) -> str:
    """turnback's home, wherever it sits in the workspace: the whole directory, or when
    the workspace is the home itself, what turnback keeps there."""
    lines = "# written by turnback: paths the shadow repository never captures\n"
    try:
        relative = shadow.home.resolve().relative_to(shadow.workspace)
    except ValueError:
        return lines
    if relative == Path("."):
        return lines + "/shadow/\n/turnback.db\n/turnback.db-*\n"
    return lines + _exclude_pattern(relative.as_posix())


def _seed(shadow: ShadowRepo, user: UserRepository, temporary: Path, deadline: float) -> None:
    """Start from a copy of the user's index (with its stat data) and the user's HEAD.

    Skipped when the user's index is split (its other half lives in the user's .git)."""
    if not user.index.is_file() or any(user.git_dir.glob("sharedindex.*")):
        return
    env = {"GIT_DIR": str(temporary), "GIT_WORK_TREE": str(shadow.workspace)}
    try:
        # copy2 keeps the file's mtime, which git compares with entries' mtimes to spot
        # files changed in the same instant the index was written ("racy git").
        shutil.copy2(user.index, temporary / "index")
        head = shadow.git.run(
            ["rev-parse", "--verify", "--quiet", "HEAD^{commit}"],
            env={"GIT_DIR": str(user.git_dir)},
            timeout=deadline - time.monotonic(),
            check=False,
        )
        oid = head.stdout.decode("ascii", "replace").strip()
        if head.returncode == 0 and OID.fullmatch(oid):
            shadow.git.run(
                ["update-ref", "--no-deref", "HEAD", oid],
                env=env,
                timeout=deadline - time.monotonic(),
            )
        # Entries the user marked assume-unchanged or skip-worktree would hide changes.
        listing = shadow.git.run(
            ["ls-files", "-z", "-v", "-t"], env=env, timeout=deadline - time.monotonic()
        ).stdout
        flagged = [
            item[2:]
            for item in listing.split(b"\0")
            if len(item) > 2 and (item[:1].islower() or item[:1] == b"S")
        ]
        if flagged:
            clear = ("--no-assume-unchanged", "--no-skip-worktree", "-z", "--stdin")
            shadow.git.run(
                ["update-index", *clear],
                env=env,
                input=b"\0".join(flagged) + b"\0",
                timeout=deadline - time.monotonic(),
            )
        (temporary / "turnback-seeded").write_text("1\n", encoding="utf-8")
    except (GitFailed, OSError):
        for name in ("index", "turnback-seeded"):
            with contextlib.suppress(FileNotFoundError):
                (temporary / name).unlink()
        (temporary / "HEAD").write_text("ref: refs/heads/main\n", encoding="utf-8")


def _repair_head(shadow: ShadowRepo) -> None:
    head = shadow.dir / "HEAD"
    try:
        ok = ref_file_ok(head.read_bytes())
    except OSError:
        ok = False
    if not ok:
        write_file(head, b"ref: refs/heads/main\n")
        shadow.report(f"the checkpoint repository's HEAD of {shadow.workspace} was damaged; reset")


def _config_value(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _exclude_pattern(relative: str) -> str:
    escaped = re.sub(r"([\\*?\[\]!# ])", r"\\\1", relative)
    return "/" + escaped + "/\n"
