"""Tests of mpirun_kit/cli: every command over bad environments, help text, output format, plan."""
