#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# bench-proc.py NAME=PID...: per process "name cpu_s rchar wchar read_bytes
# write_bytes blkio_ticks hwm_kib" (blkio: delayacct_blkio_ticks summed over
# the live threads, in clock ticks).
import os, sys
tck = os.sysconf("SC_CLK_TCK")
for arg in sys.argv[1:]:
    name, pid = arg.split("=")
    f = open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()
    cpu = (int(f[11]) + int(f[12])) / tck
    io = dict(l.split(": ") for l in open("/proc/%s/io" % pid).read().splitlines())
    blkio = 0
    for t in os.listdir("/proc/%s/task" % pid):
        try:
            blkio += int(open("/proc/%s/task/%s/stat" % (pid, t)).read().rsplit(")", 1)[1].split()[39])
        except (OSError, IndexError, ValueError):
            pass
    hwm = 0
    for line in open("/proc/%s/status" % pid):
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1])
    print(name, "%.2f" % cpu, io["rchar"], io["wchar"], io["read_bytes"], io["write_bytes"], blkio, hwm)
