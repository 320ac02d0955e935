#!/usr/bin/env python3
"""Prints the required peer dependencies missing from an npm prefix, as `name@range`.

`npm install --legacy-peer-deps` (run.sh installs the reference's CLI so: npm's own
peer resolution of its tree ran for minutes at 1.8 GB) leaves peers out; run.sh installs
what this prints, a few rounds.
"""

import glob
import json
import os
import sys


def main():
    modules = os.path.join(sys.argv[1], "node_modules")
    found = {}
    for path in glob.glob(modules + "/*/package.json") + glob.glob(modules + "/@*/*/package.json"):
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(data.get("name"), str):
            found[data["name"]] = data
    missing = {}
    for data in found.values():
        meta = data.get("peerDependenciesMeta") or {}
        for name, wanted in (data.get("peerDependencies") or {}).items():
            if name not in found and not (meta.get(name) or {}).get("optional"):
                missing.setdefault(name, wanted)
    for name, wanted in sorted(missing.items()):
        # The last (newest) alternative of a range such as "^16.8.0 || ^18.0.0".
        print("%s@%s" % (name, wanted.split("||")[-1].strip()))


if __name__ == "__main__":
    main()
