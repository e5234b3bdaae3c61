# One-shot probe for the catalog: idle power, clocks, memory, sustained bf16 GEMM (rate, clock, power),
# HBM copy (rate, power), small-kernel floor. Prints a JSON summary; never changes any GPU setting.
import json, subprocess, threading, time, torch

def smi(q):
    out = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader,nounits", "-i", "0"], capture_output=True, text=True).stdout
    return [x.strip() for x in out.strip().split(",")]

Q = "power.draw,clocks.sm,clocks.mem,temperature.gpu,utilization.gpu"
res = {"name": smi("name")[0], "static": dict(zip(["memory.total_mib","power.limit_w","clocks.max.sm_mhz","clocks.max.mem_mhz","driver"], smi("memory.total,power.limit,clocks.max.sm,clocks.max.mem,driver_version")))}
time.sleep(3)
idle = [smi(Q) for _ in range(5) if not time.sleep(0.5)]
res["idle"] = idle

class Sampler:
    def __init__(self): self.s=[]; self.stop=False
    def run(self):
        while not self.stop:
            self.s.append(smi(Q)); time.sleep(0.25)
def sampled(fn, seconds):
    sm = Sampler(); t = threading.Thread(target=sm.run); t.start()
    t0=time.time(); n=0
    while time.time()-t0 < seconds:
        fn(); n+=1
    torch.cuda.synchronize(); sm.stop=True; t.join()
    return sm.s
def median(x): x=sorted(x); return x[len(x)//2]
def steady(samples):
    s = samples[len(samples)//2:]
    return {"power_w": median([float(a[0]) for a in s]), "sm_mhz": median([float(a[1]) for a in s]), "mem_mhz": median([float(a[2]) for a in s]), "temp_c": median([float(a[3]) for a in s]), "n": len(s)}

def timed(fn, reps):
    st=torch.cuda.Event(enable_timing=True); en=torch.cuda.Event(enable_timing=True)
    st.record()
    for _ in range(reps): fn()
    en.record(); torch.cuda.synchronize(); return st.elapsed_time(en)/reps/1e3

n=8192
a=torch.randn(n,n,device="cuda",dtype=torch.bfloat16); b=torch.randn(n,n,device="cuda",dtype=torch.bfloat16); c=torch.empty(n,n,device="cuda",dtype=torch.bfloat16)
mm=lambda: torch.matmul(a,b,out=c)
for _ in range(20): mm()
torch.cuda.synchronize()
res["gemm_cold_tflops"] = 2*n**3/timed(mm,20)/1e12
def gemm_burst():
    for _ in range(50): mm()
samples = sampled(gemm_burst, 20)
res["gemm_sustained"] = steady(samples)
res["gemm_hot_tflops"] = 2*n**3/timed(mm,100)/1e12
res["gemm_trace"] = samples[::8]

nbytes = 4<<30
x=torch.empty(nbytes//2, dtype=torch.bfloat16, device="cuda").normal_(); y=torch.empty_like(x)
cp=lambda: y.copy_(x)
for _ in range(5): cp()
res["copy_tb_per_s"] = 2*nbytes/timed(cp,20)/1e12
def copy_burst():
    for _ in range(20): cp()
res["copy_sustained"] = steady(sampled(copy_burst, 15))
del x,y
time.sleep(2)
# small-kernel floor: eager async dispatch, and CUDA graph replay
s = torch.ones(1024, device="cuda")
for _ in range(100): s.add_(1)
torch.cuda.synchronize()
N=20000
t0=time.perf_counter()
for _ in range(N): s.add_(1)
torch.cuda.synchronize()
res["eager_small_op_us"] = (time.perf_counter()-t0)/N*1e6
g=torch.cuda.CUDAGraph()
st=torch.cuda.Stream()
with torch.cuda.stream(st):
    for _ in range(3): s.add_(1)
torch.cuda.synchronize()
with torch.cuda.graph(g):
    for _ in range(1000): s.add_(1)
g.replay(); torch.cuda.synchronize()
t0=time.perf_counter()
for _ in range(10): g.replay()
torch.cuda.synchronize()
res["graph_small_op_us"] = (time.perf_counter()-t0)/10000*1e6
res["after"] = [smi(Q) for _ in range(3) if not time.sleep(0.5)]
res["date"] = time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime())
print(json.dumps(res, indent=1))
