#!/usr/bin/env bash
# Fails when a public function of ampx.h (an AMPX_API declaration, in either
# tier) would be missing from the HTML reference for want of a doc comment,
# naming each one; also fails on Doxygen's other complaints about the
# comments (a bad command, a broken reference), which spoil the reference
# too. Undocumented structs, struct fields, macros and typedefs are only
# counted.
#
#   check_api_docs.sh <doxygen> <configured Doxyfile> <header> <scratch folder>
#
# It runs Doxygen with the docs target's own settings, so it checks what
# that target publishes, but writes XML (which says which members have a
# description) instead of HTML. The function list comes from the header
# itself, not from Doxygen: a declaration that Doxygen fails to parse is
# reported, not skipped. Exits 77 (skipped) without Doxygen, unless
# AMPX_REQUIRE_BINDINGS=1 (CI, which installs every tool) makes that a
# failure.
set -euo pipefail
doxygen=$1 doxyfile=$2 header=$3 work=$4
docs=$(cd "$(dirname "$0")/../docs" && pwd)

if ! command -v "$doxygen" >/dev/null; then
  if [ "${AMPX_REQUIRE_BINDINGS:-0}" = 1 ]; then
    echo "api_docs: FAILED: doxygen is not installed (AMPX_REQUIRE_BINDINGS=1; tools/deps.sh --bindings installs it)" >&2
    exit 1
  fi
  echo "SKIPPED: doxygen is not installed (tools/deps.sh --bindings installs it)"
  exit 77
fi

# Every AMPX_API declaration starts a line, after attribute macros such as
# AMPX_NODISCARD; the #define lines and comments that mention AMPX_API
# do not.
declared=$(grep -E '^[[:space:]]*([A-Z_]+(\([^)]*\))?[[:space:]]+)*AMPX_API[[:space:]]' "$header" |
           sed -E 's/.*AMPX_API[[:space:]][^(]*\<(ampx_[A-Za-z0-9_]+)[[:space:]]*\(.*/\1/')
if [ -z "$declared" ]; then
  echo "api_docs: FAILED: no AMPX_API declaration found in $header" >&2
  exit 1
fi
if unparsed=$(grep -Ev '^ampx_[A-Za-z0-9_]+$' <<<"$declared"); then
  echo "api_docs: FAILED: AMPX_API declarations whose function name this check cannot find:" >&2
  echo "$unparsed" >&2
  exit 1
fi

rm -rf "$work"
mkdir -p "$work"
# Later settings override the included ones.
cat >"$work/Doxyfile" <<EOF
@INCLUDE         = "$doxyfile"
INPUT            = "$header" "$docs/ampx.dox"
OUTPUT_DIRECTORY = "$work"
WARN_LOGFILE     = "$work/warnings.log"
GENERATE_HTML    = NO
GENERATE_XML     = YES
XML_PROGRAMLISTING = NO
EOF
"$doxygen" "$work/Doxyfile"

# One line per function Doxygen found: name, header line, and 1 when it has
# a brief or detailed description (a <para> in one of them), else 0.
found=$(awk '
  /<memberdef kind="function"/ { in_fn = 1; in_doc = 0; name = ""; line = "?"; doc = 0 }
  !in_fn { next }
  name == "" && /<name>/ { name = $0; sub(/.*<name>/, "", name); sub(/<\/name>.*/, "", name) }
  /<(briefdescription|detaileddescription)>/ { in_doc = 1 }
  in_doc && /<para>/ { doc = 1 }
  /<\/(briefdescription|detaileddescription)>/ { in_doc = 0 }
  /<location / && match($0, / line="[0-9]+"/) { line = substr($0, RSTART + 7, RLENGTH - 8) }
  /<\/memberdef>/ { print name, line, doc; in_fn = 0 }
' "$work"/xml/*.xml)

declare -A line_of doc_of
while read -r name line doc; do
  line_of[$name]=$line
  doc_of[$name]=$doc
done <<<"$found"

failed=0
count=0
while read -r name; do
  count=$((count + 1))
  if [ -z "${doc_of[$name]:-}" ]; then
    echo "api_docs: $name is declared AMPX_API in $header, but Doxygen does not see it as a function (a macro in its declaration that docs/Doxyfile.in's PREDEFINED does not expand?)" >&2
    failed=1
  elif [ "${doc_of[$name]}" = 0 ]; then
    echo "$header:${line_of[$name]}: $name has no doc comment (/** ... */ right before its declaration; declarations sharing one go between /** @{ */ and /** @} */)" >&2
    failed=1
  fi
done <<<"$declared"

# Doxygen repeats a complaint for each place a comment is shown.
if other=$(grep -v 'is not documented\.$' "$work/warnings.log" | awk '!seen[$0]++' | grep .); then
  echo "api_docs: Doxygen's complaints about the doc comments:" >&2
  echo "$other" >&2
  failed=1
fi
if [ "$failed" = 1 ]; then
  echo "api_docs: FAILED" >&2
  exit 1
fi
undocumented=$(grep -c 'is not documented\.$' "$work/warnings.log" || true)
echo "api_docs: all $count AMPX_API functions have a doc comment"
echo "api_docs: note: $undocumented other declarations (structs, struct fields, macros, typedefs) have none; see $work/warnings.log"
