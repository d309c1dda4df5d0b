"""The Kubernetes device plugin (gpusched.deviceplugin) against a kubelet stand-in that speaks
the real protocol (v1beta1 over gRPC on unix sockets, deploy/kubernetes/
deviceplugin-v1beta1.proto) and a real gpuschedd: registration, ListAndWatch, Allocate
making a tenant whose token works, a device moving to another pod, unknown devices, the
daemon going away, the kubelet restarting, and SIGTERM."""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures

import pytest

grpc = pytest.importorskip("grpc")

import gpusched  # noqa: E402
from gpusched import _kubelet_api as api  # noqa: E402
from conftest import Daemon  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
M = api.M


class Kubelet:
    """The kubelet's side: Registration on kubelet.sock, and a client of the plugin."""

    def __init__(self, d: str):
        self.dir = d
        self.registered = []
        self.event = threading.Condition()
        self.start()

    def start(self):
        def register(req, ctx):
            with self.event:
                self.registered.append(req)
                self.event.notify_all()
            return M["Empty"]()

        h = grpc.method_handlers_generic_handler("v1beta1.Registration", {
            "Register": grpc.unary_unary_rpc_method_handler(
                register, M["RegisterRequest"].FromString, M["Empty"].SerializeToString)})
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self.server.add_generic_rpc_handlers((h,))
        self.server.add_insecure_port("unix:" + os.path.join(self.dir, "kubelet.sock"))
        self.server.start()

    def restart(self):
        """As a restarting kubelet: a new kubelet.sock, and the plugins' sockets removed."""
        self.server.stop(0).wait()
        for name in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, name))
        self.start()

    def wait_registered(self, n: int, timeout: float = 30):
        deadline = time.monotonic() + timeout
        with self.event:
            while len(self.registered) < n:
                left = deadline - time.monotonic()
                assert left > 0, f"no registration {n} within {timeout} s"
                self.event.wait(left)
        return self.registered[n - 1]

    def plugin(self, endpoint: str):
        ch = grpc.insecure_channel("unix:" + os.path.join(self.dir, endpoint))

        def call(method, req, resp, stream=False):
            make = ch.unary_stream if stream else ch.unary_unary
            return make(api.method_path("DevicePlugin", method),
                        request_serializer=M[req].SerializeToString,
                        response_deserializer=M[resp].FromString)
        return ch, {
            "options": call("GetDevicePluginOptions", "Empty", "DevicePluginOptions"),
            "list": call("ListAndWatch", "Empty", "ListAndWatchResponse", stream=True),
            "allocate": call("Allocate", "AllocateRequest", "AllocateResponse"),
        }


def next_list(stream, timeout: float = 30):
    """The next ListAndWatch response, within timeout (the stream is read on a thread)."""
    out = []
    t = threading.Thread(target=lambda: out.append(next(stream)), daemon=True)
    t.start()
    t.join(timeout)
    assert out, f"no ListAndWatch update within {timeout} s"
    return {d.ID: d.health for d in out[0].devices}


def start_plugin(dm, d, kdir, token_file):
    cli = os.path.join(os.path.dirname(os.environ["GPUSCHEDD"]), "gpusched")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    return subprocess.Popen(
        [sys.executable, "-m", "gpusched.deviceplugin", "--daemon-url", dm.url,
         "--admin-token-file", token_file, "--gpusched", cli, "--kubelet-dir", kdir,
         "--host-socket-dir", d, "--container-socket-dir", "/run/gpusched", "--shares", "3",
         "--poll-seconds", "0.2", "--memory-quota-per-device", "1048576"],
        env=env, stderr=open(os.path.join(d, "plugin.log"), "a"))


def allocate(plugin, ids):
    req = M["AllocateRequest"]()
    req.container_requests.add(devices_ids=ids)
    return plugin["allocate"](req, timeout=30).container_responses[0]


@pytest.fixture
def setup():
    d = tempfile.mkdtemp(prefix="gs-deviceplugin.")
    kdir = os.path.join(d, "kubelet")
    os.mkdir(kdir)
    dm = Daemon(d)
    token_file = os.path.join(d, "admin-token")
    with open(token_file, "w") as f:
        f.write("t-ops\n")
    kubelet = Kubelet(kdir)
    proc = start_plugin(dm, d, kdir, token_file)
    yield dm, kubelet, proc, d
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    kubelet.server.stop(0)
    if dm.proc.poll() is None:
        dm.stop()
    shutil.rmtree(d, ignore_errors=True)


def test_register_list_allocate(setup):
    dm, kubelet, proc, d = setup
    reg = kubelet.wait_registered(1)
    assert (reg.version, reg.endpoint, reg.resource_name) == \
        ("v1beta1", "gpusched.sock", "gpusched.io/vgpu")
    ch, plugin = kubelet.plugin(reg.endpoint)
    assert not plugin["options"](M["Empty"](), timeout=10).pre_start_required
    stream = plugin["list"](M["Empty"]())
    devices = next_list(stream)
    assert devices == {f"gpusched-a0-{k}": "Healthy" for k in range(3)}

    # A pod gets two shares: a tenant of its own, share 200, the socket and its token.
    req = M["AllocateRequest"]()
    req.container_requests.add(devices_ids=["gpusched-a0-0", "gpusched-a0-1"])
    resp = plugin["allocate"](req, timeout=30).container_responses[0]
    assert resp.envs["GPUSCHED_URL"] == "ipc:///run/gpusched/gpusched.sock"
    assert resp.envs["GPUSCHED_ADAPTER"] == "0"
    # Read-only: a pod may connect to the daemon's socket, never put its own in its place.
    assert [(m.container_path, m.host_path, m.read_only) for m in resp.mounts] == \
        [("/run/gpusched", d, True)]
    tenant = resp.annotations["gpusched.io/tenant"]
    with gpusched.connect(dm.url, resp.envs["GPUSCHED_TOKEN"]) as c:
        assert c.info()["tenant"] == tenant
        c.device().allocation(4096).write(b"k8s")  # it works as any tenant
    with gpusched.connect(dm.url, "t-ops") as admin:
        pass
    listing = subprocess.run(
        [os.path.join(os.path.dirname(os.environ["GPUSCHEDD"]), "gpusched"), "--url", dm.url,
         "--json", "tenant", "ls"], env=dict(os.environ, GPUSCHED_TOKEN="t-ops"),
        capture_output=True, text=True, check=True).stdout
    import json
    rows = {t["name"]: t for t in json.loads(listing)}
    assert rows[tenant]["share"] == 200 and rows[tenant]["memory_quota"] == 2 * 1048576

    # One of its devices goes to another pod: the first tenant is gone, its token refused.
    req = M["AllocateRequest"]()
    req.container_requests.add(devices_ids=["gpusched-a0-1", "gpusched-a0-2"])
    resp2 = plugin["allocate"](req, timeout=30).container_responses[0]
    assert resp2.annotations["gpusched.io/tenant"] != tenant
    with pytest.raises(gpusched.GpuschedError):
        with gpusched.connect(dm.url, resp.envs["GPUSCHED_TOKEN"]) as c:
            c.info()
    with gpusched.connect(dm.url, resp2.envs["GPUSCHED_TOKEN"]) as c:
        assert c.info()["tenant"] == resp2.annotations["gpusched.io/tenant"]

    # Unknown devices are refused.
    req = M["AllocateRequest"]()
    req.container_requests.add(devices_ids=["gpusched-a9-0"])
    with pytest.raises(grpc.RpcError) as e:
        plugin["allocate"](req, timeout=30)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    # The daemon goes away: every device turns Unhealthy on the same stream.
    dm.stop()
    assert set(next_list(stream).values()) == {"Unhealthy"}
    ch.close()

    # SIGTERM: the plugin stops cleanly.
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


def test_kubelet_restart(setup):
    dm, kubelet, proc, d = setup
    kubelet.wait_registered(1)
    kubelet.restart()  # its socket anew, the plugin's socket removed
    reg = kubelet.wait_registered(2)
    assert reg.resource_name == "gpusched.io/vgpu"
    ch, plugin = kubelet.plugin(reg.endpoint)
    assert next_list(plugin["list"](M["Empty"]())) == \
        {f"gpusched-a0-{k}": "Healthy" for k in range(3)}
    ch.close()


def test_api_matches_the_proto_file():
    """The descriptors built at run time are the .proto file's, field for field (protoc)."""
    protoc = shutil.which("protoc")
    if not protoc:
        pytest.skip("no protoc (Debian: protobuf-compiler)")
    from google.protobuf import descriptor_pb2
    with tempfile.TemporaryDirectory() as t:
        out = os.path.join(t, "api.pb")
        subprocess.run([protoc, "--descriptor_set_out=" + out,
                        "-I" + os.path.join(ROOT, "deploy", "kubernetes"),
                        "deviceplugin-v1beta1.proto"], check=True)
        s = descriptor_pb2.FileDescriptorSet()
        with open(out, "rb") as f:
            s.ParseFromString(f.read())

    def shape(fd):
        out = {}
        for m in fd.message_type:
            out[m.name] = sorted((f.name, f.number, f.type, f.label, f.type_name, f.json_name)
                                 for f in m.field)
            for n in m.nested_type:
                out[m.name + "." + n.name] = (
                    sorted((f.name, f.number, f.type, f.label) for f in n.field),
                    n.options.map_entry)
        for sv in fd.service:
            out["service " + sv.name] = [(x.name, x.input_type, x.output_type,
                                          x.server_streaming, x.client_streaming)
                                         for x in sv.method]
        return out
    want, got = shape(s.file[0]), shape(api.file_descriptor())
    assert s.file[0].package == api.PACKAGE
    assert got == want


def test_cli_errors(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    h = subprocess.run([sys.executable, "-m", "gpusched.deviceplugin", "--help"], env=env,
                       capture_output=True, text=True)
    assert h.returncode == 0 and "--admin-token-file" in h.stdout
    bad = subprocess.run([sys.executable, "-m", "gpusched.deviceplugin", "--admin-token-file",
                          str(tmp_path / "t"), "--shares", "0"], env=env, capture_output=True,
                         text=True)
    assert bad.returncode == 2 and "--shares" in bad.stderr
    missing = subprocess.run([sys.executable, "-m", "gpusched.deviceplugin",
                              "--admin-token-file", str(tmp_path / "none")], env=env,
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and "none" in missing.stderr


def test_plugin_restart_keeps_shares_apart(setup):
    """The tenant's name says which shares it holds: a plugin that restarted (with its pod)
    still removes an earlier pod's tenant when one of its shares goes to another pod."""
    dm, kubelet, proc, d = setup
    reg = kubelet.wait_registered(1)
    ch, plugin = kubelet.plugin(reg.endpoint)
    first = allocate(plugin, ["gpusched-a0-0", "gpusched-a0-1"])
    assert first.annotations["gpusched.io/tenant"] == "k8s-a0x3"
    ch.close()
    proc.kill()
    proc.wait()
    proc2 = start_plugin(dm, d, kubelet.dir, os.path.join(d, "admin-token"))
    try:
        reg = kubelet.wait_registered(2)
        ch, plugin = kubelet.plugin(reg.endpoint)
        second = allocate(plugin, ["gpusched-a0-1"])
        assert second.annotations["gpusched.io/tenant"] == "k8s-a0x2"
        with pytest.raises(gpusched.GpuschedError):
            with gpusched.connect(dm.url, first.envs["GPUSCHED_TOKEN"]) as c:
                c.info()
        # A share nobody held before leaves the other tenant alone.
        third = allocate(plugin, ["gpusched-a0-0"])
        with gpusched.connect(dm.url, second.envs["GPUSCHED_TOKEN"]) as c:
            assert c.info()["tenant"] == "k8s-a0x2"
        assert third.annotations["gpusched.io/tenant"] == "k8s-a0x1"
        ch.close()
    finally:
        proc2.kill()
        proc2.wait()
