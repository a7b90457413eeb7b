"""The built-in agents: real long work against the sandbox, no network or API key needed.

- ``crawl``      walks the sandbox's generated site breadth-first over HTTP and reports
                 top terms, a link graph summary and failures; re-queues changed pages.
- ``migrate``    copies a source dataset in batches through the idempotent records API,
                 verifies counts and checksums, then cuts over with a notification.
- ``assistant``  a tool-using chat agent over any OpenAI-compatible API (the sandbox's
                 scripted model by default) with search, calculator and note tools.

``crawl.py``, ``migrate.py`` and ``assistant.py`` are the parts to read (and copy), one
agent each (``agents.py`` imports them, with the SDK agents of ``sdk_agents.py``, for the
autodiscovery); ``tools/`` holds the HTTP plumbing, parsing and bookkeeping they call.
"""
