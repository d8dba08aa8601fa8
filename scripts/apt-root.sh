# Sourced by the setup scripts that install Debian packages: apt_root WHO WHAT PACKAGES MANUAL
# sets SUDO for apt-get (empty as root; sudo where it needs no password) and returns 0; without
# root it says in one line what needs root and returns 1, so the caller skips that part (the
# tests that need it are skipped, saying why) - unless SCABBARD_REQUIRE_PEERS is set (CI), when
# it exits 1.  Where there is no apt-get it says how to install by hand (MANUAL) the same way.
apt_root() {
  local who=$1 what=$2 packages=$3 manual=$4 why=
  if [ "$(id -u)" -eq 0 ]; then SUDO=;
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO=sudo;
  else why="installing $what needs root: as root, run 'apt-get install -y --no-install-recommends $packages'"
  fi
  if [ -z "$why" ] && ! command -v apt-get >/dev/null 2>&1; then
    why="no apt-get here; $manual"
  fi
  [ -z "$why" ] && return 0
  if [ -n "${SCABBARD_REQUIRE_PEERS:-}" ]; then
    echo "$who: $why (SCABBARD_REQUIRE_PEERS is set)" >&2
    exit 1
  fi
  echo "$who: $why; skipping it - the tests that need it are skipped, saying so" >&2
  return 1
}
