"""The built-in agents: real long work against the sandbox, no network or API key needed.

- ``crawl``      walks the sandbox's generated site breadth-first over HTTP and reports
                 top terms, a link graph summary and failures; re-queues changed pages.
- ``migrate``    copies a source dataset in batches through the idempotent records API,
                 verifies counts and checksums, then cuts over with a notification.
- ``assistant``  a tool-using chat agent over any OpenAI-compatible API (the sandbox's
                 scripted model by default) with search, calculator and note tools.

``agents.py`` is the part to read (and copy); ``tools/`` holds the HTTP plumbing,
parsing and bookkeeping the agents call.
"""
