"""The package's surface: its ctypes structures match the C header's (sizes and offsets from
a program compiled against it), every public name is documented and typed, the reference in
docs/ is what pydoc makes of the code now, the version is the project's, and TLS options
given to connect() work without environment variables."""
import inspect
import os
import re
import socket
import subprocess
import sys
import tempfile
import ctypes

import pytest

import gpusched
from gpusched import _capi

from conftest import Daemon

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_structures_match_the_header():
    out = subprocess.run([os.environ["GS_ABI_SIZES"]], capture_output=True, text=True,
                         check=True).stdout
    checked = 0
    for line in out.splitlines():
        if line.startswith("const "):
            _, name, value = line.split()
            owner, _, attr = name.rpartition(".")
            got = getattr(_capi if owner == "_C" else gpusched, attr)
            assert got == int(value), f"{name}: the package has {got}, the header {value}"
            continue
        name, value = line.split()
        if "." in name:
            struct, field = name.split(".")
            got = getattr(getattr(_capi, struct), field).offset
        else:
            got = ctypes.sizeof(getattr(_capi, name))
        assert got == int(value), f"{name}: ctypes {got}, C {value}"
        checked += 1
    assert checked >= 30
    # The state names, by number, are the library's.
    name = _capi.lib.gs_packet_state_name
    name.restype, name.argtypes = ctypes.c_char_p, [ctypes.c_int]
    assert [name(i).decode() for i in range(len(gpusched.PACKET_STATES))] == \
        gpusched.PACKET_STATES


def test_datetime_is_exact():
    import datetime
    utc = datetime.timezone.utc
    t = datetime.datetime(2026, 11, 28, 10, 0, 0, 123456, tzinfo=utc)
    assert gpusched._time_ns(t) == 1_795_860_000_123_456_000


def public_callables():
    for name in gpusched.__all__:
        obj = getattr(gpusched, name)
        if inspect.isclass(obj):
            yield name, obj
            for mname, m in vars(obj).items():
                if not mname.startswith("_") and (inspect.isfunction(m) or
                                                  isinstance(m, property)):
                    yield f"{name}.{mname}", m
        elif inspect.isfunction(obj):
            yield name, obj


def test_everything_public_is_documented_and_typed():
    missing_doc, missing_hints = [], []
    for name, obj in public_callables():
        target = obj.fget if isinstance(obj, property) else obj
        if not inspect.getdoc(target):
            missing_doc.append(name)
        if inspect.isfunction(target):
            sig = inspect.signature(target)
            params = [p for p in sig.parameters.values() if p.name != "self"
                      and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
            if any(p.annotation is inspect.Parameter.empty for p in params) or \
                    (sig.return_annotation is inspect.Signature.empty and
                     target.__name__ != "__init__"):
                missing_hints.append(name)
    assert not missing_doc, f"no docstring: {missing_doc}"
    assert not missing_hints, f"no type hints: {missing_hints}"


def test_the_reference_is_current():
    """docs/python-reference.txt is python/reference.py's output for the code as it is."""
    got = subprocess.run([sys.executable, os.path.join(ROOT, "python", "reference.py")],
                         capture_output=True, text=True, check=True).stdout
    with open(os.path.join(ROOT, "docs", "python-reference.txt")) as f:
        assert f.read() == got, "run: python3 python/reference.py > docs/python-reference.txt"


def test_version_is_the_projects():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        m = re.search(r"project\(\s*gpusched\s+VERSION\s+([0-9.]+)", f.read())
    assert m and m.group(1) == gpusched.__version__


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_cert(d, name, ca=None, san=None):
    sh = lambda cmd: subprocess.run(cmd, shell=True, cwd=d, check=True,
                                    capture_output=True)
    if ca is None:
        sh(f"openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
           f"-keyout {name}.key -out {name}.pem -days 2 -subj /CN={name}")
    else:
        sh(f"printf 'subjectAltName={san}\\n' > {name}.ext && openssl req -new -newkey ec "
           f"-pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout {name}.key -out {name}.csr "
           f"-subj /CN={name} && openssl x509 -req -in {name}.csr -CA {ca}.pem -CAkey "
           f"{ca}.key -CAcreateserial -out {name}.pem -days 2 -extfile {name}.ext")
    sh(f"cat {name}.pem {name}.key > {name}-both.pem")
    return os.path.join(d, f"{name}-both.pem"), os.path.join(d, f"{name}.pem")


def test_tls_options_without_the_environment(monkeypatch):
    for var in ("GPUSCHED_TLS_CA", "GPUSCHED_TLS_CERT_KEY", "GPUSCHED_TLS_SERVER_NAME"):
        monkeypatch.delenv(var, raising=False)
    with tempfile.TemporaryDirectory(prefix="gs-python-tls.") as d:
        _, ca = make_cert(d, "ca")
        server, _ = make_cert(d, "server", "ca", "IP:127.0.0.1,DNS:daemon.test")
        client, _ = make_cert(d, "client", "ca", "DNS:client")
        _, other_ca = make_cert(d, "other")
        url = f"tls+tcp://127.0.0.1:{free_port()}"
        cfg = ('{"tls": {"cert_key_file": "%s", "ca_file": "%s"}, "tenants": '
               '[{"name": "a", "token": "t-a"}]}' % (server, ca))
        dm = Daemon(d, "-l", url, config=cfg)
        try:
            with gpusched.connect(url, "t-a", ca=ca, cert=client,
                                  server_name="daemon.test") as gpu:
                assert gpu.info()["tenant"] == "a"
            # Another CA, another expected name, no client certificate: not served.
            for kw in ({"ca": other_ca, "cert": client}, {"ca": ca, "cert": client,
                       "server_name": "elsewhere.test"}, {"ca": ca}):
                with pytest.raises(gpusched.GpuschedError):
                    with gpusched.connect(url, "t-a", timeout_ms=2000, **kw) as gpu:
                        gpu.info()
        finally:
            assert dm.stop() == 0
