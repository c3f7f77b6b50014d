#!/usr/bin/env bash
# install.pkgconfig: installs this build tree into a temporary prefix with
# cmake --install, then, with nothing but `pkg-config --cflags --libs jetrpc`
# against that prefix: compiles every installed header on its own, and builds,
# runs and checks test/install/consumer.c (an echo call over TCP). Also checks
# the installed tools and softub's names. It writes under its temporary folder
# only, which it removes at exit; the build tree's install_manifest.txt, which
# cmake --install rewrites, is put back as it was.
#
# Set by test/CMakeLists.txt: JET_BUILD_DIR, JET_SOURCE_DIR, JET_CMAKE,
# JET_PKG_CONFIG, JET_CC, JET_PROTOC_C, JET_VERSION, JET_BINDIR, JET_LIBDIR,
# JET_INCLUDEDIR (GNUInstallDirs, relative), JET_LINK_FLAGS (the build's own
# link options: the sanitizer runtimes the installed archive needs in such
# builds) and JET_SOFTUB (1 when softub is built).
set -euo pipefail

fail() {
  echo "install.pkgconfig: $*" >&2
  exit 1
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/jetrpc-install.XXXXXX")
manifest="$JET_BUILD_DIR/install_manifest.txt"
if [ -e "$manifest" ]; then cp -p "$manifest" "$tmp/install_manifest.saved"; fi
cleanup() {
  if [ -e "$tmp/install_manifest.saved" ]; then
    cp -p "$tmp/install_manifest.saved" "$manifest"
  else
    rm -f "$manifest"
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

prefix="$tmp/prefix"
if ! env -u DESTDIR "$JET_CMAKE" --install "$JET_BUILD_DIR" --prefix "$prefix" >"$tmp/install.log" 2>&1; then
  cat "$tmp/install.log" >&2
  fail "cmake --install failed"
fi

# jetrpc.pc: found in the prefix, naming it, with the project's version.
export PKG_CONFIG_PATH="$prefix/$JET_LIBDIR/pkgconfig"
cflags=$("$JET_PKG_CONFIG" --cflags jetrpc) || fail "pkg-config --cflags jetrpc failed"
libs=$("$JET_PKG_CONFIG" --libs jetrpc) || fail "pkg-config --libs jetrpc failed"
version=$("$JET_PKG_CONFIG" --modversion jetrpc)
[ "$version" = "$JET_VERSION" ] || fail "jetrpc.pc has version $version, the project $JET_VERSION"
case " $libs " in
  *" -L$prefix/$JET_LIBDIR "*) ;;
  *) fail "pkg-config --libs jetrpc names another prefix: $libs" ;;
esac

# The installed headers are the source tree's, each one compiling alone.
want=$(cd "$JET_SOURCE_DIR/include/jetrpc" && ls -- *.h)
have=$(cd "$prefix/$JET_INCLUDEDIR/jetrpc" 2>/dev/null && ls -- *.h) || have=""
[ "$want" = "$have" ] || fail "installed headers differ from include/jetrpc/: $(tr '\n' ' ' <<<"$have")"
for h in $have; do
  # shellcheck disable=SC2086 # the flags are words
  printf '#include <jetrpc/%s>\n' "$h" |
    "$JET_CC" -x c -fsyntax-only -Wall -Wextra -Werror $cflags - ||
    fail "jetrpc/$h does not compile on its own"
done

# A program of its own: the echo proto compiled here, the rest from pkg-config.
"$JET_PROTOC_C" --c_out="$tmp" -I"$JET_SOURCE_DIR/example/echo" \
  "$JET_SOURCE_DIR/example/echo/echo.proto"
# shellcheck disable=SC2086
"$JET_CC" -Wall -Wextra -Wno-unused-parameter -Werror -I"$tmp" $cflags -o "$tmp/consumer" \
  "$JET_SOURCE_DIR/test/install/consumer.c" "$tmp/echo.pb-c.c" $libs $JET_LINK_FLAGS ||
  fail "consumer.c does not build with: $cflags $libs"
out=$("$tmp/consumer") || fail "consumer exited with $?"
expected="response: hello from an installed jetrpc
attachment: attached (8 bytes)
server requests: 1"
[ "$out" = "$expected" ] || fail "consumer printed:
$out
instead of:
$expected"

# The tools, and softub in a folder of its own under both of its names.
"$prefix/$JET_BINDIR/jetrpc_bench" --help >/dev/null || fail "installed jetrpc_bench --help failed"
if [ "$JET_SOFTUB" = 1 ]; then
  for tool in softub_info softub_perf; do
    [ -x "$prefix/$JET_BINDIR/$tool" ] || fail "$tool is not installed"
  done
  so="$prefix/$JET_LIBDIR/softub/libsoftub.so"
  [ -f "$so" ] || fail "libsoftub.so is not installed"
  for name in liburma.so.0 liburma.so; do
    [ "$(readlink -f "$prefix/$JET_LIBDIR/softub/$name")" = "$(readlink -f "$so")" ] ||
      fail "softub/$name does not name the installed libsoftub.so"
  done
fi
echo "install.pkgconfig: installed jetrpc $version builds and runs a consumer"
