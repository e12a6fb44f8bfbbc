#!/usr/bin/env bash
# Fails when a public function of ampx.h (an AMPX_API declaration, in either
# tier) would be missing from the HTML reference for want of a doc comment,
# naming each one; also fails on Doxygen's other complaints about the
# comments (a bad command, a broken reference), which spoil the reference
# too. Undocumented structs, struct fields, macros and typedefs are only
# counted. Before Doxygen (and without it) it checks the header's prose:
# every section heading is in the Contents list at the top (and every entry
# there is a section), and every ampx_ name a comment mentions -- joined
# where a line break splits it after an underscore; `ampx_x_*` stands for
# every name starting so -- is declared in the header.
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

if ! python3 - "$header" <<'PY'
import re, sys

path = sys.argv[1]
header = open(path).read()
lines = header.split("\n")
problems = []

# The Contents list against the headings ("/* N. Title */" under a rule).
listed = {}
block = re.search(r"\n \* Contents\n((?: \*\s+\d+\..*\n)+)", header)
for line in block.group(1).splitlines() if block else []:
    number, title = re.match(r" \*\s+(\d+)\.\s+(.*)", line).groups()
    listed[int(number)] = title.strip()
if not listed:
    problems.append("no Contents list (' * Contents' followed by ' *   N. Title' lines)")
headings = {}
for i, line in enumerate(lines[:-1]):
    if re.fullmatch(r"/\* =+ \*/", line):
        heading = re.match(r"/\* (\d+)\. (.*?)\s*\*/$", lines[i + 1])
        if heading:
            headings[int(heading.group(1))] = (heading.group(2), i + 2)
for number, (title, line) in sorted(headings.items()):
    stem = re.split(r"[:(]", title)[0].strip()
    if number not in listed:
        problems.append(f"{path}:{line}: section {number} ({title}) is missing from the Contents list")
    elif not listed[number].startswith(stem):
        problems.append(f"{path}:{line}: section {number} is '{title}', the Contents list says "
                        f"'{listed[number]}'")
for number in sorted(set(listed) - set(headings)):
    problems.append(f"the Contents list names section {number} ({listed[number]}), which has no heading")

# Comments apart from code (string literals skipped); what the code names
# is what the header declares.
code, comments = [], []
at = 0
while at < len(header):
    if header.startswith("/*", at):
        end = header.index("*/", at + 2)
        comments.append((header.count("\n", 0, at) + 1, header[at + 2:end]))
        at = end + 2
    elif header.startswith("//", at):
        end = header.find("\n", at)
        end = len(header) if end < 0 else end
        comments.append((header.count("\n", 0, at) + 1, header[at + 2:end]))
        at = end
    elif header[at] == '"':
        end = at + 1
        while header[end] != '"':
            end += 2 if header[end] == "\\" else 1
        at = end + 1
    else:
        code.append(header[at])
        at += 1
declared = set(re.findall(r"\bampx_\w+", "".join(code)))
for first_line, text in comments:
    joined = ""
    for k, line in enumerate(re.sub(r"^\s*\*?\s?", "", l) for l in text.split("\n")):
        if k and re.search(r"\bampx_\w*_$", joined) and re.match(r"\s*\w", line):
            joined += line.lstrip()
        else:
            joined += "\n" + line
    for name in sorted(set(re.findall(r"\bampx_\w+\*?", joined))):
        known = (any(d.startswith(name[:-1]) for d in declared) if name.endswith("*")
                 else name in declared)
        if not known:
            problems.append(f"{path}:{first_line}: the comment starting here names {name}, "
                            "which the header does not declare")
for problem in problems:
    print("api_docs:", problem, file=sys.stderr)
sys.exit(1 if problems else 0)
PY
then
  echo "api_docs: FAILED (the header's Contents list or the names its comments mention)" >&2
  exit 1
fi

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
