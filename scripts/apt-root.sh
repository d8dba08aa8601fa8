# Sourced by the setup scripts that install Debian packages: apt_root WHO WHAT PACKAGES MANUAL
# sets SUDO for apt-get (empty as root), or says in one line how to install PACKAGES by hand
# (MANUAL: where there is no apt-get) and exits 1.
apt_root() {
  local who=$1 what=$2 packages=$3 manual=$4
  if [ "$(id -u)" -eq 0 ]; then SUDO=; elif command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
    echo "$who: $what is missing and installing it needs root: run 'apt-get install -y --no-install-recommends $packages' as root" >&2
    exit 1
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "$who: no apt-get here; $manual" >&2
    exit 1
  fi
}
