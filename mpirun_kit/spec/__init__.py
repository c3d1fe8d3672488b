"""What the user asked for, as values: the job spec (YAML) and the LaunchSpec it compiles to.

``launch_spec.py`` holds ``LaunchSpec`` (what every rank runs and how, the value
the per-host entrypoint receives); ``schema.py`` the job spec's dataclasses, declared once
with shape.py's ``key`` so that their JSON Schema and decoding are made from them;
``load_job(path) -> JobSpec`` (load.py) reads and builds it, with the problems found
by findings.py (YAML with lines, the schema) and checks.py (contradictions);
``presets.py`` holds the NCCL/EFA tuning tables a job names; ``compile_job``
(compile.py) turns a JobSpec into a ``LaunchSpec`` plus target settings;
cli/resolve.py ties load, ``${stack:...}`` outputs and compile together for the CLI
(it reads AWS and the environment, which spec/ never does).
"""
