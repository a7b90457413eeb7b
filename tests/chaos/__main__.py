import sys

from tests.chaos.cli import main

sys.exit(main())
