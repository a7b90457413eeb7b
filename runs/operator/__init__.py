"""The operators' pages: every run, the attention queue, workers, and the controls."""
