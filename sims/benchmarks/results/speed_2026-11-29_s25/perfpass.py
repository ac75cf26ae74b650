import os, sys, yaml, gc, time
from sims.benchmarks import speed
from sims.benchmarks.speed import REPO, WORKLOADS
from sims.hardware import read_hardware_file
hardware = read_hardware_file(REPO / "conf/hardware/h100.yaml"); hardware["efficiency_table"]=None; hardware["nodes"]=2
ctl = os.open(os.environ["PERF_CTL"], os.O_WRONLY); ack = os.open(os.environ["PERF_ACK"], os.O_RDONLY)
orig = speed.simulate_many; first = [True]
def wrapped(*a, **k):
    if not first[0]: return orig(*a, **k)
    first[0] = False
    os.write(ctl, b"enable\n"); os.read(ack, 5)
    r = orig(*a, **k)
    os.write(ctl, b"disable\n"); os.read(ack, 5)
    return r
speed.simulate_many = wrapped
for arg in sys.argv[1:]:
    m, mode = arg.split(":"); first[0] = arg.endswith("*") or arg == sys.argv[-1]
    mode = mode.rstrip("*")
    hf = yaml.safe_load((REPO / f"conf/model/{m}.yaml").read_text())["hf_config"]
    speed.measure(hf, hardware, [x for x in WORKLOADS if x["mode"] == mode][0], 0.0)
