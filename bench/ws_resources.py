#!/usr/bin/env python3
"""Registers and spills of each prefill module's Hopper main loop (fi_prefill_kernel_ws),
from a prewarm log written with FIJIT_LOG=4 (ptxas' resource lines per entry):
    python3 bench/ws_resources.py LOG
prints one line per spec that spills or whose wgmmas ptxas serialises (its notes
C7510-C7520, "wgmma.mma_async instructions are serialized": every MMA then waits for the
one before, which costs 25-40%), then a summary, which also counts the sm_90a specs whose
log held no resource lines for the loop. Of a tuple built in parts (the log's "building"
list), only the part that builds the loop is read: it is a stub in the others."""
import collections
import re
import sys


def main():
    spec, want, spill, rows, serial, specs = None, False, 0, [], {}, set()
    for line in open(sys.argv[1]):
        m = re.search(r"(\S+ q=.*?) on (\S+?)(, building [^,]*)?, ptxas", line)
        if m:  # the loop is empty but on sm_90a
            spec = m.group(1) if m.group(2) == "sm_90a" else None
            if spec:
                specs.add(spec)
            if m.group(3) and "fi_prefill_kernel_ws" not in m.group(3).split():
                spec = None  # a part where the loop is a stub
            continue
        note = re.search(r"\((C75\d\d)\) .*are serialized", line)
        if spec and note and "'fi_prefill_kernel_ws'" in line:
            serial.setdefault(spec, set()).add(note.group(1))
        if spec and "entry function 'fi_prefill_kernel_ws'" in line:
            want = True
            continue
        if want and "spill stores" in line:
            spill = int(re.search(r"(\d+) bytes spill stores", line).group(1))
        if want and "Used" in line:
            regs = int(re.search(r"Used (\d+) registers", line).group(1))
            rows.append((spec, regs, spill))
            want = False
    for spec, regs, spill in sorted(rows, key=lambda r: (-r[2], r[0])):
        if spill:
            print(f"  {spill:4d} B spilled, {regs} registers (kernel-wide): {spec}")
    for spec in sorted(serial):
        print(f"  wgmma serialised ({', '.join(sorted(serial[spec]))}): {spec}")
    unread = len(specs - {r[0] for r in rows})
    hist = collections.Counter(spill for _, _, spill in rows)
    print(f"Hopper main loop (fi_prefill_kernel_ws): {len(rows)} modules, "
          f"{hist.get(0, 0)} without spills; spill bytes: "
          + (", ".join(f"{b} B x{n}" for b, n in sorted(hist.items()) if b) or "none")
          + f"; wgmma serialised in {len(serial)}"
          + (f"; {unread} sm_90a specs without the loop's resource lines" if unread else ""))


if __name__ == "__main__":
    main()
