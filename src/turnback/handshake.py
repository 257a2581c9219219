"""What turnback says when it opens an ACP connection to an agent: the ``initialize`` params.

Plain data with nothing imported: ``turnback acp`` sends it from its start
(:mod:`turnback.acp.launch`) while the rest of the proxy is still loading, and the runtime sends
the same whenever it starts an agent itself.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # not at run time: the start sends these before ``typing`` has loaded
    from collections.abc import Mapping
    from typing import Any

#: How turnback names itself to an agent, unless the editor's own ``clientInfo`` is passed on.
CLIENT_INFO = {"name": "turnback", "title": "turnback", "version": "1"}


def agent_initialize(params: Mapping[str, Any], protocol_version: int) -> dict[str, Any]:
    """The ``initialize`` params turnback sends an agent: the client's own (an editor's, through
    the proxy) over turnback's defaults."""
    return {
        "protocolVersion": protocol_version,
        "clientCapabilities": {},
        "clientInfo": dict(CLIENT_INFO),
        **params,
    }
