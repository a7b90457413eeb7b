"""Chat agents on the run page: the conversation view, streamed answers, follow-ups.

- ``models``      ChatMessage: a user's message that waits for the run's next wait
- ``transcript``  the messages of a chat agent's state, shaped for the page
- ``services``    send a message (answered at once if the run waits, else queued),
                  deliver the queued ones when the run starts waiting
- ``forms``, ``views``  the composer
"""
