#!/usr/bin/env bash
# The repository's own text speaks of the software, not of how it was made.
# Checks, over every tracked text file (every file when this is not a git
# checkout), that:
#   1. nothing reads as a work log: sessions, issues or rounds of work
#      named by their numbers (a command's --rounds option is not one, nor
#      is "issues" as a verb followed by a count). A figure carries its
#      machine, date and command instead.
#   2. every repository path named in text (src/..., templates/...,
#      tests/... ending in a source suffix) names a file that exists;
#   3. README.md is a front door, not a manual's worth: at most 25 KB;
#   4. README.md's C quick start is examples/quickstart.c, byte for byte;
#   5. every relative link in README.md and docs/*.md names a file that
#      exists, and a #section of a Markdown file that has it.
# Usage: bash tests/worklog_check.sh [REPO_ROOT]   (default: the current directory)
set -u
cd "${1:-.}" || exit 2
self=tests/worklog_check.sh
fail=0
problem() { echo "worklog_check: $*" >&2; fail=1; }

# Text files to read, NUL-separated, without this script (it spells the patterns).
list_files() {
    if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        git ls-files -z | grep -zv -x -e "$self" -e 'LICENSE'
    else
        find . -path ./.git -prune -o -path ./build -prune -o -type f -print0 |
            sed -z 's|^\./||' | grep -zv -x -e "$self" -e 'LICENSE'
    fi
}
# grep -I skips binary files; -H names the file even when there is one.
grep_files() { list_files | xargs -0 -r grep -HnIiE "$@" --; }

# 1. Work-log wording. (The verb "issues" before a count is allowed; "issues"
# before a '#' and a number is not.)
worklog='\bsessions? [0-9]+|\bissue #?[0-9]+\b|\bissues #[0-9]+|(^|[^-])\brounds? [0-9]+\b'
if hits=$(grep_files "$worklog"); then
    problem "text that reads as a work log (say what the software does; give a figure its machine, date and command):"
    printf '%s\n' "$hits" | cut -c1-200 >&2
fi

# 2. Paths that name no file. A path is taken only where it starts the text
# or follows a space, quote, bracket or backtick (not ~/.cache/..., not
# build/tests/...), and only with a source suffix, so that directories,
# build products and command lines are not mistaken for files.
roots='(bench|cache|docs|examples|fuzz|include|python|scripts|src|templates|tests|tools)'
path_re="(^|[][ \"'\`(<:=,])$roots/[A-Za-z0-9_./-]*\.(c|h|cu|cuh|py|sh|sql|toml|in)\b"
missing=$(grep_files -o "$path_re" | while IFS= read -r hit; do
    file=${hit%%:*}
    path=$(printf '%s' "${hit#*:*:}" | sed -E "s/^[][ \"'\`(<:=,]//")
    [ -e "$path" ] || printf '%s: %s\n' "$file" "$path"
done | sort -u)
if [ -n "$missing" ]; then
    problem "paths that name no file in the repository:"
    printf '%s\n' "$missing" >&2
fi

# 3. README size.
limit=$((25 * 1024))
size=$(wc -c <README.md)
[ "$size" -le "$limit" ] || problem "README.md is $size bytes; at most $limit (move detail to docs/)"

# 4. The quick start shown is the one that `make test` builds.
if [ -f examples/quickstart.c ]; then
    shown=$(awk '/^## C quick start/ {s = 1} s && /^```c$/ {c = 1; next} c && /^```$/ {exit} c' README.md)
    if [ "$shown" != "$(cat examples/quickstart.c)" ]; then
        problem "README.md's C quick start differs from examples/quickstart.c (copy the file into its \`\`\`c block)"
    fi
fi

# 5. Links between the documents. An anchor is a heading as GitHub spells it:
# lower case, punctuation other than - and _ dropped, spaces as -.
if ! python3 - <<'PY'
import glob, os, re, sys
def anchors(path):
    text = re.sub(r"```.*?```", "", open(path, encoding="utf-8").read(), flags=re.S)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.*)$", text, flags=re.M)}
bad = []
for doc in ["README.md"] + sorted(glob.glob("docs/*.md")):
    text = re.sub(r"```.*?```", "", open(doc, encoding="utf-8").read(), flags=re.S)
    for link in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", link):
            continue
        path, _, anchor = link.partition("#")
        target = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
        if not os.path.exists(target):
            bad.append(f"{doc}: {link}: no such file")
        elif anchor and target.endswith(".md") and anchor not in anchors(target):
            bad.append(f"{doc}: {link}: no such section")
for b in bad:
    print(b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
then
    problem "links between the documents that lead nowhere (above)"
fi

[ $fail = 0 ] && echo "worklog_check: ok"
exit $fail
