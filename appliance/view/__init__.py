"""`appliance view`: one self-contained HTML page of runs, comparisons, calibrations and transcripts."""

from appliance.view.build import build_view, serve_file
from appliance.view.contents import ViewContents, collect_contents
from appliance.view.page import render_page

__all__ = ["ViewContents", "build_view", "collect_contents", "render_page", "serve_file"]
