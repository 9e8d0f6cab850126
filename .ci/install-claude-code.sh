#!/usr/bin/env bash
# Install the pinned Claude Code CLI for tests/test_claude_code_e2e.py, plus the sandbox's tools.
#
#   bash .ci/install-claude-code.sh        (idempotent; prints the CLI's path on its last line)
#
# The CLI goes to ~/.cache/auto-optim/claude-code-<version> (CLAUDE_CODE_PREFIX overrides), where
# tests/claude_stub/session.py looks for it; a second run with that folder cached does nothing.
# Its sandbox needs bubblewrap and socat on Linux (Debian packages), installed with apt-get when
# missing. Without npm it installs nothing and says so: the end-to-end test then skips.
set -euo pipefail

VERSION="2.1.330"   # the version the hooks and settings were checked against; keep in step with session.py
PREFIX="${CLAUDE_CODE_PREFIX:-$HOME/.cache/auto-optim/claude-code-$VERSION}"
CLI="$PREFIX/node_modules/.bin/claude"

if [ "$(uname -s)" = Linux ] && ! { command -v bwrap && command -v socat; } >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq bubblewrap socat >/dev/null
fi

if [ -x "$CLI" ] && [ "$("$CLI" --version 2>/dev/null | cut -d' ' -f1)" = "$VERSION" ]; then
  echo "$CLI"; exit 0   # cached
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "install-claude-code: npm not found; the Claude Code end-to-end test will skip." >&2
  exit 0
fi
mkdir -p "$PREFIX"
npm install --prefix "$PREFIX" --no-audit --no-fund --loglevel=error "@anthropic-ai/claude-code@$VERSION"
# The package's postinstall puts the native binary in place; npm versions that hold back install
# scripts leave a stub, so run it by hand when the CLI does not answer with its version.
if [ "$("$CLI" --version 2>/dev/null | cut -d' ' -f1)" != "$VERSION" ]; then
  (cd "$PREFIX/node_modules/@anthropic-ai/claude-code" && node install.cjs)
fi
[ "$("$CLI" --version | cut -d' ' -f1)" = "$VERSION" ]
echo "$CLI"
