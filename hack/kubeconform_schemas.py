#!/usr/bin/env python3
"""Write kubeconform's strict JSON schemas for the pinned Kubernetes version, offline.

kubeconform fetches its schemas from the internet by default; this machine reaches only
package registries. The same information ships in the `k8s.io/kubernetes` Go module
(`api/openapi-spec/swagger.json`), which the Go module proxy serves and
hack/cluster-tools/build.sh already downloads. This script converts its definitions the
way openapi2jsonschema (which makes kubeconform's default schemas) does:

- one file per kind, named `<kind>-<group's first label>-<version>.json` (`deployment-apps-v1`,
  `service-v1`, `clusterrole-rbac-v1`), which is kubeconform's
  `{{ .ResourceKind }}{{ .KindSuffix }}.json` schema-location template;
- strict: objects with declared properties get `additionalProperties: false`, so unknown
  fields (typos) fail, as with kubeconform's `-strict` schemas;
- `int-or-string` fields and Quantity accept a string or a number.

Each file holds the kind's schema plus the definitions it references under
`definitions` (refs rewritten to `#/definitions/...`).

Usage: kubeconform_schemas.py OUT_DIR  (prints OUT_DIR; does nothing when OUT_DIR/.complete
exists). The swagger file is found with `go mod download -json k8s.io/kubernetes@<version>`,
version from hack/cluster-tools/versions.env, or given with --swagger FILE.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
VERSIONS_FILE = HERE / "cluster-tools" / "versions.env"
REF_PREFIX = "#/definitions/"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
STRING_OR_NUMBER = [{"type": "string"}, {"type": "number"}]
STRING_OR_INTEGER = [{"type": "string"}, {"type": "integer"}]


def kubernetes_version() -> str:
    for line in VERSIONS_FILE.read_text().splitlines():
        if line.startswith("KUBERNETES_VERSION="):
            return line.split("=", 1)[1].strip()
    raise SystemExit(f"KUBERNETES_VERSION not found in {VERSIONS_FILE}")


def find_swagger(version: str) -> Path:
    env = dict(os.environ, GOFLAGS="-mod=mod", GOTOOLCHAIN="local")
    env.setdefault("GOSUMDB", "off")  # as build.sh: sum.golang.org is not reachable here
    with tempfile.TemporaryDirectory() as tmp:  # outside any module
        out = subprocess.run(
            ["go", "mod", "download", "-json", f"k8s.io/kubernetes@{version}"],
            check=True,
            capture_output=True,
            text=True,
            cwd=tmp,
            env=env,
        ).stdout
    path = Path(json.loads(out)["Dir"]) / "api" / "openapi-spec" / "swagger.json"
    if not path.is_file():
        raise SystemExit(f"no swagger.json in the k8s.io/kubernetes module: {path}")
    return path


def convert(node: Any) -> Any:
    """One schema node, converted (recursing only into places that hold schemas)."""
    if not isinstance(node, dict):
        return node
    out = dict(node)
    if out.get("format") == "int-or-string":
        return {"description": out.get("description", ""), "oneOf": STRING_OR_INTEGER}
    if "$ref" in out:
        name = out["$ref"].rsplit("/", 1)[-1]
        return {"$ref": REF_PREFIX + name}
    if "properties" in out:
        out["properties"] = {k: convert(v) for k, v in out["properties"].items()}
        out.setdefault("additionalProperties", False)
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = convert(out["additionalProperties"])
    if "items" in out:
        out["items"] = convert(out["items"])
    for key in ("allOf", "anyOf", "oneOf"):
        if key in out:
            out[key] = [convert(v) for v in out[key]]
    return out


def refs(node: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(REF_PREFIX):
            found.add(ref[len(REF_PREFIX) :])
        for value in node.values():
            found |= refs(value)
    elif isinstance(node, list):
        for value in node:
            found |= refs(value)
    return found


def kind_suffix(group: str, version: str) -> str:
    return f"-{group.split('.')[0]}-{version}" if group else f"-{version}"


def write_schemas(swagger: Path, out_dir: Path) -> int:
    definitions = json.loads(swagger.read_text())["definitions"]
    converted = {name: convert(copy.deepcopy(d)) for name, d in definitions.items()}
    converted[QUANTITY] = {
        "description": definitions.get(QUANTITY, {}).get("description", ""),
        "oneOf": STRING_OR_NUMBER,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    count = 0
    for name, definition in definitions.items():
        for gvk in definition.get("x-kubernetes-group-version-kind", []):
            # Only top-level kinds have apiVersion and kind properties.
            if "kind" not in definition.get("properties", {}):
                continue
            closure: set[str] = set()
            todo = refs(converted[name])
            while todo:
                ref = todo.pop()
                if ref not in closure:
                    closure.add(ref)
                    todo |= refs(converted[ref]) - closure
            schema = dict(converted[name])
            schema["$schema"] = "http://json-schema.org/draft-07/schema#"
            schema["definitions"] = {ref: converted[ref] for ref in sorted(closure)}
            filename = gvk["kind"].lower() + kind_suffix(gvk["group"], gvk["version"]) + ".json"
            (out_dir / filename).write_text(json.dumps(schema, sort_keys=True))
            count += 1
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--swagger", type=Path, help="swagger.json (default: from the Go module)")
    args = parser.parse_args(argv)
    marker = args.out_dir / ".complete"
    if not marker.exists():
        swagger = args.swagger or find_swagger(kubernetes_version())
        count = write_schemas(swagger, args.out_dir)
        print(f"kubeconform_schemas: {count} schemas from {swagger}", file=sys.stderr)
        marker.write_text(str(swagger) + "\n")
    print(args.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
