"""turnback.acp: the editor-facing ACP proxy, ``turnback acp -- AGENT_COMMAND…``.

An editor that speaks the Agent Client Protocol starts ``turnback acp -- <agent command>`` instead
of the agent. Every prompt becomes a durable, reviewable, reversible turnback turn; sessions can be
listed, loaded, resumed and forked from turnback's store; and ``/checkpoints``, ``/diff``,
``/rewind`` and ``/undo-rewind`` are answered by the proxy. Everything else is forwarded as it is.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # not at run time: ``turnback acp`` starts its agent before ``typing`` loads
    from typing import Any

    from turnback.acp.launch import DEFAULT_MAX_FRAME, AcpLine, Launched
    from turnback.acp.proxy import Proxy, main, serve

__all__ = ["DEFAULT_MAX_FRAME", "Proxy", "main", "run", "serve"]


def run(line: AcpLine, early: Launched | None) -> int:
    """Run the proxy for a ``turnback acp`` command line (``early``: the agent as
    :func:`turnback.acp.launch.start` or ``started`` started it); returns its exit status. The
    seam through which the command line and the launcher start the proxy."""
    from turnback.acp.launch import opening

    store = opening(line.home)  # beside the proxy's loading: it waits on the disk, not the CPU
    from turnback.acp.proxy import main as proxy
    from turnback.runtime import OnCrash, ResumePolicy

    policy = ResumePolicy(
        attempts=line.restart_attempts,
        on_crash=OnCrash(line.on_agent_crash),
        initialize_timeout=line.initialize_timeout,
    )
    return proxy(
        line.agent,
        home=line.home,
        max_frame=line.max_frame,
        policy=policy,
        early=early,
        store=store,
    )


def __getattr__(name: str) -> Any:
    """The proxy, imported when first used: ``turnback acp`` starts its agent before it."""
    if name not in __all__:
        raise AttributeError(f"module 'turnback.acp' has no attribute {name!r}")
    from turnback.acp import proxy

    return getattr(proxy, name)
