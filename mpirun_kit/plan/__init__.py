"""Planning: LaunchSpec + Cluster -> LaunchPlan, a frozen printable value; nothing here runs anything.

``ranks`` places ranks on hosts, ``mpi`` holds the MPI dialects as data,
``env`` decides what the ranks see, ``mpirun`` builds the launcher argv and
``launch_plan`` ties them into ``build_launch_plan`` and ``render``; ``jobplan``
adds the job layer's view (rank -> GPU -> CPU map, tuning report) for
``mpirun_kit plan``.  Other modules (gpu: pinning) are imported directly by their users.
Nothing here imports exec/ or targets/ (tests/test_layering.py checks).
"""
import importlib

_EXPORTS = {"LaunchPlan": "launch_plan", "build_launch_plan": "launch_plan", "render": "launch_plan",
            "to_json": "launch_plan", "RankSlot": "ranks", "assign_ranks": "ranks"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    # Lazy re-exports: every rank imports plan.ranks at start, and must not pay for the rest.
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
