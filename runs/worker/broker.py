"""django-q2's ORM broker, whose pusher waits out a database fault.

django-q2's pusher takes any exception from `dequeue` for a dead broker: it sleeps
10 s and exits for the sentinel to start another (django_q/pusher.py), so after a
terminated connection or a database restart a cluster took no task for ~10 s.
Here a connection fault drops the broken connection and pulls nothing this time;
the pusher asks again after one poll interval, on a fresh connection.
"""

import logging
import time

from django.db import connections
from django_q.brokers.orm import ORM
from django_q.conf import Conf

from runs.worker.db import DATABASE_FAULTS

logger = logging.getLogger("agentops.broker")


class ReconnectingORM(ORM):
    def dequeue(self):
        try:
            return super().dequeue()
        except DATABASE_FAULTS as exc:
            logger.warning("pulling tasks failed (%s); trying again", exc)
            connections[Conf.ORM].close()
            time.sleep(Conf.POLL)  # as the ORM broker does for an empty queue
            return None
