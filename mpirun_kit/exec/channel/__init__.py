"""The result channel: how the master learns each rank's and each worker's fate, and tells every host the result.

One package, one concept; import each name from its module (nothing is re-exported here):

* ``wire``: the line format and the MAC's binding to run, job, connection, direction and line number;
* ``keys``: the workers' key, the run key, each host's seed and each rank's key, and the key files
  that hand a rank's key to its wrapper only;
* ``protocol``: what each message may say, checked against the plan;
* ``filter``: the kernel filter that drops outsiders' connections before their handshake;
* ``server``: the master's end (``ResultServer``);
* ``link``: a worker's end (``MasterLink``);
* ``rank_link``: a rank wrapper's end (``RankLink``; stdlib only, on the launch's critical path);
* ``stop``: stopping a job through the ranks' connections (``RankStop``).

docs/architecture.md (the channel protocol) and docs/threat-model.md (the channel) describe it for readers.
"""
