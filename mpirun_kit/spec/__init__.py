"""The YAML job definition layer: schema (dataclasses + JSON Schema), loader, compiler.

``load_job(path) -> JobSpec`` (load.py) validates; ``compile_job`` (compile.py)
turns a JobSpec into a ``model.LaunchSpec`` plus target settings.
"""
