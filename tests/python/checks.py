"""What the CPU test scripts of tests/python share: one line per check, the failures
counted, the exit status from them."""
import sys

failures = []


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name}{'' if ok else ': ' + str(detail)}", flush=True)
    if not ok:
        failures.append(name)


def raises(fn, cls):
    """The exception of class `cls` that fn() raised, else an AssertionError saying what
    happened instead (which no check expecting `cls` accepts)."""
    try:
        fn()
    except cls as e:
        return e
    except Exception as e:  # the wrong exception: report it
        return AssertionError(f"raised {type(e).__name__}: {e}")
    return AssertionError("raised nothing")


def finish(name):
    """Print the verdict of test script `name` and exit with it."""
    print(f"{name}: {'FAILED ' + str(len(failures)) if failures else 'all passed'}")
    sys.exit(1 if failures else 0)
