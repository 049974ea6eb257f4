"""The dashboard never imports torch: it reads stored records, and importing torch costs over a second of CPU on
every cold start (more than the whole first load of a 100,000-record Overview).

Every page is rendered in a fresh Python process against a store filled by real CPU runs; a meta-path hook in that
process records the stack of the first ``import torch``, so a failure names the import chain to cut.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from dashboard_support import shared_store

pytest.importorskip("streamlit")
pytest.importorskip("plotly")

import fp8bench.dashboard  # noqa: E402
from fp8bench.dashboard.data import STORE_ENV  # noqa: E402

VIEWS = Path(fp8bench.dashboard.__file__).parent / "views"

# Runs in the fresh process: renders the landing page, then switches to every other page in turn.
RENDER_EVERY_PAGE = r"""
import json, os, sys, traceback
from pathlib import Path

first_torch_import = []


class RecordTorchImport:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and not first_torch_import:
            first_torch_import.append("".join(traceback.format_stack(limit=40)))
        return None  # the import itself proceeds as usual


sys.meta_path.insert(0, RecordTorchImport())
from streamlit.testing.v1 import AppTest

views, pages = Path(sys.argv[1]), sys.argv[2:]
at = AppTest.from_file(str(views.parent / "app.py"), default_timeout=300)
at.run()
rendered = {"overview": [e.value for e in at.exception]}
for page in pages:
    if page != "overview":
        at.switch_page(f"views/{page}.py")
        at.run()
        rendered[page] = [e.value for e in at.exception]
print(json.dumps({"rendered": rendered, "titles": [t.value for t in at.title], "torch": "torch" in sys.modules,
                  "stack": first_torch_import[0] if first_torch_import else None}))
"""


@pytest.fixture(scope="module")
def cpu_run_store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    return shared_store(tmp_path_factory)


@pytest.mark.slow
def test_every_page_renders_without_importing_torch(cpu_run_store):
    pages = sorted(p.stem for p in VIEWS.glob("*.py"))
    proc = subprocess.run([sys.executable, "-c", RENDER_EVERY_PAGE, str(VIEWS), *pages], capture_output=True,
                          text=True, timeout=600, env={**os.environ, STORE_ENV: str(cpu_run_store["dir"])})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(out["rendered"]) == pages  # every page was drawn ...
    assert all(not errors for errors in out["rendered"].values()), out["rendered"]  # ... without an exception
    assert not out["torch"], f"the dashboard imported torch; the first import came from:\n{out['stack']}"


# Renders the landing page alone in a fresh process and lists the heavy modules it imported.
RENDER_OVERVIEW = r"""
import json, sys
from streamlit.testing.v1 import AppTest

at = AppTest.from_file(sys.argv[1], default_timeout=300)
at.run()
print(json.dumps({"errors": [e.value for e in at.exception], "tables": len(at.dataframe),
                  "express": "plotly.express" in sys.modules}))
"""


@pytest.mark.slow
def test_overview_first_load_does_not_import_plotly_express(cpu_run_store):
    """Plotly Express costs a few tenths of a CPU second to import; the Overview draws with graph objects only, so
    the dashboard's first load must not pay for it (the pages that draw with Express import it)."""
    proc = subprocess.run([sys.executable, "-c", RENDER_OVERVIEW, str(VIEWS.parent / "app.py")], capture_output=True,
                          text=True, timeout=600, env={**os.environ, STORE_ENV: str(cpu_run_store["dir"])})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not out["errors"] and out["tables"] > 0, out  # the Overview was drawn, with its table
    assert not out["express"], "the Overview's first load imported plotly.express"


def test_the_server_imports_the_read_side_before_it_listens_and_no_torch():
    # fp8bench.dashboard.serve is what `fp8bench dashboard` starts: it imports what the first page needs, then hands
    # its command line to Streamlit's (`version` answers without starting a server).
    code = ("import sys, runpy; sys.argv = ['serve', 'version']\n"
            "try:\n    runpy.run_module('fp8bench.dashboard.serve', run_name='__main__')\n"
            "except SystemExit as exc:\n    code = exc.code\n"
            "mods = ('torch', 'pandas', 'sqlalchemy', 'fp8bench.dashboard.data')\n"
            "print({m: m in sys.modules for m in mods}, code)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "Streamlit, version" in out.stdout
    assert "{'torch': False, 'pandas': True, 'sqlalchemy': True, 'fp8bench.dashboard.data': True} 0" in out.stdout
