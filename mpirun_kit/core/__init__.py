"""What every layer needs and is not execution: the atomic write, the injected clock, the output level, the private
directory.

Place in the data flow: the bottom of the package, beside ``errors``, ``redact`` and ``progress``.
``files`` is the one atomic write (results, checkpoints, keys, timelines), ``clock`` the injected
time every wait takes its deadline from, ``verbosity`` how much the tool prints of its own, ``private``
the run directory another user cannot swap and its files, opened without following a link.  They
run nothing and open no socket, so the trainer (maskrcnn/) and the plan may use them without
reaching exec/.  Standard library only: the rank side imports it on the launch's critical path.
"""
