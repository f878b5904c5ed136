#!/usr/bin/env bash
# Installs everything Sluice needs to build, test and run its main job on a
# fresh Debian 12 machine (run as root). Idempotent: safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config clang-format ca-certificates openssl
  libboost1.81-dev libboost-url1.81-dev
  libssl-dev libsimdjson-dev nlohmann-json3-dev
  libmongoc-dev libbson-dev libpq-dev libsqlite3-dev sqlite3 librabbitmq-dev
  prometheus-cpp-dev libyaml-cpp-dev libspdlog-dev libfmt-dev libcli11-dev
  libprotobuf-dev protobuf-compiler libncurses-dev tmux
  libgtest-dev libgmock-dev librapidcheck-dev libbenchmark-dev
  libexpat1-dev libjemalloc-dev libutf8proc-dev libre2-dev libhowardhinnant-date-dev
  python3-botocore python3-pika python3-pymongo gnuplot-nox
  postgresql rabbitmq-server
  prometheus
)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # postgresql, rabbitmq-server and prometheus try to start system services; we run
  # our own instances on private ports, so keep the packaged services down.
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  rm -f /usr/sbin/policy-rc.d
fi

if ! command -v npm >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi

# The SQS emulators (fauxqs; local-aws-sqs, the second server) and their Node 22
# runtime, pinned by tools/emulator's lockfile.
if [[ ! -x tools/emulator/node_modules/.bin/node ]] || [[ ! -d tools/emulator/node_modules/fauxqs ]] ||
  [[ ! -d tools/emulator/node_modules/local-aws-sqs ]]; then
  echo "install-deps: installing the SQS emulators (npm ci)"
  (cd tools/emulator && npm ci --no-audit --no-fund --loglevel=error)
fi
# Kubernetes' OpenAPI schemas and KEDA's CRD schemas, compiled (kubernetes-models,
# @kubernetes-models/keda), for the manifests' validation; pinned by tools/manifests'
# lockfile.
if [[ ! -d tools/manifests/node_modules/@kubernetes-models/keda ]]; then
  echo "install-deps: installing the Kubernetes and KEDA schemas (npm ci)"
  (cd tools/manifests && npm ci --no-audit --no-fund --loglevel=error)
fi
# OpenTelemetry's JS SDK and protobuf definitions for the tracing tests (a traced Node
# producer, a loopback OTLP receiver), pinned by tools/otel's lockfile.
if [[ ! -d tools/otel/node_modules/otlp-proto ]]; then
  echo "install-deps: installing the OpenTelemetry test tools (npm ci)"
  (cd tools/otel && npm ci --no-audit --no-fund --loglevel=error)
fi
# CongoDB, the MongoDB-wire server for the MongoDB sink tests: its dependencies pinned
# by tools/mongo-wire's lockfile, the server itself unpacked from its npm package (a
# plain install of that package fails on dependency versions that do not exist).
if [[ ! -d tools/mongo-wire/node_modules/mingo ]]; then
  echo "install-deps: installing the MongoDB-wire test server dependencies (npm ci)"
  (cd tools/mongo-wire && npm ci --no-audit --no-fund --loglevel=error)
fi
if [[ ! -f tools/mongo-wire/vendor/package/dist_ts/congodb/index.js ]]; then
  echo "install-deps: unpacking @push.rocks/smartmongo 2.2.0 (CongoDB)"
  mkdir -p tools/mongo-wire/vendor
  (cd tools/mongo-wire/vendor && npm pack --silent @push.rocks/smartmongo@2.2.0 >/dev/null \
    && tar xzf push.rocks-smartmongo-2.2.0.tgz && rm -f push.rocks-smartmongo-2.2.0.tgz)
fi
echo "install-deps: done"
