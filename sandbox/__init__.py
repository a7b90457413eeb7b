"""The sandbox: the outside world that agentops' agents act on, mounted at /sandbox/.

Every request that reaches it is recorded, so tests and the report can count
side effects that happened twice.

- ``api/records``            POST, idempotent by ``Idempotency-Key`` (idempotency.py); GET lists
- ``api/records/stats``      totals: records, keys, calls, replays, duplicates
- ``api/notifications``      POST, not idempotent: every call is a row; GET lists per unit
- ``api/reset``              POST, deletes every sandbox row
- ``site/``, ``site/page/<n>`` the crawler's generated site (site.py)
- ``site/generation``        GET the generation and changed pages; ``/bump`` POST
- ``dataset/rows``           the migration's source rows (dataset.py)
- ``llm/v1/chat/completions``, ``llm/v1/models``  a scripted OpenAI-compatible model
- ``""``                     the report page; ``manage.py sandbox`` prints the same
"""
