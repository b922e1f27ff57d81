#!/usr/bin/env python3
"""Generates crates/devcluster/src/builtin/zero_table.rs from the Go types of the built-in kinds.

Usage: gen-zero-table.py API_DIR APIMACHINERY_DIR APIEXTENSIONS_DIR > src/builtin/zero_table.rs
where the directories are checkouts of k8s.io/api, k8s.io/apimachinery and
k8s.io/apiextensions-apiserver at the tag matching k8s-openapi's feature (v0.33.x for v1_33).

For every struct it records what Go's encoding/json writes for a zero field:
- a scalar whose json tag lacks `omitempty` (string and string types: "", integers and floats: 0,
  bool: false);
- a non-pointer metav1.Time / MicroTime (with or without omitempty: Go never omits structs): null;
- a non-pointer struct (with or without omitempty): {} holding its own zero fields;
and the fields that lead to other structs (pointers, slices and maps of structs), to recurse.
Embedded (`json:",inline"`) structs are flattened into their parent.
"""
import os
import re
import sys

GROUPS = [
    "core/v1", "apps/v1", "batch/v1", "networking/v1", "discovery/v1", "coordination/v1", "rbac/v1",
    "events/v1", "policy/v1", "storage/v1", "admissionregistration/v1", "authorization/v1",
    "authentication/v1", "autoscaling/v1", "autoscaling/v2", "certificates/v1", "scheduling/v1", "node/v1",
    "flowcontrol/v1",
]
META = "meta/v1"
APIEXT = "apiextensions/v1"
INT_TYPES = {"int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64",
             "float32", "float64", "byte", "rune"}
# Types with their own JSON form: never descended into, never zero-filled.
OPAQUE = {("resource", "Quantity"), ("intstr", "IntOrString"), ("runtime", "RawExtension"),
          ("meta", "Duration"), ("meta", "FieldsV1"), ("apiext", "JSON"), ("apiext", "JSONSchemaPropsOrArray"),
          ("apiext", "JSONSchemaPropsOrBool"), ("apiext", "JSONSchemaPropsOrStringArray")}
TIMES = {("meta", "Time"), ("meta", "MicroTime")}

markers = {}  # (package key, struct, Go field) -> +default value (JSON)
packages = {}  # key -> {"structs": {name: [fields]}, "scalars": {name: kind}, "imports": {alias: key}}


def pkg_key_of_import(path):
    if path == "k8s.io/apimachinery/pkg/apis/meta/v1":
        return "meta"
    if path == "k8s.io/apimachinery/pkg/api/resource":
        return "resource"
    if path == "k8s.io/apimachinery/pkg/util/intstr":
        return "intstr"
    if path == "k8s.io/apimachinery/pkg/runtime":
        return "runtime"
    if path == "k8s.io/apimachinery/pkg/types":
        return "types"
    m = re.match(r"k8s.io/api/([a-z0-9]+/v[0-9a-z]+)$", path)
    if m:
        return m.group(1)
    return None


def def_prefix(key):
    if key == "meta":
        return "io.k8s.apimachinery.pkg.apis.meta.v1."
    if key == "apiext":
        return "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1."
    return "io.k8s.api." + key.replace("/", ".") + "."


def parse_package(key, directory, files=None):
    pkg = packages.setdefault(key, {"structs": {}, "scalars": {}, "imports": {}})
    names = files or sorted(f for f in os.listdir(directory) if f.startswith("types") and f.endswith(".go"))
    for fname in names:
        src = open(os.path.join(directory, fname)).read()
        for m in re.finditer(r'^\s*(?:(\w+)\s+)?"([^"]+)"\s*$', src.split("\n)\n")[0] if "import (" in src else "", re.M):
            alias, path = m.group(1), m.group(2)
            k = pkg_key_of_import(path)
            if k:
                pkg["imports"][alias or path.rsplit("/", 1)[-1]] = k
        for m in re.finditer(r'^import (\w+)? ?"([^"]+)"', src, re.M):
            k = pkg_key_of_import(m.group(2))
            if k:
                pkg["imports"][m.group(1) or m.group(2).rsplit("/", 1)[-1]] = k
        for m in re.finditer(r"^type (\w+) (string|bool|int32|int64|int|float64)\s*$", src, re.M):
            pkg["scalars"][m.group(1)] = m.group(2)
        for m in re.finditer(r"^type (\w+) struct \{\n(.*?)^\}", src, re.M | re.S):
            fields = []
            marker = None
            for line in m.group(2).split("\n"):
                line = line.strip()
                dm = re.match(r"^//\s*\+default=(.*)$", line)
                if dm:
                    marker = dm.group(1).strip()
                    continue
                if not line or line.startswith("//"):
                    continue
                if marker is not None:
                    markers[(key, m.group(1), line.split()[0])] = marker
                    marker = None
                fm = re.match(r'^(\w+)\s+(\S+)\s+`.*?json:"([^"]*)"', line)
                em = re.match(r'^(\*?[\w.]+)\s+`.*?json:"([^"]*)"', line)
                if fm:
                    fields.append((fm.group(1), fm.group(2), fm.group(3)))
                elif em:
                    # An embedded struct: inline, or a field named after its type (`metadata`).
                    go_name = None if em.group(2).split(",")[0] == "" else em.group(1).rsplit(".", 1)[-1]
                    fields.append((go_name, em.group(1), em.group(2)))
            pkg["structs"][m.group(1)] = fields


def resolve(key, ty):
    """(package key, type name) of a named type as seen from package `key`."""
    if "." in ty:
        alias, name = ty.split(".", 1)
        return packages.get(key, {}).get("imports", {}).get(alias, alias), name
    return key, ty


def scalar_kind(key, ty):
    if ty == "string":
        return "Str"
    if ty == "bool":
        return "Bool"
    if ty in INT_TYPES:
        return "Int"
    k, name = resolve(key, ty)
    if (k, name) == ("types", "UID"):
        return "Str"
    under = packages.get(k, {}).get("scalars", {}).get(name)
    if under:
        return scalar_kind(k, under)
    return None


def struct_of(key, ty):
    k, name = resolve(key, ty)
    if (k, name) in OPAQUE or (k, name) in TIMES:
        return None
    if name in packages.get(k, {}).get("structs", {}):
        return k, name
    return None


def fields_of(key, name, seen=None):
    """The JSON fields of a struct, embedded structs flattened: (json name, go type, omitempty)."""
    out = []
    for go_name, ty, tag in packages[key]["structs"][name]:
        parts = tag.split(",")
        json_name = parts[0]
        if json_name == "-":
            continue
        if go_name is None and json_name == "":
            # embedded, inline
            s = struct_of(key, ty.lstrip("*"))
            if s:
                out.extend((n, t, o, k2) for n, t, o, k2 in fields_of(s[0], s[1]))
            continue
        if go_name is None:
            continue
        out.append((json_name, ty, "omitempty" in parts[1:], key))
    return out


def entries(key, name):
    res = []
    for json_name, ty, omitempty, k in fields_of(key, name):
        if ty.startswith("*"):
            s = struct_of(k, ty[1:])
            if s:
                res.append((json_name, "Nested", s))
            continue
        if ty.startswith("[]"):
            s = struct_of(k, ty[2:].lstrip("*"))
            if s:
                res.append((json_name, "NestedList", s))
            continue
        if ty.startswith("map["):
            val = ty.split("]", 1)[1].lstrip("*")
            s = struct_of(k, val)
            if s:
                res.append((json_name, "NestedMap", s))
            continue
        if resolve(k, ty) in TIMES:
            res.append((json_name, "Null", None))
            continue
        s = struct_of(k, ty)
        if s:
            res.append((json_name, "Struct", s))
            continue
        sk = scalar_kind(k, ty)
        if sk and not omitempty:
            res.append((json_name, sk, None))
    return res


def main():
    api, apimachinery, apiext = sys.argv[1:4]
    for g in GROUPS:
        parse_package(g, os.path.join(api, g))
    parse_package("meta", os.path.join(apimachinery, "pkg/apis/meta/v1"), ["types.go", "time.go", "micro_time.go"])
    parse_package("apiext", os.path.join(apiext, "pkg/apis/apiextensions/v1"))
    rows = []
    for key in GROUPS + ["meta", "apiext"]:
        for name in sorted(packages[key]["structs"]):
            es = entries(key, name)
            if es:
                rows.append((def_prefix(key) + name, es))
    rows.sort()
    defaults = []
    for (key, struct, go_field), value in markers.items():
        for go_name, ty, tag in packages[key]["structs"][struct]:
            json_value = not value.startswith("ref(")  # a constant's name: not needed here
            if go_name == go_field and json_value and not ty.startswith(("[", "map[")) and scalar_kind(key, ty.lstrip("*")):
                defaults.append((def_prefix(key) + struct, tag.split(",")[0], value))
    defaults.sort()
    print("// @generated by crates/devcluster/tools/gen-zero-table.py from k8s.io/api, k8s.io/apimachinery and")
    print("// k8s.io/apiextensions-apiserver v0.33.13 (Kubernetes 1.33, k8s-openapi's v1_33). Do not edit.")
    print()
    print("use super::Zero::{self, *};")
    print()
    print("/// Per definition, sorted: the fields Go's encoding/json always writes or that lead to other structs.")
    print("pub(super) const TABLE: &[(&str, &[(&str, Zero)])] = &[")
    for d, es in rows:
        print(f'    ("{d}", &[')
        for json_name, kind, s in es:
            if s:
                print(f'        ("{json_name}", {kind}("{def_prefix(s[0]) + s[1]}")),')
            else:
                print(f'        ("{json_name}", {kind}),')
        print("    ]),")
    print("];")
    print()
    print("/// `+default=` markers on scalar fields: the `default` of the property in the real OpenAPI.")
    print("pub(super) const MARKED_DEFAULTS: &[(&str, &str, &str)] = &[")
    for d, f, v in defaults:
        print(f'    ("{d}", "{f}", r#"{v}"#),')
    print("];")


main()
