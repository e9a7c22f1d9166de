"""The build: the project on disk → output/, one lab at a time, only for labs whose inputs changed.

    pipeline   build(): read → plan → render → shared files → links → commit, the stages in order
    read       read and parse what changed (load_project: the same reading, for check, links, new)
    plan       key each lab's share of the build by its inputs; navigation
    pages      render a lab's pages and search documents; the files no lab owns
    render     the Jinja2 theme: resolved labs → HTML
    search     the search index, in chunks      links   every link and anchor, checked
    assets     theme CSS and JS, minified       session what a process keeps between builds
    workers    forked workers that die with the build
    memory     the site resolved or rendered in memory, nothing written

The face hands on what the commands and the tests use, and loads none of the page stack: `memory`
(which does) is imported by name where it is needed.
"""

from infralens.build.pages import renderer_for
from infralens.build.pipeline import BuildSummary, build
from infralens.build.read import Project, load_project
from infralens.build.session import Session
from infralens.build.workers import STOP

__all__ = ["STOP", "BuildSummary", "Project", "Session", "build", "load_project", "renderer_for"]
