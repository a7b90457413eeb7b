"""`python -m bench <command>`: the benchmarks that have a command.

    compare    agentops against DBOS and LangGraph, side by side (bench/compare/)
    profile    where agentops' time goes in those scenarios: round trips and cProfile
    effects    the per-effect cost of ctx.call against the raw floor (bench/effect_overhead.py)
"""

import sys


def _compare(argv):
    from bench.compare import main

    return main(argv)


def _profile(argv):
    from bench.compare.profiles import main

    return main(argv)


def _effects(argv):
    from bench.effect_overhead import main

    main(int(argv[0]) if argv else 2000)
    return 0


COMMANDS = {"compare": _compare, "profile": _profile, "effects": _effects}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print(__doc__.strip())
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    return COMMANDS[argv[0]](argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())
