import glob, re, statistics, sys
R=sys.argv[1]
def read(t):
    d={}
    for f in sorted(glob.glob(f"{R}/{t}_*.txt")):
        for line in open(f):
            m=re.match(r"(\S+)\s+(\S+)\s+median\s+([\d.]+) us/cfg\s+\(cold\s+([\d.]+)\)", line)
            if m: d.setdefault((m[1],m[2]),[]).append((float(m[3]), float(m[4])))
    return d
b, r = read("base"), read("branch")
for k in b:
    bw=statistics.median(x[0] for x in b[k]); rw=statistics.median(x[0] for x in r[k])
    bc=statistics.median(x[1] for x in b[k]); rc=statistics.median(x[1] for x in r[k])
    print(f"{k[0]:16} {k[1]:8} code warm {bw:6.1f} -> {rw:6.1f} us/config ({bw/rw:.2f}x)   first rep {bc:6.1f} -> {rc:6.1f} ({bc/rc:.2f}x)  {len(b[k])}/{len(r[k])} runs")
