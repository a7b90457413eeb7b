"""The build's one step beyond pyproject.toml: the site's templates and static files,
kept at the checkout's root (templates/, static/), go into a wheel inside the agentops
package, where agentops/settings.py looks for them when agentops is installed
(`pip install .`, not `-e`). An editable install reads them from the checkout."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SITE_FILES = ("templates", "static")


class BuildWithSiteFiles(build_py):
    def run(self):
        super().run()
        if self.editable_mode:
            return
        for name in SITE_FILES:
            self.copy_tree(name, str(Path(self.build_lib) / "agentops" / name))


setup(cmdclass={"build_py": BuildWithSiteFiles})
