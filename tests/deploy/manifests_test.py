"""deploy/kubernetes/ checked without a cluster (none runs in kiln's tests).

What a cluster would refuse or get wrong is checked from the manifests
themselves: every reference resolves (ConfigMaps, Secrets and their keys,
volumes, named ports, the StatefulSet's headless Service), every selector
selects the pods it is meant for, the probes ask kiln's health routes, only
kiln's container is privileged, and the grace period covers kiln's drain.
The programs the pods run are given what the pods would give them: the kiln
container's command line, with its environment and mounted kiln.toml, goes
through `kiln serve --check`; the HAProxy ConfigMap must be
deploy/haproxy/haproxy.cfg and pass `haproxy -c` with the Deployment's
environment. tests/integration/fleet_test.cc runs that HAProxy config in
front of three nodes.

Run by ctest (deploy_manifests) with KILN_BIN set to the built kiln.
"""

import os
import re
import shutil
import subprocess
import tempfile
import tomllib
import unittest
from pathlib import Path

try:
    import yaml  # Debian's python3-yaml (the Makefile's TEST_PKGS)
except ImportError:  # pragma: no cover - depends on the host
    yaml = None

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "deploy" / "kubernetes"
HAPROXY_CFG = REPO / "deploy" / "haproxy" / "haproxy.cfg"

# Objects the manifests use but an operator creates (docs/deploy.md).
EXTERNAL = {
    ("Secret", "kiln-tls"): "the TLS certificate HAProxy serves, made by the operator",
}
API_VERSIONS = {
    "Namespace": "v1",
    "ConfigMap": "v1",
    "Secret": "v1",
    "Service": "v1",
    "StatefulSet": "apps/v1",
    "Deployment": "apps/v1",
    "PodDisruptionBudget": "policy/v1",
}
WORKLOADS = ("StatefulSet", "Deployment")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def load():
    objects = {}
    for path in sorted(MANIFESTS.glob("*.yaml")):
        with open(path, encoding="utf-8") as f:
            for doc in yaml.safe_load_all(f):
                if doc is None:
                    continue
                key = (doc.get("kind"), doc.get("metadata", {}).get("name"))
                if key in objects:
                    raise AssertionError(f"{path.name}: {key} is defined twice")
                doc["_file"] = path.name
                objects[key] = doc
    return objects


def pod_spec(workload):
    return workload["spec"]["template"]["spec"]


def containers(workload, init=True):
    spec = pod_spec(workload)
    return list(spec.get("containers", [])) + (list(spec.get("initContainers", [])) if init else [])


def env_of(container):
    return {e["name"]: e for e in container.get("env", [])}


@unittest.skipIf(yaml is None, "python3-yaml is not installed")
class Manifests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.objects = load()
        cls.kiln = cls.objects[("StatefulSet", "kiln")]
        cls.haproxy = cls.objects[("Deployment", "kiln-haproxy")]
        cls.kiln_container = next(c for c in containers(cls.kiln) if c["name"] == "kiln")
        cls.haproxy_container = next(c for c in containers(cls.haproxy) if c["name"] == "haproxy")

    def of_kind(self, kind):
        return [o for (k, _), o in self.objects.items() if k == kind]

    def exists(self, kind, name):
        return (kind, name) in self.objects or (kind, name) in EXTERNAL

    def test_every_object_is_well_formed(self):
        self.assertTrue(self.objects, f"no manifests in {MANIFESTS}")
        for (kind, name), o in self.objects.items():
            where = f"{o['_file']}: {kind}/{name}"
            self.assertIn(kind, API_VERSIONS, where)
            self.assertEqual(o["apiVersion"], API_VERSIONS[kind], where)
            self.assertRegex(name or "", DNS_LABEL, where)
            if kind != "Namespace":
                self.assertEqual(o["metadata"].get("namespace"), "kiln", where)
                self.assertIn(("Namespace", "kiln"), self.objects, where)

    def test_workloads_select_their_own_pods(self):
        for w in self.of_kind("StatefulSet") + self.of_kind("Deployment"):
            selector = w["spec"]["selector"]["matchLabels"]
            labels = w["spec"]["template"]["metadata"]["labels"]
            self.assertLessEqual(selector.items(), labels.items(), w["metadata"]["name"])

    def test_services_and_budgets_select_exactly_one_workload(self):
        selectors = [(s, s["spec"]["selector"]) for s in self.of_kind("Service")]
        selectors += [(p, p["spec"]["selector"]["matchLabels"]) for p in self.of_kind("PodDisruptionBudget")]
        for obj, selector in selectors:
            chosen = [
                w["metadata"]["name"]
                for w in self.of_kind("StatefulSet") + self.of_kind("Deployment")
                if selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()
            ]
            self.assertEqual(len(chosen), 1, f"{obj['kind']}/{obj['metadata']['name']} selects {chosen}")

    def test_references_resolve(self):
        for w in self.of_kind("StatefulSet") + self.of_kind("Deployment"):
            name = w["metadata"]["name"]
            spec = pod_spec(w)
            volumes = {v["name"]: v for v in spec.get("volumes", [])}
            for v in volumes.values():
                if "configMap" in v:
                    self.assertTrue(self.exists("ConfigMap", v["configMap"]["name"]), f"{name}: {v}")
                if "secret" in v:
                    self.assertTrue(self.exists("Secret", v["secret"]["secretName"]), f"{name}: {v}")
            for c in containers(w):
                where = f"{name}/{c['name']}"
                for m in c.get("volumeMounts", []):
                    self.assertIn(m["name"], volumes, f"{where}: mounts an undefined volume")
                for e in c.get("env", []):
                    ref = e.get("valueFrom", {}).get("secretKeyRef")
                    if ref:
                        secret = self.objects.get(("Secret", ref["name"]))
                        self.assertIsNotNone(secret, f"{where}: env {e['name']}")
                        keys = set(secret.get("stringData", {})) | set(secret.get("data", {}))
                        self.assertIn(ref["key"], keys, f"{where}: env {e['name']}")
                ports = {p["name"] for p in c.get("ports", []) if "name" in p}
                for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
                    p = c.get(probe)
                    if not p:
                        continue
                    port = (p.get("httpGet") or p.get("tcpSocket") or {}).get("port")
                    if isinstance(port, str):
                        self.assertIn(port, ports, f"{where}: {probe} names no port of the container")
        for s in self.of_kind("Service"):
            pods = [
                w
                for w in self.of_kind("StatefulSet") + self.of_kind("Deployment")
                if s["spec"]["selector"].items() <= w["spec"]["template"]["metadata"]["labels"].items()
            ]
            names = {p.get("name") for w in pods for c in containers(w, init=False) for p in c.get("ports", [])}
            numbers = {p["containerPort"] for w in pods for c in containers(w, init=False) for p in c.get("ports", [])}
            for port in s["spec"]["ports"]:
                target = port.get("targetPort", port["port"])
                self.assertIn(target, names if isinstance(target, str) else numbers, f"Service/{s['metadata']['name']}")
        headless = self.objects.get(("Service", self.kiln["spec"]["serviceName"]))
        self.assertIsNotNone(headless, "the StatefulSet's serviceName names no Service")
        self.assertEqual(headless["spec"].get("clusterIP"), "None", "a StatefulSet's Service must be headless")

    def test_kiln_probes_ask_kilns_health_routes(self):
        c = self.kiln_container
        self.assertEqual(c["readinessProbe"]["httpGet"]["path"], "/readyz")
        self.assertEqual(c["livenessProbe"]["httpGet"]["path"], "/healthz")

    def test_only_kilns_container_is_privileged(self):
        for w in self.of_kind("StatefulSet") + self.of_kind("Deployment"):
            spec = pod_spec(w)
            for host in ("hostNetwork", "hostPID", "hostIPC"):
                self.assertFalse(spec.get(host, False), f"{w['metadata']['name']}: {host}")
            for c in containers(w):
                privileged = c.get("securityContext", {}).get("privileged", False)
                self.assertEqual(privileged, c is self.kiln_container, f"{w['metadata']['name']}/{c['name']}")
        # HAProxy: not root, no capabilities, no way back to either. The
        # kubelet verifies runAsNonRoot only against a numeric user.
        pod = pod_spec(self.haproxy).get("securityContext", {})
        for c in containers(self.haproxy):
            sc = {**pod, **c.get("securityContext", {})}
            where = f"kiln-haproxy/{c['name']}"
            self.assertTrue(sc.get("runAsNonRoot"), where)
            self.assertIsInstance(sc.get("runAsUser"), int, where)
            self.assertNotEqual(sc.get("runAsUser"), 0, where)
            self.assertFalse(sc.get("allowPrivilegeEscalation", True), where)
            self.assertEqual(sc.get("capabilities", {}).get("drop"), ["ALL"], where)

    def kiln_toml(self):
        volume = next(
            v for v in pod_spec(self.kiln)["volumes"] if "configMap" in v
        )
        mount = next(m for m in self.kiln_container["volumeMounts"] if m["name"] == volume["name"])
        config_map = self.objects[("ConfigMap", volume["configMap"]["name"])]
        return mount["mountPath"], config_map["data"]

    def test_the_grace_period_covers_kilns_drain(self):
        _, data = self.kiln_toml()
        cfg = tomllib.loads(data["kiln.toml"])
        drain = cfg.get("fleet", {}).get("drain_wait", 2)
        grace = cfg.get("server", {}).get("shutdown_grace", 30)
        period = pod_spec(self.kiln)["terminationGracePeriodSeconds"]
        self.assertGreater(period, drain + grace, "SIGKILL would come before kiln has drained and stopped")

    def test_the_kiln_command_line_passes_kiln_serve_check(self):
        kiln = os.environ.get("KILN_BIN")
        if not kiln or not os.access(kiln, os.X_OK):
            self.skipTest("KILN_BIN names no kiln binary (ctest sets it)")
        c = self.kiln_container
        self.assertEqual(c["command"], ["/bin/sh", "-c"])
        (script,) = c["args"]
        mount, data = self.kiln_toml()
        secret_env = env_of(c)["KILN_STORE_URL"]["valueFrom"]["secretKeyRef"]
        url = self.objects[("Secret", secret_env["name"])]["stringData"][secret_env["key"]]
        port = next(p["containerPort"] for p in c["ports"] if p["name"] == "http")
        with tempfile.TemporaryDirectory() as tmp:
            etc = Path(tmp) / "etc"
            etc.mkdir()
            for key, text in data.items():
                (etc / key).write_text(text, encoding="utf-8")
            bin_dir = Path(tmp) / "bin"
            bin_dir.mkdir()
            (bin_dir / "kiln").symlink_to(os.path.abspath(kiln))
            self.assertIn(mount + "/", script, "the command reads kiln.toml from where it is not mounted")
            script = script.replace(mount + "/", str(etc) + "/")
            for i in range(self.kiln["spec"]["replicas"]):
                env = {
                    "PATH": f"{bin_dir}:/usr/bin:/bin",
                    "KILN_STORE_URL": url,
                    "POD_NAME": f"{self.kiln['metadata']['name']}-{i}",  # a StatefulSet's pod names
                    "POD_IP": f"10.0.0.{i + 1}",
                }
                for name, e in env_of(c).items():
                    self.assertIn(name, env, f"the test does not know what the pod gives {name}")
                r = subprocess.run(
                    ["/bin/sh", "-c", script + " --check"], env=env, capture_output=True, text=True, timeout=60
                )
                self.assertEqual(r.returncode, 0, r.stderr + r.stdout)
                self.assertIn(f"node {env['POD_NAME']}, advertise {env['POD_IP']}:{port},", r.stdout)
                self.assertNotIn("CHANGE-ME", r.stdout + r.stderr, "the store password was printed")

    def test_haproxy_runs_the_shipped_config(self):
        config_map = self.objects[("ConfigMap", "kiln-haproxy")]
        self.assertEqual(
            config_map["data"]["haproxy.cfg"],
            HAPROXY_CFG.read_text(encoding="utf-8"),
            "copy deploy/haproxy/haproxy.cfg into deploy/kubernetes/haproxy.yaml's ConfigMap",
        )
        args = self.haproxy_container["args"]
        mount = next(m for m in self.haproxy_container["volumeMounts"] if m["name"] == "config")["mountPath"]
        self.assertEqual(args, ["-f", mount + "/haproxy.cfg"])

    def test_haproxy_names_every_node_of_the_statefulset(self):
        env = env_of(self.haproxy_container)
        nodes = sorted(k for k in env if re.fullmatch(r"KILN_NODE_\d+", k))
        replicas = self.kiln["spec"]["replicas"]
        self.assertEqual(nodes, [f"KILN_NODE_{i}" for i in range(replicas)])
        name, service = self.kiln["metadata"]["name"], self.kiln["spec"]["serviceName"]
        port = next(p["containerPort"] for p in self.kiln_container["ports"] if p["name"] == "http")
        cfg = HAPROXY_CFG.read_text(encoding="utf-8")
        for i in range(replicas):
            self.assertEqual(env[f"KILN_NODE_{i}"]["value"], f"{name}-{i}.{service}.kiln.svc.cluster.local:{port}")
            self.assertRegex(cfg, rf'\n\s*server {name}-{i} "\$\{{KILN_NODE_{i}\}}" check\n')
            self.assertRegex(cfg, rf"\n\s*use-server {name}-{i} if \{{ var\(txn.node\) -m str {name}-{i} \}}\n")
        self.assertEqual(len(re.findall(r"\n\s*server ", cfg)), replicas, "servers the StatefulSet does not run")

    def test_haproxy_accepts_its_config_with_the_deployments_environment(self):
        for tool in ("haproxy", "openssl"):
            if shutil.which(tool, path="/usr/sbin:/usr/bin") is None:
                self.skipTest(f"{tool} is not installed")
        env = {k: e["value"] for k, e in env_of(self.haproxy_container).items()}
        with tempfile.TemporaryDirectory() as tmp:
            key, crt = Path(tmp) / "tls.key", Path(tmp) / "tls.crt"
            subprocess.run(
                ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=kiln-test",
                 "-days", "1", "-keyout", key, "-out", crt],
                check=True, capture_output=True, timeout=60,
            )
            pem = Path(tmp) / "kiln.pem"
            pem.write_bytes(crt.read_bytes() + key.read_bytes())
            self.assertEqual(env["KILN_HAPROXY_CERT"], "/pem/kiln.pem")
            env["KILN_HAPROXY_CERT"] = str(pem)
            env["PATH"] = "/usr/sbin:/usr/bin:/bin"
            r = subprocess.run(
                ["haproxy", "-c", "-f", HAPROXY_CFG], env=env, capture_output=True, text=True, timeout=60
            )
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # The cluster's names do not resolve here: HAProxy starts them down
        # (init-addr none) and its resolvers find them; nothing else may warn.
        for line in (r.stdout + r.stderr).splitlines():
            if "[WARNING]" in line:
                self.assertIn("could not resolve address", line)


if __name__ == "__main__":
    unittest.main()
