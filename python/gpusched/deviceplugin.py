"""gpusched's Kubernetes device plugin (docs/kubernetes.md): advertises shares of the node's
gpusched adapters to the kubelet as an extended resource (gpusched.io/vgpu by default), and on
Allocate makes the pod a tenant of its own and hands it the daemon's socket and the tenant's
token.

It speaks the kubelet's device-plugin API, v1beta1, over gRPC (python3-grpcio): it serves
DevicePlugin on a socket in the kubelet's plugin directory and registers there with the
kubelet's Registration service. Written in Python because Debian's gRPC for C is C++ only
while python3-grpcio is the maintained binding, and this is a small control program: a few
calls when pods start, none on the submission path. It administers tenants through the
`gpusched` command line (tenant ls/create/rm, info), with the administrator's token in its
environment, never on a command line.

    python3 -m gpusched.deviceplugin --help
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
from concurrent import futures
from typing import Dict, List, Optional, Tuple

from . import _kubelet_api as api

log = logging.getLogger("gpusched-device-plugin")

HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"
TENANT_PREFIX = "k8s-"


class PluginError(Exception):
    pass


class Daemon:
    """The node's gpuschedd, through the gpusched command line with the administrator's
    token."""

    def __init__(self, gpusched: str, url: str, token: str, timeout_ms: int = 5000):
        self.argv = [gpusched, "--url", url, "--timeout", str(timeout_ms), "--json"]
        self.env = dict(os.environ, GPUSCHED_TOKEN=token)

    def run(self, *args: str) -> List[dict]:
        """The command's JSON documents; PluginError with its message when it fails."""
        try:
            p = subprocess.run(self.argv + list(args), env=self.env, capture_output=True,
                               text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise PluginError(f"gpusched {' '.join(args)}: {e}") from e
        if p.returncode != 0:
            raise PluginError(f"gpusched {' '.join(args)}: exit {p.returncode}: "
                              f"{p.stderr.strip()[-300:]}")
        return [json.loads(line) for line in p.stdout.splitlines() if line.strip()]

    def adapters(self) -> List[Tuple[int, bool]]:
        """(adapter id, healthy) of every adapter."""
        info = self.run("info")[0]
        return [(a["id"], not a.get("device_dead") and not a.get("device_retrying"))
                for a in info["adapters"]]

    def tenants(self) -> List[str]:
        docs = self.run("tenant", "ls")
        rows = docs[0] if docs and isinstance(docs[0], list) else docs
        return [t["name"] for t in rows]

    def tenant_create(self, name: str, share: int, memory_quota: int) -> str:
        args = ["tenant", "create", name, "--share", str(share)]
        if memory_quota:
            args += ["--memory-quota", str(memory_quota)]
        doc = self.run(*args)[0]
        return doc["token"]

    def tenant_rm(self, name: str) -> None:
        """Removes a tenant, and first its devices (an earlier pod's, gone)."""
        self.run("tenant", "rm", name, "--release-devices")


def device_ids(adapters: List[Tuple[int, bool]], shares: int) -> List[Tuple[str, int, bool]]:
    """(device id, adapter, healthy) of every share: gpusched-a<ADAPTER>-<K>."""
    return [(f"gpusched-a{a}-{k}", a, ok) for a, ok in adapters for k in range(shares)]


_DEVICE = re.compile(r"gpusched-a(\d+)-(\d+)")
_TENANT = re.compile(r"k8s(?:-a\d+x[0-9a-f]+)+")


def share_set(ids: List[str]) -> Dict[int, int]:
    """The shares of device ids as {adapter: bitmask of shares}."""
    out: Dict[int, int] = {}
    for d in ids:
        m = _DEVICE.fullmatch(d)
        if not m:
            raise ValueError(f"not a device of this plugin: {d}")
        a, k = int(m.group(1)), int(m.group(2))
        out[a] = out.get(a, 0) | 1 << k
    return out


def tenant_name(shares: Dict[int, int]) -> str:
    """The tenant of a pod's shares, which names them all, so that any later pod's shares
    find it without state kept here (the plugin restarts with its pod): k8s-a0x6 holds shares
    1 and 2 of adapter 0."""
    return TENANT_PREFIX + "-".join(f"a{a}x{m:x}" for a, m in sorted(shares.items()))


def shares_of(tenant: str) -> Optional[Dict[int, int]]:
    """The shares a tenant made by tenant_name holds, or None for any other tenant."""
    if not _TENANT.fullmatch(tenant):
        return None
    return {int(a): int(m, 16) for a, m in re.findall(r"a(\d+)x([0-9a-f]+)", tenant)}


def overlaps(x: Dict[int, int], y: Dict[int, int]) -> bool:
    return any(x.get(a, 0) & m for a, m in y.items())


class Plugin:
    """The DevicePlugin service and the registration with the kubelet."""

    def __init__(self, args: argparse.Namespace, daemon: Daemon):
        self.a = args
        self.daemon = daemon
        self.lock = threading.Condition()
        self.devices: List[Tuple[str, int, bool]] = []
        self.version = 0  # grows with every change of self.devices
        self.stopping = False
        self.server = None

    # ---- health ----

    def refresh(self) -> None:
        """Reads the adapters; every share of a lost adapter, or all when the daemon does not
        answer, is Unhealthy."""
        try:
            devs = device_ids(self.daemon.adapters(), self.a.shares)
        except (PluginError, KeyError, ValueError) as e:
            log.warning("the daemon does not answer: %s", e)
            with self.lock:
                devs = [(d, a, False) for d, a, _ in self.devices]
        with self.lock:
            if devs != self.devices:
                self.devices = devs
                self.version += 1
                self.lock.notify_all()
                log.info("%d devices, %d healthy", len(devs), sum(ok for _, _, ok in devs))

    # ---- DevicePlugin ----

    def options(self, request, context):
        return api.M["DevicePluginOptions"](pre_start_required=False,
                                            get_preferred_allocation_available=False)

    def list_and_watch(self, request, context):
        seen = -1
        while True:
            with self.lock:
                while self.version == seen and not self.stopping and context.is_active():
                    self.lock.wait(timeout=1.0)
                if self.stopping or not context.is_active():
                    return
                seen = self.version
                devs = list(self.devices)
            yield api.M["ListAndWatchResponse"](devices=[
                api.M["Device"](ID=d, health=HEALTHY if ok else UNHEALTHY) for d, _, ok in devs])

    def preferred(self, request, context):
        return api.M["PreferredAllocationResponse"]()

    def pre_start(self, request, context):
        return api.M["PreStartContainerResponse"]()

    def allocate(self, request, context):
        import grpc
        out = api.M["AllocateResponse"]()
        with self.lock:
            by_id = {d: (a, ok) for d, a, ok in self.devices}
        for creq in request.container_requests:
            ids = list(creq.devices_ids)
            unknown = [d for d in ids if d not in by_id]
            if not ids or unknown:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"unknown devices {unknown}" if unknown else "no devices")
            shares = share_set(ids)
            name = tenant_name(shares)
            if len(name) > 63:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"shares on {len(shares)} adapters: too many for one pod")
            try:
                # A share belongs to one pod at a time: every tenant that held any of these
                # (an earlier pod's, even from before this plugin restarted) goes first,
                # with its devices.
                for t in self.daemon.tenants():
                    held = shares_of(t)
                    if held is not None and overlaps(held, shares):
                        self.daemon.tenant_rm(t)
                token = self.daemon.tenant_create(name, self.a.share_per_device * len(ids),
                                                  self.a.memory_quota_per_device * len(ids))
            except Exception as e:  # PluginError, or an answer of an unexpected shape
                log.error("allocate %s: %s", ids, e)
                context.abort(grpc.StatusCode.UNAVAILABLE, f"{type(e).__name__}: {e}")
            adapter = min(shares)
            r = out.container_responses.add()
            r.envs["GPUSCHED_URL"] = "ipc://" + os.path.join(self.a.container_socket_dir,
                                                             self.a.socket_name)
            r.envs["GPUSCHED_TOKEN"] = token
            r.envs["GPUSCHED_ADAPTER"] = str(adapter)
            # Read-only: a pod may connect to the socket but never replace it.
            r.mounts.add(container_path=self.a.container_socket_dir,
                         host_path=self.a.host_socket_dir, read_only=True)
            r.annotations["gpusched.io/tenant"] = name
            log.info("allocated %s to tenant %s (adapter %d)", ids, name, adapter)
        return out

    # ---- serving and registering ----

    def endpoint(self) -> str:
        return os.path.join(self.a.kubelet_dir, self.a.endpoint)

    def serve(self) -> None:
        import grpc
        M = api.M
        handlers = {
            "GetDevicePluginOptions": grpc.unary_unary_rpc_method_handler(
                self.options, M["Empty"].FromString, M["DevicePluginOptions"].SerializeToString),
            "ListAndWatch": grpc.unary_stream_rpc_method_handler(
                self.list_and_watch, M["Empty"].FromString,
                M["ListAndWatchResponse"].SerializeToString),
            "GetPreferredAllocation": grpc.unary_unary_rpc_method_handler(
                self.preferred, M["PreferredAllocationRequest"].FromString,
                M["PreferredAllocationResponse"].SerializeToString),
            "Allocate": grpc.unary_unary_rpc_method_handler(
                self.allocate, M["AllocateRequest"].FromString,
                M["AllocateResponse"].SerializeToString),
            "PreStartContainer": grpc.unary_unary_rpc_method_handler(
                self.pre_start, M["PreStartContainerRequest"].FromString,
                M["PreStartContainerResponse"].SerializeToString),
        }
        path = self.endpoint()
        if os.path.exists(path):
            os.unlink(path)
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(f"{api.PACKAGE}.DevicePlugin", handlers),))
        self.server.add_insecure_port("unix:" + path)
        self.server.start()
        log.info("serving on %s", path)

    def register(self) -> None:
        import grpc
        kubelet = os.path.join(self.a.kubelet_dir, self.a.kubelet_socket)
        with grpc.insecure_channel("unix:" + kubelet) as ch:
            call = ch.unary_unary(api.method_path("Registration", "Register"),
                                  request_serializer=api.M["RegisterRequest"].SerializeToString,
                                  response_deserializer=api.M["Empty"].FromString)
            call(api.M["RegisterRequest"](version=api.VERSION, endpoint=self.a.endpoint,
                                          resource_name=self.a.resource,
                                          options=api.M["DevicePluginOptions"]()),
                 timeout=10)
        log.info("registered %s with the kubelet at %s", self.a.resource, kubelet)

    def stop(self) -> None:
        with self.lock:
            self.stopping = True
            self.lock.notify_all()
        if self.server is not None:
            self.server.stop(grace=2).wait(5)
            self.server = None


def _stat(path: str) -> Optional[Tuple[int, int]]:
    try:
        st = os.stat(path)
        return (st.st_dev, st.st_ino)
    except OSError:
        return None


def run(args: argparse.Namespace, stop: threading.Event) -> int:
    with open(args.admin_token_file) as f:
        token = f.read().strip()
    daemon = Daemon(args.gpusched, args.daemon_url, token)
    plugin = Plugin(args, daemon)
    plugin.refresh()
    kubelet = os.path.join(args.kubelet_dir, args.kubelet_socket)
    registered_to = None
    try:
        while not stop.is_set():
            # The kubelet wipes its plugin directory when it restarts: serve and register
            # again whenever our socket is gone or the kubelet's socket is a new one.
            if plugin.server is None or _stat(plugin.endpoint()) is None:
                plugin.stop()
                plugin.stopping = False
                plugin.serve()
                registered_to = None
            k = _stat(kubelet)
            if k is not None and k != registered_to:
                try:
                    plugin.register()
                    registered_to = k
                except Exception as e:  # grpc.RpcError: the kubelet is not there yet
                    log.warning("cannot register with the kubelet: %s", e)
            stop.wait(args.poll_seconds)
            plugin.refresh()
    finally:
        plugin.stop()
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python3 -m gpusched.deviceplugin",
        description="gpusched's Kubernetes device plugin: advertises each adapter of the "
        "node's gpuschedd as SHARES devices of RESOURCE to the kubelet (API v1beta1), and "
        "gives each pod that is allocated some a tenant of its own (share and memory quota in "
        "proportion), the daemon's socket directory and GPUSCHED_URL, GPUSCHED_TOKEN and "
        "GPUSCHED_ADAPTER. docs/kubernetes.md.")
    p.add_argument("--daemon-url", default="ipc:///run/gpusched-admin/gpusched.sock",
                   help="the node's gpuschedd, on a socket pods never see: the plugin sends "
                   "the administrator's token there (default %(default)s)")
    p.add_argument("--admin-token-file", required=True,
                   help="a file holding an administrator's token (a Secret's key)")
    p.add_argument("--gpusched", default="gpusched",
                   help="the gpusched command line (default %(default)s, from PATH)")
    p.add_argument("--resource", default="gpusched.io/vgpu",
                   help="the extended resource name (default %(default)s)")
    p.add_argument("--shares", type=int, default=10,
                   help="devices advertised per adapter, 1 to 64 (default %(default)s)")
    p.add_argument("--share-per-device", type=int, default=100,
                   help="tenant share per device a pod gets (default %(default)s)")
    p.add_argument("--memory-quota-per-device", type=int, default=0,
                   help="tenant memory quota in bytes per device; 0: none (default)")
    p.add_argument("--kubelet-dir", default="/var/lib/kubelet/device-plugins",
                   help="the kubelet's device-plugin directory (default %(default)s)")
    p.add_argument("--kubelet-socket", default="kubelet.sock",
                   help="the kubelet's registration socket in it (default %(default)s)")
    p.add_argument("--endpoint", default="gpusched.sock",
                   help="this plugin's socket in it (default %(default)s)")
    p.add_argument("--host-socket-dir", default="/run/gpusched",
                   help="the daemon's socket directory on the node (default %(default)s)")
    p.add_argument("--container-socket-dir", default="/run/gpusched",
                   help="where pods see it (default %(default)s)")
    p.add_argument("--socket-name", default="gpusched.sock",
                   help="the daemon's socket in that directory (default %(default)s)")
    p.add_argument("--poll-seconds", type=float, default=5.0,
                   help="how often adapters' health and the kubelet are checked "
                   "(default %(default)s)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = parser().parse_args(argv)
    if not 1 <= args.shares <= 64 or args.share_per_device < 1 or \
            args.memory_quota_per_device < 0 or \
            not re.fullmatch(r"[a-z0-9.-]+/[a-z0-9A-Z._-]+", args.resource):
        parser().error("--shares from 1 to 64, --share-per-device at least 1, "
                       "--resource DOMAIN/NAME")
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        return run(args, stop)
    except (OSError, PluginError) as e:
        log.error("%s", e)
        return 1


if __name__ == "__main__":
    sys.exit(main())
