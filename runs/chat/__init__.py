"""Chat agents on the run page: the conversation view, streamed answers, follow-ups.
A Django app of its own (label "chat"; its table kept the name it had in the runs app).

- ``models``      ChatMessage: a user's message that waits for the run's next wait
- ``transcript``  the messages of a chat agent's state, shaped for the page
- ``selectors``   the messages still queued
- ``services``    send a message (answered at once if the run waits, else queued),
                  deliver the queued ones in the commit that makes the run wait for
                  input (registered as the store's `input_wait` hook in ``apps``)
- ``forms``, ``views``, ``cli``  the composer, on the page and in the shell
"""
