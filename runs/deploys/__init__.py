"""Deploys of new agent code, as operators see and drive them (docs/deploys.md): the
replay check before a deploy, the runs waiting for a worker of their code, and the
previewed bulk upgrade. The engine's part is runs/durable/versions.py, verify.py and
upgrade.py; this package only reads it and calls it."""
