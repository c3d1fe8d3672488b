"""The job service: submit a job spec, follow it, stop it, read its output, as typed library calls.

Place in the data flow: below the command line and above the targets (torchx's ``Runner`` is the
model).  ``JobService`` (runner.py) takes typed requests (``SubmitRequest``, requests.py) and answers
with values (``JobHandle``, ``JobStatus``, an ``Outcome``); it owns the job records and their run
directories (runs.py), the one process that supervises a recorded job in the foreground or detached
(supervise.py), the lifecycle lookups (lifecycle.py) and the compilation of a spec file for a
submission (compile.py).  The CLI parses argv into these values and prints what comes back;
mpirun_kit/api.py re-exports it for Python callers.  No argparse namespace reaches this package.
"""
