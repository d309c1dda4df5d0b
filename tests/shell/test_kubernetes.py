#!/usr/bin/env python3
"""deploy/kubernetes/ against the real programs, without a cluster (docs/kubernetes.md):
every manifest parses and the kustomization lists them; names, labels and selectors agree;
the ConfigMap's configuration passes gpuschedd --check-config, and a daemon started with it
(its paths and ports moved into a temporary directory and onto loopback) accepts the Secret's
administrator token and serves its TLS listener with a certificate made here; every volume
the configuration and the device plugin name is mounted where they look; every port the
daemon listens on is a container port and the Service's; every flag of every command is the
program's own; the probes and the preStop drain, run against that daemon, answer as they must;
the example pod asks for the resource the plugin advertises; the shipped token and hash
fail closed (they are placeholders), and the test puts a token of its own in their place.

Usage: test_kubernetes.py GPUSCHEDD GPUSCHED SOURCE_DIR
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import yaml

gpuschedd, gpusched, src = sys.argv[1:4]
kdir = os.path.join(src, "deploy", "kubernetes")
sys.path.insert(0, os.path.join(src, "python"))
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def load(name):
    with open(os.path.join(kdir, name)) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    assert len(docs) == 1, f"{name}: one document expected"
    return docs[0]


# ---- the files ----
kust = load("kustomization.yaml")
files = sorted(f for f in os.listdir(kdir) if f.endswith(".yaml") and
               f not in ("kustomization.yaml", "example-pod.yaml"))
check(sorted(kust["resources"]) == files, f"kustomization lists {kust['resources']}, not {files}")
res = {}
for f in kust["resources"]:
    d = load(f)
    res[d["kind"]] = d
for kind in ("Namespace", "ConfigMap", "Secret", "DaemonSet", "Service", "PodDisruptionBudget"):
    check(kind in res, f"no {kind}")
check(res["Namespace"]["metadata"]["name"] == kust["namespace"], "namespace names differ")
ds, svc, pdb, cm, secret = (res[k] for k in ("DaemonSet", "Service", "PodDisruptionBudget",
                                             "ConfigMap", "Secret"))
pod = ds["spec"]["template"]
labels = pod["metadata"]["labels"]
for name, sel in (("DaemonSet", ds["spec"]["selector"]["matchLabels"]),
                  ("PodDisruptionBudget", pdb["spec"]["selector"]["matchLabels"]),
                  ("Service", svc["spec"]["selector"])):
    check(all(labels.get(k) == v for k, v in sel.items()), f"{name}'s selector misses the pods")
check(pdb["spec"].get("maxUnavailable") == 1, "the PodDisruptionBudget allows more than one")
check(svc["spec"].get("clusterIP") == "None", "the Service is not headless")

containers = {c["name"]: c for c in pod["spec"]["containers"]}
daemon_c, plugin_c = containers["gpuschedd"], containers["device-plugin"]
volumes = {v["name"]: v for v in pod["spec"]["volumes"]}


def mount_at(container, path):
    """The mount of container that holds path (the deepest), or None."""
    best = None
    for m in container.get("volumeMounts", []):
        mp = m["mountPath"]
        if path == mp or path.startswith(mp.rstrip("/") + "/"):
            if best is None or len(mp) > len(best["mountPath"]):
                best = m
    return best


def secret_key_at(container, path):
    """The Secret key a file path in the container comes from (via items), or None."""
    m = mount_at(container, path)
    if not m:
        return None
    v = volumes[m["name"]]
    if "secret" not in v or v["secret"]["secretName"] != secret["metadata"]["name"]:
        return None
    rel = os.path.relpath(path, m["mountPath"])
    for it in v["secret"].get("items", []):
        if it["path"] == rel:
            return it["key"]
    return rel if "items" not in v["secret"] else None


# kustomize, where kubectl is installed (it is not a Debian 12 package): the rendering holds
# every resource, in the namespace.
kubectl = shutil.which("kubectl")
if kubectl:
    r = subprocess.run([kubectl, "kustomize", kdir], capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, f"kubectl kustomize: {r.stderr[-300:]}")
    rendered = [x for x in yaml.safe_load_all(r.stdout) if x] if r.returncode == 0 else []
    check(sorted(x["kind"] for x in rendered) == sorted(res),
          "kubectl kustomize renders other resources")
    check(all(x["metadata"].get("namespace") == kust["namespace"] for x in rendered
              if x["kind"] != "Namespace"), "a resource outside the namespace")
else:
    print("test_kubernetes: no kubectl here: kustomize's rendering not checked")

# ---- the daemon's configuration ----
cmd = daemon_c["command"]
check(cmd[:2] == ["/usr/bin/gpuschedd", "--config"], f"the daemon's command is {cmd}")
cfg_path = cmd[2]
m = mount_at(daemon_c, cfg_path)
check(m and volumes[m["name"]].get("configMap", {}).get("name") == cm["metadata"]["name"] and
      m.get("subPath") in cm["data"], f"{cfg_path} is not the ConfigMap's file")
config_text = cm["data"][m["subPath"]]
config = json.loads(config_text)
help_d = subprocess.run([gpuschedd, "--help"], capture_output=True, text=True).stdout
for a in cmd[1:]:
    if a.startswith("--"):
        check(a in help_d, f"gpuschedd has no {a}")
work = tempfile.mkdtemp(prefix="gs-k8s.")
d = None
try:
    with open(os.path.join(work, "as-is.json"), "w") as f:
        f.write(config_text)
    p = subprocess.run([gpuschedd, "--check-config", os.path.join(work, "as-is.json")],
                       capture_output=True, text=True)
    check(p.returncode == 0, f"the ConfigMap's configuration does not check: {p.stderr}")
    eff = json.loads(p.stdout) if p.returncode == 0 else config

    listen = [x if isinstance(x, str) else x["url"] for x in eff["listen"]]
    ipc = [u for u in listen if u.startswith("ipc://")]
    tcp = [u for u in listen if u.startswith(("tcp://", "tls+tcp://"))]
    # Two sockets: the node's (a hostPath, which pods get) and the administrator's (an
    # emptyDir of this pod's only, where the token goes).
    def kind_of(url):
        m = mount_at(daemon_c, os.path.dirname(url[len("ipc://"):]))
        return next(iter(k for k in ("hostPath", "emptyDir") if m and k in volumes[m["name"]]),
                    None)
    public = [u for u in ipc if kind_of(u) == "hostPath"]
    private = [u for u in ipc if kind_of(u) == "emptyDir"]
    check(len(public) == 1 and len(private) == 1 and len(ipc) == 2,
          f"not one node socket and one private admin socket: {ipc}")
    sock_dir = os.path.dirname(public[0][len("ipc://"):])
    admin_url = private[0] if private else ipc[0]
    admin_dir = os.path.dirname(admin_url[len("ipc://"):])
    m = mount_at(plugin_c, admin_dir)
    check(m and m["mountPath"] == admin_dir and "emptyDir" in volumes[m["name"]],
          "the plugin does not share the private admin socket")
    check(mount_at(plugin_c, sock_dir) is None or sock_dir == admin_dir,
          "the plugin needs no node socket mount")
    sock_host = volumes[mount_at(daemon_c, sock_dir)["name"]]["hostPath"]["path"]
    # Everything that sends the administrator's token uses the private socket.
    for what, command in (("readiness", daemon_c["readinessProbe"]["exec"]["command"]),
                          ("liveness", daemon_c["livenessProbe"]["exec"]["command"]),
                          ("preStop", daemon_c["lifecycle"]["preStop"]["exec"]["command"])):
        text = " ".join(command)
        check(admin_url in text and public[0] not in text,
              f"{what} does not use the private admin socket")
    db_dir = os.path.dirname(eff["db"])
    m = mount_at(daemon_c, db_dir)
    check(m and "hostPath" in volumes[m["name"]], f"the audit's directory {db_dir} is not a "
          "volume of the node's")
    tls_file = eff["tls"]["cert_key_file"]
    check(secret_key_at(daemon_c, tls_file) in secret["stringData"],
          f"{tls_file} is not a key of the Secret")

    # Ports: the listeners' and the metrics', = the container's = the Service's.
    want = sorted(int(u.rsplit(":", 1)[1]) for u in tcp + [eff["metrics"]])
    ports = {p["name"]: p["containerPort"] for p in daemon_c["ports"]}
    check(sorted(ports.values()) == want, f"container ports {ports} vs listeners {want}")
    for sp in svc["spec"]["ports"]:
        check(ports.get(sp["targetPort"]) == sp["port"], f"Service port {sp} is not the daemon's")

    # ---- the device plugin ----
    pc = plugin_c["command"]
    check(pc[:3] == ["python3", "-m", "gpusched.deviceplugin"], f"plugin command {pc}")
    from gpusched import deviceplugin
    pargs = deviceplugin.parser().parse_args(pc[3:])
    check(pargs.daemon_url == admin_url, f"the plugin's --daemon-url {pargs.daemon_url}")
    check(pargs.host_socket_dir == sock_host, "--host-socket-dir is not the node's socket dir")
    check(pargs.container_socket_dir == sock_dir, "pods would see the socket elsewhere")
    check(pargs.socket_name == os.path.basename(public[0]), "--socket-name is not the daemon's")
    m = mount_at(plugin_c, pargs.kubelet_dir)
    check(m and m["mountPath"] == pargs.kubelet_dir and
          volumes[m["name"]]["hostPath"]["path"] == "/var/lib/kubelet/device-plugins",
          "the kubelet's device-plugin directory is not mounted where the plugin looks")
    token_key = secret_key_at(plugin_c, pargs.admin_token_file)
    check(token_key in secret["stringData"], "--admin-token-file is not the Secret's token")
    env = {e["name"]: e for e in daemon_c.get("env", [])}
    check(env.get("GPUSCHED_TOKEN", {}).get("valueFrom", {}).get("secretKeyRef", {})
          .get("key") == token_key, "the probes do not get the administrator's token")
    example = load("example-pod.yaml")
    limits = example["spec"]["containers"][0]["resources"]["limits"]
    check(list(limits) == [pargs.resource], f"the example asks for {list(limits)}")
    ex_cmd = example["spec"]["containers"][0]["command"]
    sub_help = subprocess.run([gpusched, ex_cmd[1], "--help"], capture_output=True,
                              text=True).stdout
    for a in ex_cmd[2:]:
        if a.startswith("--"):
            check(a in sub_help, f"gpusched {ex_cmd[1]} has no {a}")

    # ---- a daemon with this configuration, moved into the temporary directory ----
    def free_port():
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        return port

    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-days", "2", "-subj", "/CN=test-ca",
                    "-keyout", f"{work}/ca.key", "-out", f"{work}/ca.pem"], check=True,
                   capture_output=True)
    subprocess.run(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-subj", "/CN=gpusched", "-keyout", f"{work}/s.key", "-out",
                    f"{work}/s.csr"], check=True, capture_output=True)
    with open(f"{work}/ext", "w") as f:
        f.write("subjectAltName=DNS:gpusched\n")
    subprocess.run(["openssl", "x509", "-req", "-in", f"{work}/s.csr", "-CA", f"{work}/ca.pem",
                    "-CAkey", f"{work}/ca.key", "-CAcreateserial", "-days", "2", "-extfile",
                    f"{work}/ext", "-out", f"{work}/s.pem"], check=True, capture_output=True)
    with open(f"{work}/server.pem", "w") as f:
        f.write(open(f"{work}/s.pem").read() + open(f"{work}/s.key").read())
    tls_port, metrics_port = free_port(), free_port()
    # The shipped pair fails closed: the ConfigMap's hash is of no token anyone has, and the
    # Secret holds a placeholder. The test makes a token and puts its hash in place.
    token = "test-" + os.urandom(8).hex()
    token_hash = subprocess.run([gpuschedd, "--hash-token"], input=token, capture_output=True,
                                text=True, check=True).stdout.strip()
    moved = json.loads(config_text)
    shipped = json.loads(config_text)
    url = f"ipc://{work}/gpusched.sock"
    admin_moved = f"ipc://{work}/admin.sock"
    moved["listen"] = [url, admin_moved, f"tls+tcp://127.0.0.1:{tls_port}"]
    for t in moved["tenants"]:
        if t.get("admin"):
            t["token_hash"] = token_hash
    moved["db"] = f"{work}/audit.db"
    moved["metrics"] = f"http://127.0.0.1:{metrics_port}"
    moved["tls"] = dict(config["tls"], cert_key_file=f"{work}/server.pem")
    with open(f"{work}/moved.json", "w") as f:
        json.dump(moved, f)
    d = subprocess.Popen([gpuschedd, "--config", f"{work}/moved.json", "--log-level", "warn"],
                         stdout=subprocess.PIPE, stderr=open(f"{work}/daemon.log", "w"))
    deadline = time.monotonic() + 30
    ready = False
    while time.monotonic() < deadline and not ready:
        line = d.stdout.readline()
        if not line:
            break
        ready = b"ready" in line
    check(ready, "the daemon with the ConfigMap's configuration did not start: " +
          open(f"{work}/daemon.log").read()[-500:])
    admin_env = dict(os.environ, GPUSCHED_TOKEN=token)

    def probe(command):
        """A probe's or hook's command with our programs and the moved socket."""
        text = json.dumps(command).replace("/usr/bin/gpusched", gpusched).replace(
            admin_url, admin_moved)
        return subprocess.run(json.loads(text), env=admin_env, capture_output=True, text=True,
                              timeout=120)

    if ready:
        r = probe(daemon_c["readinessProbe"]["exec"]["command"])
        check(r.returncode == 0, f"readiness fails on a serving daemon: {r.stderr}")
        r = probe(daemon_c["livenessProbe"]["exec"]["command"])
        check(r.returncode == 0, f"liveness fails: {r.stderr}")
        # The Secret's token is the ConfigMap's administrator, also over TLS.
        tls_env = dict(admin_env, GPUSCHED_TLS_CA=f"{work}/ca.pem",
                       GPUSCHED_TLS_SERVER_NAME="gpusched")
        r = subprocess.run([gpusched, "--url", f"tls+tcp://127.0.0.1:{tls_port}", "--json",
                            "admin", "status"], env=tls_env, capture_output=True, text=True,
                           timeout=60)
        check(r.returncode == 0 and '"serving"' in r.stdout,
              f"the Secret's token over TLS: {r.returncode} {r.stderr}")
        for other in ("not-the-token", secret["stringData"][token_key]):
            bad = subprocess.run([gpusched, "--url", url, "admin", "status"],
                                 env=dict(os.environ, GPUSCHED_TOKEN=other),
                                 capture_output=True, text=True, timeout=60)
            check(bad.returncode != 0, f"the token {other!r} is an administrator too")
        check(shipped["tenants"][0]["token_hash"] != token_hash, "the hash was not replaced")
        # preStop: the drain stops the daemon cleanly; readiness then fails.
        r = probe(daemon_c["lifecycle"]["preStop"]["exec"]["command"])
        check(r.returncode == 0, f"the preStop drain: {r.returncode} {r.stderr}")
        try:
            check(d.wait(timeout=60) == 0, "the daemon did not stop cleanly after the drain")
        except subprocess.TimeoutExpired:
            check(False, "the daemon did not stop within 60 s of the drain")
        r = probe(daemon_c["readinessProbe"]["exec"]["command"])
        check(r.returncode != 0, "readiness passes with the daemon gone")
finally:
    if d is not None and d.poll() is None:
        d.kill()
        d.wait()
    shutil.rmtree(work, ignore_errors=True)

if failures:
    sys.exit(1)
print("test_kubernetes: ok")
