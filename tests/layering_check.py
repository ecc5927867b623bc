"""The library's folders call one another in one direction only: no call circle
between folders of src/. Reads which folder defines and which uses each global
symbol from the built objects (nm), so a call through a public header counts as
much as an #include. Fails naming every circle, with the symbols that close it.

    python3 tests/layering_check.py OBJ_DIR OBJECT...   (make test-layering passes the
                                                       library's objects under build/obj)
"""
import collections
import os
import subprocess
import sys



def self_test():
    """The check finds a circle it is shown: two folders whose objects call each other."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        objs = []
        for folder, own, other in (("up", "up_f", "down_f"), ("down", "down_f", "up_f")):
            os.makedirs(os.path.join(tmp, folder))
            src, obj = os.path.join(tmp, folder, "x.c"), os.path.join(tmp, folder, "x.o")
            with open(src, "w") as f:
                f.write(f"int {other}(void);\nint {own}(void) {{ return {other}(); }}\n")
            subprocess.run(["cc", "-c", "-o", obj, src], check=True)
            objs.append(obj)
        r = subprocess.run([sys.executable, __file__, tmp] + objs, capture_output=True, text=True)
        if r.returncode != 1 or "down/ and up/ call each other" not in r.stderr:
            sys.exit(f"layering_check: the self-test's circle was not found:\n{r.stdout}{r.stderr}")


if len(sys.argv) == 2 and sys.argv[1] == "--self-test":
    self_test()
    sys.exit(0)
if len(sys.argv) < 3:
    sys.exit(__doc__)
obj_dir, objects = sys.argv[1], sys.argv[2:]
defined = {}                                   # symbol -> folder
used = collections.defaultdict(set)            # folder -> symbols
for path in objects:
    rel = os.path.relpath(path, obj_dir)
    folder = rel.split(os.sep)[0] if os.sep in rel else None
    if folder is None:
        continue  # the embedded templates: data, no calls
    out = subprocess.run(["nm", "-g", path], capture_output=True, text=True,
                         check=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TDBRC":
            defined[parts[2]] = folder
        elif len(parts) == 2 and parts[0] == "U":
            used[folder].add(parts[1])
if not defined:
    sys.exit(f"layering_check: no symbols in the objects given under {obj_dir}")

edges = collections.defaultdict(lambda: collections.defaultdict(set))
for folder, symbols in used.items():
    for symbol in symbols:
        to = defined.get(symbol)
        if to and to != folder:
            edges[folder][to].add(symbol)


def reaches(start, goal):
    seen, todo = set(), [start]
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        if node not in seen:
            seen.add(node)
            todo.extend(edges[node])
    return False


circles = [(a, b) for a in sorted(edges) for b in sorted(edges[a]) if a < b and reaches(b, a)]
for a, b in circles:
    back = [(x, y) for x in edges for y in edges[x] if reaches(b, x) and reaches(y, a)]
    print(f"layering_check: {a}/ and {b}/ call each other: {a} -> {b} "
          f"({', '.join(sorted(edges[a][b])[:3])}) and back through "
          + "; ".join(f"{x} -> {y} ({', '.join(sorted(edges[x][y])[:2])})" for x, y in back[:3]),
          file=sys.stderr)
order = " < ".join(sorted(set(defined.values()), key=lambda f: sum(reaches(f, g) for g in set(defined.values()))))
print("layering_check: " + ("no call circle between folders: " + order if not circles else
                            f"{len(circles)} circle(s)"))
sys.exit(1 if circles else 0)
