"""python -m fijit: the fijit command (the C CLI the wheel installs as `fijit`), run
with the same arguments, so that there is one CLI whichever way it is started.

It is looked for in $FIJIT_BUILD_DIR when that is set, then where pip put this
package's scripts (the interpreter's scheme, then the user scheme), then in a source
tree's build/ beside python/, then on PATH.
"""
import os
import shutil
import sys
import sysconfig

_HERE = os.path.dirname(os.path.abspath(__file__))


def candidates():
    """Where the fijit command may be, in search order."""
    out = []
    if os.environ.get("FIJIT_BUILD_DIR"):
        out.append(os.path.join(os.path.abspath(os.environ["FIJIT_BUILD_DIR"]), "fijit"))
    for scheme in (None, f"{os.name}_user"):
        try:
            scripts = sysconfig.get_path("scripts", scheme) if scheme else \
                sysconfig.get_path("scripts")
        except KeyError:
            continue
        out.append(os.path.join(scripts, "fijit"))
    out.append(os.path.abspath(os.path.join(_HERE, "..", "..", "build", "fijit")))
    on_path = shutil.which("fijit")
    if on_path:
        out.append(on_path)
    return out


def find_cli():
    for path in candidates():
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    cli = find_cli()
    if cli is None:
        print("python -m fijit: the fijit command is not installed; looked in:\n  " +
              "\n  ".join(candidates()) + "\nInstall the package from a built tree "
              "(make; pip install ./python) or build it (make build/fijit).", file=sys.stderr)
        return 2
    sys.stdout.flush()
    os.execv(cli, [cli] + list(argv))


if __name__ == "__main__":
    sys.exit(main())
