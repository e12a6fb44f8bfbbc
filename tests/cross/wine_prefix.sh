#!/usr/bin/env bash
# wine_prefix.sh start|stop PREFIX WINE -- the Wine prefix ctest runs the
# Windows programs in (the wine_prefix fixture of tests/cross/CMakeLists.txt).
#
# start: creates PREFIX (once: ~6 s and ~700 MB, so under the build folder,
# never in $HOME), then starts a persistent wineserver and boots the prefix.
# Without a server that outlives each program, Wine's background services,
# started by the first program, hold ctest's output pipe open and ctest
# waits for them; with one warmed first, a program costs 0.05-0.7 s.
# AeDebug's Debugger is emptied so that a crash ends the program instead
# of starting winedbg, which would wait for input.
# stop: ends the server and every Wine process of the prefix.
set -euo pipefail
action=$1 prefix=$2 wine=$3
server="$(dirname "$wine")/wineserver64"
[ -x "$server" ] || server="$(dirname "$wine")/wineserver"
export WINEPREFIX="$prefix" WINEDEBUG=-all
# No Mono or Gecko installer (which would ask for a download).
export WINEDLLOVERRIDES="mscoree,mshtml="
case "$action" in
  start)
    mkdir -p "$prefix"
    # A server an interrupted run left behind would refuse a second one.
    "$server" -k 2>/dev/null || true
    setsid "$server" -p </dev/null >/dev/null 2>&1
    setsid "$wine" wineboot -i </dev/null >/dev/null 2>&1
    "$wine" reg add 'HKLM\Software\Microsoft\Windows NT\CurrentVersion\AeDebug' \
      /v Debugger /t REG_SZ /d '' /f </dev/null >/dev/null 2>&1
    "$wine" reg add 'HKLM\Software\Microsoft\Windows NT\CurrentVersion\AeDebug' \
      /v Auto /t REG_SZ /d 1 /f </dev/null >/dev/null 2>&1
    echo "wine prefix ready: $prefix"
    ;;
  stop)
    "$server" -k 2>/dev/null || true
    echo "wineserver stopped"
    ;;
  *)
    echo "usage: $0 start|stop PREFIX WINE" >&2
    exit 2
    ;;
esac
