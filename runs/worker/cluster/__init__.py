"""A worker runtime that survives the death of any of its processes.

    manage.py worker            supervisor.py  restarts qcluster; no database, no thread
      manage.py qcluster        main.py        sweep, heartbeat; replaces a broken sentinel
        sentinel                sentinel.py    replaces a generation whose process died
          worker x N, pusher, monitor          (one generation: fresh queues, fresh processes)

Each level watches the one below it and the kernel ties each process to its
parent (lifelines.py), so no process outlives its supervisor; the sentinel's
watchdog (watchdog.py) catches what kills nothing (a frozen idle worker or
pusher). Why each piece is needed is written in its module; the operator's view
is docs/workers.md.
"""
