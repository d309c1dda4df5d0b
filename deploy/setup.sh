#!/usr/bin/env bash
# Installs every build and test dependency of gpusched from Debian 12 packages.
# Idempotent; runs as root (no sudo needed) or as a user with sudo.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git
  libuv1-dev                      # event loop
  libprotobuf-c-dev protobuf-c-compiler   # wire contract (code generated at build time)
  libnng-dev                      # transport
  libsqlite3-dev sqlite3          # audit store (sqlite3 CLI for inspecting it)
  jq                              # tests: the CLI's --json ids round-trip through jq
  libsodium-dev                   # BLAKE2b of the audit's hash chain and of tenant tokens
  libmicrohttpd-dev               # the /metrics endpoint's HTTP server (connection and header limits)
  libsystemd-dev                  # sd_notify: readiness, status and the watchdog under systemd
  systemd                         # test_units: systemd-analyze verify of deploy/*.service
  help2man                        # man pages from the programs' --help
  libvulkan-dev glslc             # the vulkan backend and its compute kernels (SPIR-V at build time)
  mesa-vulkan-drivers             # lavapipe: a conformant Vulkan driver on the CPU, for tests and CI
  spirv-tools                     # users' kernels: the SPIR-V validator (libSPIRV-Tools, C API)
  libspirv-cross-c-shared-dev     # users' kernels: reflection of a module's bindings
  openssl                         # test_tls makes its CA and certificates at test time
  iproute2                        # test_relay puts virtual machines in network namespaces
  libjansson-dev                  # JSON config and --json output
  libxxhash-dev                   # CHECKSUM instruction (XXH64)
  libcmocka-dev                   # unit and integration tests
  python3 python3-prometheus-client   # test_metrics parses /metrics with the reference parser
  python3-pytest python3-numpy    # the Python package's tests (python/)
  python3-grpcio python3-protobuf # the Kubernetes device plugin (gRPC to the kubelet) and its tests
  protobuf-compiler python3-yaml  # tests: the plugin's API against its .proto; the manifests parsed
  chromium                        # test_cli renders gpusched timeline in a real browser
  clang-format                    # style check
  buildah debootstrap             # test_container_build: the image, from a base made here (no registry)
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages already installed"
  exit 0
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
