"""Planning: LaunchSpec + Cluster -> LaunchPlan, a frozen printable value; nothing here runs anything.

``ranks`` places ranks on hosts, ``mpi`` holds the MPI dialects as data,
``env`` decides what the ranks see, ``mpirun`` builds the launcher argv and
``launch_plan`` ties them into ``build_launch_plan`` and ``render``.  Other
modules of this package (presets, gpu) are imported directly by their users.
"""
from .launch_plan import LaunchPlan, build_launch_plan, render, to_json
from .ranks import RankSlot, assign_ranks

__all__ = ["LaunchPlan", "build_launch_plan", "render", "to_json", "RankSlot", "assign_ranks"]
