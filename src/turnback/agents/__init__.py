"""Agents bundled with turnback.

They are ordinary Agent Client Protocol agents, run as subprocesses like any other, and use nothing
from turnback itself. ``python -m turnback.agents.scripted`` starts the deterministic scripted
agent that the demo and the tests drive (see :mod:`turnback.agents.scripted`).
"""
