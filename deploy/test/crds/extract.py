"""Writes the CRD schema fixtures of this folder from published CustomResourceDefinition files.

    python deploy/test/crds/extract.py CRD.yaml... -> deploy/test/crds/<group>_<kind>_<version>.json

Each fixture is the `openAPIV3Schema` of one served version of a published CRD, unchanged, under
{"origin": ..., "group", "kind", "version", "schema"}. README.md in this folder says where each
CRD file came from (repository, tag, path).
"""
import json
import os
import sys

import yaml

here = os.path.dirname(os.path.abspath(__file__))
for path in sys.argv[1:]:
    origin = os.path.basename(path)
    with open(path) as f:
        for doc in yaml.safe_load_all(f):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            for v in spec["versions"]:
                if not v.get("served", True):
                    continue
                out = {
                    "origin": origin,
                    "group": spec["group"],
                    "kind": spec["names"]["kind"],
                    "version": v["name"],
                    "schema": v["schema"]["openAPIV3Schema"],
                }
                name = "%s_%s_%s.json" % (spec["group"], spec["names"]["kind"], v["name"])
                with open(os.path.join(here, name), "w") as o:
                    json.dump(out, o, indent=1, sort_keys=True)
                    o.write("\n")
                print(name)
