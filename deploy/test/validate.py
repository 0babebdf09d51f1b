"""Validates rendered manifests: built-in kinds with kubernetes-validate in strict mode (unknown
fields rejected) for each Kubernetes version given, custom resources against the CRD schema
fixtures in crds/ (closed the same way). A kind neither knows fails: nothing passes unchecked.

    python validate.py -k 1.30.0 -k latest MANIFEST.yaml...
"""
import argparse
import copy
import functools
import glob
import json
import os
import sys

import jsonschema
import kubernetes_validate.utils as kv
import yaml

here = os.path.dirname(os.path.abspath(__file__))

# kubernetes-validate reads its 1.2 MB definitions file for every resource: read each file once.
kv.schema_contents = functools.lru_cache(maxsize=None)(kv.schema_contents)


def close(schema):
    """Reject unknown fields where the CRD lists its fields (as `--strict` does for built-ins)."""
    if isinstance(schema, dict):
        if ("properties" in schema and "additionalProperties" not in schema
                and not schema.get("x-kubernetes-preserve-unknown-fields")):
            schema["additionalProperties"] = False
        for v in schema.values():
            close(v)
    elif isinstance(schema, list):
        for v in schema:
            close(v)
    return schema


def crd_schemas():
    out = {}
    for path in glob.glob(os.path.join(here, "crds", "*.json")):
        with open(path) as f:
            fx = json.load(f)
        out[("%s/%s" % (fx["group"], fx["version"]), fx["kind"])] = (os.path.basename(path), close(copy.deepcopy(fx["schema"])))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-k", "--kubernetes-version", action="append", required=True)
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    versions = [kv.latest_version() if v == "latest" else v for v in args.kubernetes_version]
    crds = crd_schemas()
    failures = 0
    checked = 0
    for path in args.files:
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        for doc in docs:
            name = "%s %s/%s" % (os.path.basename(path), doc.get("kind"), doc.get("metadata", {}).get("name"))
            key = (doc.get("apiVersion"), doc.get("kind"))
            if key in crds:
                fixture, schema = crds[key]
                errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(doc), key=lambda e: list(e.path))
                for e in errors:
                    print("ERROR %s (CRD schema %s): %s: %s" % (name, fixture, ".".join(map(str, e.path)), e.message))
                failures += bool(errors)
                checked += 1
                continue
            for v in versions:
                try:
                    kv.validate(doc, v, strict=True)
                except kv.ValidationError as e:
                    print("ERROR %s against Kubernetes %s: %s: %s" % (name, e.version, ".".join(map(str, e.path)), e.message))
                    failures += 1
                except kv.SchemaNotFoundError as e:
                    print("ERROR %s: no schema (%s) and no CRD fixture" % (name, e.message))
                    failures += 1
                checked += 1
    print("validate.py: %d checks of %d files, %d failed (Kubernetes %s; CRDs: %s)"
          % (checked, len(args.files), failures, ", ".join(versions), ", ".join(sorted(k for _, k in crds))))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
