"""``manage.py sandbox report|reset|bump-generation|serve``: thin entry points."""

import json

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.core.serializers.json import DjangoJSONEncoder

from sandbox import selectors, services


class Command(BaseCommand):
    help = "Inspect, reset or serve the sandbox (the outside world of agentops)."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        report = sub.add_parser("report", help="calls per key, records, duplicates, notifications")
        report.add_argument(
            "--json", action="store_true", dest="as_json", help="print the figures as JSON"
        )
        sub.add_parser("reset", help="delete every sandbox row")
        sub.add_parser("bump-generation", help="change the text of ~1%% of the site's pages")
        serve = sub.add_parser("serve", help="run the whole ASGI app under Daphne on its own port")
        serve.add_argument("--port", type=int, default=8100)
        serve.add_argument("--host", default="127.0.0.1")

    def handle(self, *args, action, **options):
        handler = {
            "report": self.report,
            "reset": self.reset,
            "bump-generation": self.bump_generation,
            "serve": self.serve,
        }[action]
        handler(**options)

    def report(self, *, as_json: bool = False, **_):
        figures = selectors.report()
        if as_json:
            self.stdout.write(_dumps(figures))
        else:
            self._print_report(figures)
        if not figures["ok"]:
            # A non-zero exit lets a script or CI fail on a duplicated side effect.
            raise CommandError("; ".join(figures["problems"]), returncode=1)

    def _print_report(self, figures: dict) -> None:
        r = figures["records"]
        self.stdout.write(
            f"records {r['records']}  keys {r['keys']}  calls {r['calls']}  "
            f"replays {r['replays']}  409 {r['conflicts']}  422 {r['mismatches']}  "
            f"400 {r['rejected']}  duplicates {r['duplicates']}"
        )
        self.stdout.write(f"keys by calls: {figures['calls_histogram']}")
        repeated = [k for k in figures["calls_per_key"] if k["calls"] > 1]
        for k in repeated[:20]:
            self.stdout.write(f"  {k['key']}: {k['calls']} calls, {k['records']} record")
        for unit, n in r["duplicate_units"].items():
            self.stdout.write(self.style.ERROR(f"  unit {unit}: {n} records"))
        n = figures["notifications"]
        self.stdout.write(f"notifications {n['count']} over {len(n['per_unit'])} unit(s)")
        self.stdout.write(f"site generation {figures['generation']}")
        if figures["ok"]:
            self.stdout.write(self.style.SUCCESS("ok: no duplicated side effect"))

    def reset(self, **_):
        deleted = services.sandbox_reset()
        self.stdout.write(f"deleted {sum(deleted.values())} row(s): {deleted}")

    def bump_generation(self, **_):
        self.stdout.write(f"generation {services.generation_bump()}")

    def serve(self, *, host: str, port: int, **_):
        from daphne.cli import CommandLineInterface

        module, _, attribute = settings.ASGI_APPLICATION.rpartition(".")
        self.stdout.write(f"sandbox at http://{host}:{port}/sandbox/")
        CommandLineInterface().run(["--bind", host, "--port", str(port), f"{module}:{attribute}"])


def _dumps(value) -> str:
    return json.dumps(value, indent=2, sort_keys=True, cls=DjangoJSONEncoder)
