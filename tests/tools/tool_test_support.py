"""Shared by the tools' tests: running a tool's main() in-process on a JSON document."""

import io
import json
import os
import tempfile
from contextlib import redirect_stdout


def run_main_on_json(main, doc, make_args):
    """Writes doc to a JSON file in a fresh folder, runs main(make_args(path, folder)) with its
    output captured and returns (status, stdout, folder contents as {name: parsed JSON})."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "input.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(doc, f)
        out = io.StringIO()
        with redirect_stdout(out):
            status = main(make_args(path, folder))
        written = {}
        for name in os.listdir(folder):
            if name.endswith(".json") and name != "input.json":
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    written[name] = json.load(f)
        return status, out.getvalue(), written
