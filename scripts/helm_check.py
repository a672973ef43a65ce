#!/usr/bin/env python3
"""Lint and render charts/launchgate with the real Helm library (helm-sdkpy, Helm v4 in Go).

    helm_check.py lint [-f VALUES]...      lint with default values and every ci/*.yaml
                                            (or only the given values files)
    helm_check.py render [-f VALUES]... [--set-json JSON] [--namespace NS] [--release NAME]
                         [--existing OBJECTS.yaml] [--kube-version 1.27.0]
                                            print the rendered manifest (like `helm template`)
    helm_check.py manifests [--check]       regenerate manifests/launchgate.yaml (or check it)
    helm_check.py cel [-f VALUES]...        evaluate the webhooks' matchConditions (CEL) against
                                            tests/fixtures/manifests/*.yaml (needs
                                            `pip install common-expression-language`)

helm-sdkpy has Lint and Install but no template action, so `render` runs a real Install
against a tiny in-process fake API server: it answers discovery, stores nothing, and returns
404 for every lookup unless --existing supplies objects (to exercise upgrades, where the chart's
`lookup` finds its TLS Secret). Install returns the release, whose manifest plus its hooks is
what `helm template` prints. Values schema validation runs as in a real install. The fake API
server reports Kubernetes --kube-version (default 1.34.0) as .Capabilities.KubeVersion.

Install the library with:  pip install --ignore-requires-python helm-sdkpy
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import shutil
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "launchgate"
MANIFESTS = ROOT / "manifests" / "launchgate.yaml"
MANIFESTS_VALUES = CHART / "ci" / "manifests-values.yaml"
MISSING = (
    "helm_check: the Python Helm library is missing; install it with\n"
    "    pip install --ignore-requires-python helm-sdkpy\n"
)

try:
    import yaml  # PyYAML when present; otherwise Helm itself parses YAML (see load_yaml)
except ImportError:  # pragma: no cover
    yaml = None

try:
    import helm_sdkpy
except ImportError:
    sys.stderr.write(MISSING)
    sys.exit(3)


def load_yaml(path: Path):
    text = path.read_text()
    if yaml is not None:
        return yaml.safe_load(text) or {}
    return helm_parse_yaml(text)


def helm_parse_yaml(text: str):
    """Parse a YAML document with Helm's own parser (no PyYAML needed): render a throw-away
    chart whose values.yaml is the text and whose only template prints the values as JSON."""
    with tempfile.TemporaryDirectory() as tmp:
        chart = Path(tmp) / "yaml2json"
        (chart / "templates").mkdir(parents=True)
        (chart / "Chart.yaml").write_text("apiVersion: v2\nname: yaml2json\nversion: 0.0.0\n")
        (chart / "values.yaml").write_text(text)
        (chart / "templates" / "v.yaml").write_text(
            '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "v"},'
            ' "data": {"json": {{ toJson .Values | toJson }}}}\n')
        manifest = render({}, "default", "yaml2json", [], chart=chart)
    doc = "\n".join(l for l in manifest.splitlines() if l.strip() and not l.startswith(("#", "---")))
    return json.loads(json.loads(doc)["data"]["json"])


def dump_yaml(data) -> str:
    if yaml is not None:
        return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
    return json.dumps(data, indent=2) + "\n"


def merge(base, over):
    """Helm's values coalescing: maps merge, everything else replaces, null deletes."""
    if not isinstance(base, dict) or not isinstance(over, dict):
        return copy.deepcopy(over)
    out = copy.deepcopy(base)
    for k, v in over.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


# --- fake API server -------------------------------------------------------------------------

# group/version -> [(resource, kind, namespaced)]
DISCOVERY = {
    "v1": [
        ("configmaps", "ConfigMap", True),
        ("secrets", "Secret", True),
        ("services", "Service", True),
        ("serviceaccounts", "ServiceAccount", True),
        ("namespaces", "Namespace", False),
        ("pods", "Pod", True),
    ],
    "apps/v1": [("deployments", "Deployment", True)],
    "batch/v1": [("jobs", "Job", True), ("cronjobs", "CronJob", True)],
    "policy/v1": [("poddisruptionbudgets", "PodDisruptionBudget", True)],
    "rbac.authorization.k8s.io/v1": [
        ("clusterroles", "ClusterRole", False),
        ("clusterrolebindings", "ClusterRoleBinding", False),
        ("roles", "Role", True),
        ("rolebindings", "RoleBinding", True),
    ],
    "admissionregistration.k8s.io/v1": [
        ("mutatingwebhookconfigurations", "MutatingWebhookConfiguration", False),
        ("validatingwebhookconfigurations", "ValidatingWebhookConfiguration", False),
        ("validatingadmissionpolicies", "ValidatingAdmissionPolicy", False),
        ("validatingadmissionpolicybindings", "ValidatingAdmissionPolicyBinding", False),
        ("mutatingadmissionpolicies", "MutatingAdmissionPolicy", False),
        ("mutatingadmissionpolicybindings", "MutatingAdmissionPolicyBinding", False),
    ],
    "cert-manager.io/v1": [
        ("certificates", "Certificate", True),
        ("issuers", "Issuer", True),
        ("clusterissuers", "ClusterIssuer", False),
    ],
    "monitoring.coreos.com/v1": [
        ("servicemonitors", "ServiceMonitor", True),
        ("prometheusrules", "PrometheusRule", True),
    ],
    "networking.k8s.io/v1": [("networkpolicies", "NetworkPolicy", True)],
    "apiextensions.k8s.io/v1": [
        ("customresourcedefinitions", "CustomResourceDefinition", False),
    ],
    "batch.volcano.sh/v1alpha1": [("jobs", "Job", True)],
    "kubeflow.org/v1": [("pytorchjobs", "PyTorchJob", True)],
}


def object_path(obj: dict, namespace: str) -> str:
    api_version = obj["apiVersion"]
    for res, kind, namespaced in DISCOVERY.get(api_version, []):
        if kind == obj["kind"]:
            prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            ns = obj.get("metadata", {}).get("namespace", namespace)
            mid = f"/namespaces/{ns}" if namespaced else ""
            return f"{prefix}{mid}/{res}/{obj['metadata']['name']}"
    raise SystemExit(f"helm_check: --existing: unknown kind {api_version} {obj['kind']}")


class FakeApiServer:
    def __init__(self, namespace: str, existing: list[dict], kube_version: str = "1.34.0"):
        self.objects = {object_path(o, namespace): o for o in existing}
        major, minor = kube_version.lstrip("v").split(".")[:2]
        self.errors: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def reply(self, code: int, body: dict):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def not_found(self):
                self.reply(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                 "reason": "NotFound", "code": 404})

            def handle_any(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                url = urlparse(self.path)
                path = url.path.rstrip("/")
                if path == "/version":
                    return self.reply(200, {"major": major, "minor": minor,
                                            "gitVersion": f"v{major}.{minor}.0",
                                            "platform": "linux/amd64"})
                if path == "/api":
                    return self.reply(200, {"kind": "APIVersions", "versions": ["v1"],
                                            "serverAddressByClientCIDRs": []})
                if path == "/apis":
                    groups = []
                    for gv in DISCOVERY:
                        if "/" in gv:
                            g, v = gv.split("/")
                            ver = {"groupVersion": gv, "version": v}
                            groups.append({"name": g, "versions": [ver], "preferredVersion": ver})
                    return self.reply(200, {"kind": "APIGroupList", "apiVersion": "v1",
                                            "groups": groups})
                gv = path[len("/api/"):] if path.startswith("/api/") else path[len("/apis/"):]
                if gv in DISCOVERY:
                    return self.reply(200, {
                        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
                        "resources": [{"name": r, "singularName": "", "namespaced": ns,
                                       "kind": k, "verbs": ["create", "delete", "get", "list",
                                                            "patch", "update", "watch"]}
                                      for r, k, ns in DISCOVERY[gv]]})
                if self.command == "GET" and path in server.objects:
                    return self.reply(200, server.objects[path])
                if self.command == "GET" and path.endswith("/secrets") and "labelSelector" in url.query:
                    # Helm's release storage: no earlier release.
                    return self.reply(200, {"kind": "SecretList", "apiVersion": "v1",
                                            "metadata": {}, "items": []})
                if self.command == "GET":
                    return self.not_found()
                # Writes: Helm's release Secret is protobuf; resources are JSON. Echo JSON back.
                try:
                    obj = json.loads(body) if body else {}
                except (UnicodeDecodeError, json.JSONDecodeError):
                    obj = {"apiVersion": "v1", "kind": "Secret",
                           "metadata": {"name": path.rsplit("/", 1)[-1]}}
                if not isinstance(obj, dict) or "kind" not in obj:
                    obj = server.objects.get(path, {"apiVersion": "v1", "kind": "Status"})
                return self.reply(201 if self.command == "POST" else 200, obj)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = handle_any

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    def kubeconfig(self, namespace: str) -> str:
        port = self.httpd.server_address[1]
        return (
            "apiVersion: v1\nkind: Config\n"
            f"clusters: [{{name: fake, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
            "users: [{name: fake, user: {token: fake}}]\n"
            f"contexts: [{{name: fake, context: {{cluster: fake, user: fake, namespace: {namespace}}}}}]\n"
            "current-context: fake\n"
        )


def render(values: dict, namespace: str, release: str, existing: list[dict], chart: Path = CHART,
           kube_version: str = "1.34.0") -> str:
    with FakeApiServer(namespace, existing, kube_version) as api:
        config = helm_sdkpy.Configuration(namespace=namespace, kubeconfig=api.kubeconfig(namespace))
        install = helm_sdkpy.Install(config)
        result = asyncio.run(install.run(release, str(chart), values=values or None, wait=False,
                                         timeout=60))
    # Like `helm template`: the release's objects, then its hooks (Install keeps them apart).
    hooks = sorted(result.get("hooks") or [], key=lambda h: h.get("weight", 0))
    return result["manifest"] + "".join(
        f"\n---\n# Source: {h['path']}\n{h['manifest'].strip()}\n" for h in hooks)


def user_values(files: list[str], set_json: list[str]) -> dict:
    values: dict = {}
    for f in files:
        values = merge(values, load_yaml(Path(f)))
    for s in set_json:
        values = merge(values, json.loads(s))
    return values


# --- lint ------------------------------------------------------------------------------------

SEVERITY = {0: "UNKNOWN", 1: "INFO", 2: "WARNING", 3: "ERROR"}


def lint_one(values_file: Path | None) -> bool:
    """Helm's Lint action on the chart, with values_file merged over values.yaml (like -f)."""
    label = "default values" if values_file is None else str(values_file.relative_to(ROOT))
    with tempfile.TemporaryDirectory() as tmp:
        chart = Path(tmp) / "launchgate"
        shutil.copytree(CHART, chart)
        if values_file is not None:
            merged = merge(load_yaml(CHART / "values.yaml"), load_yaml(values_file))
            (chart / "values.yaml").write_text(dump_yaml(merged))
        config = helm_sdkpy.Configuration(namespace="launchgate")
        result = asyncio.run(helm_sdkpy.Lint(config).run(str(chart)))
    messages = result.get("Messages") or []
    bad = [m for m in messages if m.get("Severity", 0) >= 2] + (result.get("Errors") or [])
    for m in messages:
        print(f"  [{SEVERITY.get(m.get('Severity'), '?')}] {m.get('Path')}", file=sys.stderr)
    if bad:
        print(f"lint FAILED ({label}): {len(bad)} warning(s)/error(s)", file=sys.stderr)
        # helm-sdkpy drops the error text from lint results; a render shows the template error.
        try:
            render(load_yaml(values_file) if values_file else {}, "launchgate", "launchgate", [])
        except Exception as e:  # noqa: BLE001
            print(f"  render error: {e}", file=sys.stderr)
        return False
    print(f"lint ok ({label}): {result.get('TotalChartsLinted')} chart(s)", file=sys.stderr)
    return True


def cmd_lint(args) -> int:
    files = [Path(f).resolve() for f in args.values] or [None] + sorted((CHART / "ci").glob("*.yaml"))
    ok = all([lint_one(f) for f in files])
    return 0 if ok else 1


def cmd_render(args) -> int:
    existing: list[dict] = []
    if args.existing:
        doc = load_yaml(Path(args.existing))
        existing = doc.get("items", []) if doc.get("kind") == "List" else [doc]
    try:
        out = render(user_values(args.values, args.set_json), args.namespace, args.release, existing,
                     kube_version=args.kube_version)
    except helm_sdkpy.HelmError as e:
        print(f"render failed: {e}", file=sys.stderr)
        return 1
    sys.stdout.write(out)
    return 0


MANIFESTS_HEADER = """\
# launchgate as plain YAML, for clusters without Helm. Generated from charts/launchgate with
# charts/launchgate/ci/manifests-values.yaml (release "launchgate", namespace "launchgate"):
#     python3 scripts/helm_check.py manifests
# Do not edit by hand; tests/helm_chart.rs checks it matches the chart.
#
# Before applying: create the namespace and the TLS Secret, then put the CA into caBundle
# (both webhook configurations) - see manifests/README.md:
#     launchgate certs --dns launchgate.launchgate.svc --out certs/
#     kubectl apply -f manifests/namespace.yaml
#     kubectl -n launchgate create secret tls launchgate-tls --cert certs/tls.crt --key certs/tls.key
#     sed "s|Q0FfQlVORExFX1BMQUNFSE9MREVSX1NFRV9SRUFETUU=|$(base64 -w0 < certs/ca.crt)|" \\
#       manifests/launchgate.yaml | kubectl apply -f -
"""


def manifests_text() -> str:
    body = render(load_yaml(MANIFESTS_VALUES), "launchgate", "launchgate", [])
    # Helm stamps nothing time-dependent in external-cert mode, so this is reproducible.
    return MANIFESTS_HEADER + body.lstrip("\n")


def cmd_manifests(args) -> int:
    text = manifests_text()
    if args.check:
        if MANIFESTS.read_text() != text:
            print("manifests/launchgate.yaml is out of date: run python3 scripts/helm_check.py manifests",
                  file=sys.stderr)
            return 1
        print("manifests/launchgate.yaml matches the chart", file=sys.stderr)
        return 0
    MANIFESTS.write_text(text)
    print(f"wrote {MANIFESTS.relative_to(ROOT)}", file=sys.stderr)
    return 0


def cmd_cel(args) -> int:
    """Which fixture objects would the API server send to launchgate? Launch workloads must be
    sent, image builds (wandb: launch) must not, and no condition may raise an error."""
    try:
        import cel  # common-expression-language (cel-rust bindings)
    except ImportError:
        print("helm_check cel: pip install common-expression-language", file=sys.stderr)
        return 3
    if yaml is None:
        print("helm_check cel: pip install pyyaml", file=sys.stderr)
        return 3
    docs = [d for d in yaml.safe_load_all(render(user_values(args.values, []), "launchgate",
                                                   "launchgate", [])) if d]
    ok = True
    for hook_kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for hook in next(d for d in docs if d["kind"] == hook_kind)["webhooks"]:
            conds = hook.get("matchConditions") or []
            for f in sorted((ROOT / "tests" / "fixtures" / "manifests").glob("*.yaml")):
                for obj in yaml.safe_load_all(f.read_text()):
                    if not obj:
                        continue
                    try:
                        # A request that is not for a subresource has no subResource key.
                        context = {"object": obj, "request": {}}
                        sent = all(cel.evaluate(c["expression"], context) for c in conds)
                    except Exception as e:  # noqa: BLE001
                        print(f"ERROR {hook['name']} {f.name}: {e}")
                        ok = False
                        continue
                    labels = (obj.get("metadata") or {}).get("labels") or {}
                    want = labels.get("wandb") != "launch"
                    mark = "ok " if sent == want else "BAD"
                    ok &= sent == want
                    print(f"{mark} {hook['name']:24} {f.name:24} {obj['kind']:11} sent={sent}")
    return 0 if ok else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    lint = sub.add_parser("lint")
    lint.add_argument("-f", "--values", action="append", default=[])
    r = sub.add_parser("render")
    r.add_argument("-f", "--values", action="append", default=[])
    r.add_argument("--set-json", action="append", default=[], help="JSON object merged over the values")
    r.add_argument("--namespace", default="launchgate")
    r.add_argument("--release", default="launchgate")
    r.add_argument("--existing", help="YAML object or List the fake API server holds (for lookup)")
    r.add_argument("--kube-version", default="1.34.0",
                   help="Kubernetes version the fake API server reports (.Capabilities.KubeVersion)")
    m = sub.add_parser("manifests")
    m.add_argument("--check", action="store_true")
    c = sub.add_parser("cel")
    c.add_argument("-f", "--values", action="append", default=[])
    args = p.parse_args()
    commands = {"lint": cmd_lint, "render": cmd_render, "manifests": cmd_manifests, "cel": cmd_cel}
    return commands[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
